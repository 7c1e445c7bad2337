"""The `bot` reward manager's knobs (`reward.reward_kwargs.bot`), read by the manager and by the start-up checks.

Kept apart from the manager so that the driver's start-up checks
(`verl_bot.hooks.validate_config`) and the trainer's hooks read the same
defaults without importing the reward loop.
"""

from __future__ import annotations

from typing import Any

from verl_bot.errors import VerlBotConfigError

DEFAULTS = {
    "w_global": 1.0,
    "w_local": 1.0,
    "local_clip": 1.0,
    "timeout_s": 120.0,
    "retries": 2,
    "failure_score": 0.0,
    "token_level": True,
    "fn_workers": 2,
    "max_failure_rate": 0.5,
    "failure_patience": 3,
}


def manager_settings(config: Any) -> dict[str, Any]:
    """The `bot` manager's knobs: DEFAULTS overridden by `config.reward.reward_kwargs.bot` (plus `scorers`)."""
    reward_kwargs = (config.get("reward") or {}).get("reward_kwargs") or {}
    user = dict(reward_kwargs.get("bot") or {})
    unknown = set(user) - set(DEFAULTS) - {"scorers"}
    if unknown:
        raise VerlBotConfigError(
            f"unknown reward.reward_kwargs.bot keys {sorted(unknown)}; known: {sorted(DEFAULTS)} and scorers"
        )
    settings = {**DEFAULTS, **user}
    settings["scorers"] = dict(user.get("scorers") or {})
    return settings


def bot_manager_in_use(config: Any) -> bool:
    """True when the run's reward manager is verl-bot's (`reward.reward_manager.name=bot`)."""
    manager = ((config.get("reward") or {}).get("reward_manager") or {}).get("name")
    return manager == "bot"
