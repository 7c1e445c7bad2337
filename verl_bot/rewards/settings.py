"""The `bot` reward manager's knobs (`reward.reward_kwargs.bot`), read by the manager and by the start-up checks.

Kept apart from the manager so that the driver's start-up checks
(`verl_bot.hooks.validate_config`) and the trainer's hooks read the same
defaults without importing the reward loop.
"""

from __future__ import annotations

from typing import Any

from verl_bot.advantage import estimator_spec
from verl_bot.errors import VerlBotConfigError
from verl_bot.knobs import enum_name

TOKEN_LEVEL = (True, False, "auto", "returns")
# how the manager lays out a rollout's rewards on its tokens (`layout`, resolved from `token_level`)
LAYOUTS = {
    "dense": "r_t = w_g * G + w_s * S_t on every token",
    "returns": "w_g * G on the last token, w_s * S_t on the tokens it covers (a return from t: G plus the local "
               "signal after t)",
    "scalar": "w_g * G on the last token, no local signal",
}
# verl's estimators that read token rewards per token as returns (a discounted sum from each token on), not their
# sum (verl/trainer/ppo/core_algos.py: gae's TD, reinforce_plus_plus's and remax's returns, the optimal token
# baselines' returns); with the `bot` manager they get the `returns` layout unless `token_level` says otherwise
RETURN_ESTIMATORS = ("gae", "reinforce_plus_plus", "remax", "optimal_token_baseline", "tir_optimal_token_baseline")
DEFAULTS = {
    "w_global": 1.0,
    "w_local": 1.0,
    "local_clip": 1.0,
    "timeout_s": 120.0,
    "retries": 2,
    "failure_score": 0.0,
    "token_level": "auto",  # manager_settings: the layout of the run's estimator (`layout_of`)
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
            f"reward.reward_kwargs.bot.token_level must be true, false, auto or returns, got {user['token_level']!r}"
        )
    return user


def layout_of(token_level: Any, estimator: Any) -> str:
    """The manager's layout (`LAYOUTS`) for the knob `token_level` and the run's estimator: `auto` is "dense" for
    an estimator that reads dense token rewards (`reads_dense_rewards`), "returns" for verl's return-based ones
    (`RETURN_ESTIMATORS`), "scalar" (one reward w_g * G per response) for every other."""
    if token_level == "auto":
        if reads_dense_rewards(estimator):
            return "dense"
        return "returns" if enum_name(estimator) in RETURN_ESTIMATORS else "scalar"
    return "returns" if token_level == "returns" else ("dense" if token_level else "scalar")


def manager_settings(config: Any) -> dict[str, Any]:
    """The `bot` manager's knobs: DEFAULTS overridden by `config.reward.reward_kwargs.bot` (plus `scorers`).

    `layout` is the resolved layout (`layout_of`); `token_level` is true when it is a vector per response (dense
    or returns), false for one scalar.
    """
    user = user_settings(config)
    settings = {**DEFAULTS, **user}
    settings["scorers"] = dict(user.get("scorers") or {})
    settings["layout"] = layout_of(settings["token_level"], (config.get("algorithm") or {}).get("adv_estimator"))
    settings["token_level"] = settings["layout"] != "scalar"
    return settings


def layout_line(config: Any) -> str:
    """What the `bot` manager gives the run's estimator, for the run's start-up line."""
    settings = manager_settings(config)
    return f"bot manager: {settings['layout']} token rewards, {LAYOUTS[settings['layout']]}"


def bot_manager_in_use(config: Any) -> bool:
    """True when the run's reward manager is verl-bot's (`reward.reward_manager.name=bot`)."""
    manager = ((config.get("reward") or {}).get("reward_manager") or {}).get("name")
    return manager == "bot"
