"""The one entry point verl calls: `register()` puts everything verl-bot adds into verl's registries.

verl 0.9.1 imports every `verl.plugins` entry point in every process that
imports `verl` (driver, TaskRunner, Ray workers) and logs a failure only at
DEBUG level. So `register()` checks verl's version itself (`verl_bot.compat`)
and raises `VerlApiMismatch` with a clear message when it does not match, logs
what it registered at INFO, and is idempotent (a second call does nothing).
"""

from __future__ import annotations

import logging
import os

from verl_bot.compat import SUPPORTED_VERL, VerlApiMismatch, check_verl_version

logger = logging.getLogger("verl_bot")

_registered: dict[str, list[str]] | None = None

__all__ = ["register", "VerlApiMismatch", "check_verl_version", "logger"]


def _ensure_logging() -> None:
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[verl-bot] %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(os.getenv("VERL_BOT_LOG_LEVEL", "INFO"))


def register() -> dict[str, list[str]]:
    """Register verl-bot's estimators, policy losses, reward managers, agent loops and hooks in verl. Idempotent.

    Returns what was registered, by kind: `{"cpu": [...], "adv_estimators": [...], "policy_losses": [...],
    "reward_managers": [...], "agent_loops": [...], "hooks": [...]}` (`cpu` is empty unless the CPU backend
    was selected with `VERL_PLATFORM=cpu`).
    """
    global _registered
    if _registered is not None:
        return _registered
    _ensure_logging()
    from verl_bot.cpu import quiet_known_noise

    quiet_known_noise()  # before anything imports verl's engines (a no-op unless VERL_PLATFORM=cpu)
    check_verl_version()

    from verl_bot import hooks
    from verl_bot.advantage import register_estimators
    from verl_bot.agent_loop import register_agent_loops
    from verl_bot.cpu import register_cpu_backend
    from verl_bot.losses import register_losses
    from verl_bot.rewards.manager import register_reward_managers

    registered = {
        "cpu": register_cpu_backend(),  # [] unless VERL_PLATFORM=cpu (see verl_bot/cpu/__init__.py)
        "adv_estimators": register_estimators(),
        "policy_losses": register_losses(),
        "reward_managers": register_reward_managers(),
        "agent_loops": register_agent_loops(),
        "hooks": hooks.install(),
    }
    _registered = registered
    logger.info(
        "registered in verl %s (pid %d): adv_estimator=%s policy_loss=%s reward_manager=%s agent_loop=%s hooks=%s "
        "cpu_backend=%s",
        SUPPORTED_VERL,
        os.getpid(),
        ",".join(registered["adv_estimators"]),
        ",".join(registered["policy_losses"]),
        ",".join(registered["reward_managers"]),
        ",".join(registered["agent_loops"]),
        ",".join(registered["hooks"]),
        ",".join(registered["cpu"]) or "off",
    )
    return registered
