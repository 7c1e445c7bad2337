"""The one entry point verl calls: `register()` readies everything verl-bot adds to verl, in this process.

verl 0.9.1 imports every `verl.plugins` entry point in every process that imports `verl` (driver, TaskRunner, Ray
workers, vLLM servers, scripts) and logs a failure only at DEBUG level. `register()` (idempotent) checks verl's
version (`verl_bot.hooks.compat`), registers the CPU backend when it is selected (`VERL_PLATFORM=cpu`) and schedules
the registry entries and hooks (`verl_bot.hooks.install`), each for when verl imports the module it changes, as one
transaction: whatever fails undoes every change and logs one ERROR line, and a run whose config names verl-bot is
then stopped by verl's `validate_config` in one line (`refuse_verl_bot_runs`). It also sets the `verl_bot` logger's
level. Explained in docs/PLUGIN.md (All or nothing, Logging, What it changes in a run that does not use it).
"""

from __future__ import annotations

import functools
import logging
import os

from verl_bot.hooks.compat import VerlApiMismatch, check_verl_version
from verl_bot.hooks.transaction import LEDGER, Ledger

logger = logging.getLogger("verl_bot")
LEVEL_ENVS = ("VERL_BOT_LOG_LEVEL", "VERL_LOGGING_LEVEL")

_registered = False

__all__ = ["register", "VerlApiMismatch", "check_verl_version", "logger", "log_level"]


def log_level(environ: dict | None = None) -> int:
    """The `verl_bot` logger's level: the first of `LEVEL_ENVS` that names a level (any case), else INFO."""
    environ = os.environ if environ is None else environ
    for name in LEVEL_ENVS:
        level = logging.getLevelName(str(environ.get(name, "")).strip().upper())
        if isinstance(level, int):
            return level
    return logging.INFO


def _steps() -> None:
    from verl_bot import hooks
    from verl_bot.cpu import register_cpu_backend

    check_verl_version()
    register_cpu_backend()  # nothing unless VERL_PLATFORM=cpu (see verl_bot/cpu/__init__.py)
    hooks.install()


REFUSER_ATTR = "__verl_bot_refuser__"


def refuse_verl_bot_runs(failure: str) -> None:
    """verl-bot is off in this process (`failure`): from now on verl's `validate_config` stops a run whose config
    names verl-bot with one line, before Ray starts; any other run is checked by verl as before."""
    import verl
    import verl.utils.config as verl_config

    original = verl_config.validate_config
    if getattr(original, REFUSER_ATTR, False):
        return

    @functools.wraps(original)
    def validate_config(config, *args, **kwargs):
        from verl_bot.errors import VerlBotConfigError
        from verl_bot.hooks.compat import unsupported_message
        from verl_bot.launch.activation import why

        reason = why(config)
        if reason is not None:
            what = f"the run names verl-bot ({reason}); {failure}"
            raise VerlBotConfigError(unsupported_message(verl.__version__, what))
        return original(config, *args, **kwargs)

    setattr(validate_config, REFUSER_ATTR, True)
    verl_config.validate_config = validate_config


def register() -> Ledger:
    """Ready verl-bot in this process (idempotent); returns the ledger of its changes to verl (`changes`,
    `failure`: why verl-bot is off here, None while it is on)."""
    global _registered
    if not _registered:
        _registered = True
        logger.setLevel(log_level())
        LEDGER.on_failure = refuse_verl_bot_runs  # now or at a later import
        LEDGER.step("registering verl-bot in verl", _steps)
    return LEDGER
