"""The one entry point verl calls: `register()` puts everything verl-bot adds into verl's registries.

verl 0.9.1 imports every `verl.plugins` entry point in every process that
imports `verl` (driver, TaskRunner, Ray workers) and logs a failure only at
DEBUG level. So `register()` checks verl's API itself and raises
`VerlApiMismatch` with a clear message when it does not match, logs what it
registered at INFO, and is idempotent (a second call does nothing).
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger("verl_bot")

SUPPORTED_VERL = "0.9.1"

_registered: dict[str, list[str]] | None = None


class VerlApiMismatch(RuntimeError):
    """verl's installed version or API is not the one verl-bot was written against."""


def check_verl_version() -> None:
    """Raise `VerlApiMismatch` unless the installed verl is the supported version.

    `VERL_BOT_ALLOW_VERL_MISMATCH=1` turns the error into a warning (for trying a newer verl at your own risk).
    """
    import verl

    if verl.__version__ == SUPPORTED_VERL:
        return
    msg = f"verl-bot supports verl=={SUPPORTED_VERL}, found verl=={verl.__version__}"
    if os.getenv("VERL_BOT_ALLOW_VERL_MISMATCH") == "1":
        logger.warning("%s (continuing: VERL_BOT_ALLOW_VERL_MISMATCH=1)", msg)
        return
    raise VerlApiMismatch(msg + "; set VERL_BOT_ALLOW_VERL_MISMATCH=1 to try anyway")


def _ensure_logging() -> None:
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[verl-bot] %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(os.getenv("VERL_BOT_LOG_LEVEL", "INFO"))


def register() -> dict[str, list[str]]:
    """Register verl-bot's estimators, reward managers and the dense-reward plumbing in verl. Idempotent.

    Returns what was registered, by kind: `{"cpu": [...], "adv_estimators": [...], "reward_managers": [...],
    "patches": [...]}` (`cpu` is empty unless the CPU backend was selected with `VERL_PLATFORM=cpu`).
    """
    global _registered
    if _registered is not None:
        return _registered
    _ensure_logging()
    check_verl_version()

    from verl_bot import dense, streams
    from verl_bot.advantage import register_estimators
    from verl_bot.cpu import register_cpu_backend
    from verl_bot.rewards.manager import register_reward_managers

    registered = {
        "cpu": register_cpu_backend(),  # [] unless VERL_PLATFORM=cpu (see verl_bot/cpu/__init__.py)
        "adv_estimators": register_estimators(),
        "reward_managers": register_reward_managers(),
        "patches": dense.install() + streams.install(),
    }
    _registered = registered
    logger.info(
        "registered in verl %s (pid %d): adv_estimator=%s reward_manager=%s patches=%s cpu_backend=%s",
        SUPPORTED_VERL,
        os.getpid(),
        ",".join(registered["adv_estimators"]),
        ",".join(registered["reward_managers"]),
        ",".join(registered["patches"]),
        ",".join(registered["cpu"]) or "off",
    )
    return registered
