"""The `bot` reward manager's knobs (`reward.reward_kwargs.bot`), read by the manager and by the start-up checks.

Kept apart from the manager so that the driver's start-up checks
(`verl_bot.hooks.validate_config`) and the trainer's hooks read the same
defaults without importing the reward loop.
"""

from __future__ import annotations

from typing import Any

from verl_bot.advantage import estimator_spec
from verl_bot.errors import VerlBotConfigError

TOKEN_LEVEL = (True, False, "auto")
DEFAULTS = {
    "w_global": 1.0,
    "w_local": 1.0,
    "local_clip": 1.0,
    "timeout_s": 120.0,
    "retries": 2,
    "failure_score": 0.0,
    "token_level": "auto",  # manager_settings: true for the estimators that read dense token rewards
    "fn_workers": 2,
    "max_failure_rate": 0.5,
    "failure_patience": 3,
}


def reads_dense_rewards(estimator: Any) -> bool:
    """True for the estimators that read a reward on every token (verl-bot's `bot`, `pure`, `pass`).

    Every other estimator (verl's `grpo`, `rloo`, `gae`, ...; verl-bot's `reco`, `vps`, `grail`) sums a
    response's token rewards or reads them as returns, so the manager's G on every token would count G once
    per token: a reward that grows with the response's length.
    """
    spec = estimator_spec(estimator)
    return spec is not None and spec.token_level


def user_settings(config: Any) -> dict[str, Any]:
    """What the run sets under `reward.reward_kwargs.bot` (checked: unknown keys, a bad `token_level`)."""
    reward_kwargs = (config.get("reward") or {}).get("reward_kwargs") or {}
    user = dict(reward_kwargs.get("bot") or {})
    unknown = set(user) - set(DEFAULTS) - {"scorers", "prm"}  # prm: verl_bot.rewards.prm.prm_settings
    if unknown:
        raise VerlBotConfigError(
            f"unknown reward.reward_kwargs.bot keys {sorted(unknown)}; known: {sorted(DEFAULTS)}, scorers and prm"
        )
    if user.get("token_level", "auto") not in TOKEN_LEVEL:
        raise VerlBotConfigError(
            f"reward.reward_kwargs.bot.token_level must be true, false or auto, got {user['token_level']!r}"
        )
    return user


def manager_settings(config: Any) -> dict[str, Any]:
    """The `bot` manager's knobs: DEFAULTS overridden by `config.reward.reward_kwargs.bot` (plus `scorers`).

    `token_level` is resolved to a bool: `auto` (the default) is true for an estimator that reads dense
    token rewards (`reads_dense_rewards`) and false, one reward w_g * G per response, for every other.
    """
    user = user_settings(config)
    settings = {**DEFAULTS, **user}
    settings["scorers"] = dict(user.get("scorers") or {})
    if settings["token_level"] == "auto":
        settings["token_level"] = reads_dense_rewards((config.get("algorithm") or {}).get("adv_estimator"))
    return settings


def bot_manager_in_use(config: Any) -> bool:
    """True when the run's reward manager is verl-bot's (`reward.reward_manager.name=bot`)."""
    manager = ((config.get("reward") or {}).get("reward_manager") or {}).get("name")
    return manager == "bot"
