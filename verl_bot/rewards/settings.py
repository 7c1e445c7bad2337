"""The `bot` reward manager's knobs (`reward.reward_kwargs.bot`): their declaration and their reader.

Kept apart from the manager so that the driver's start-up checks
(`verl_bot.hooks.validate_config`) and the trainer's hooks read the same
settings without importing the reward loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from verl_bot.advantage import estimator_spec
from verl_bot.credit.streams import streams_for
from verl_bot.credit.token_credit import CreditSettings
from verl_bot.knobs import MethodSettings, config_node, enum_name, knob

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


def reads_dense_rewards(estimator: Any) -> bool:
    """True for the estimators that read a reward on every token (verl-bot's `bot`, `pure`, `pass`).

    Every other estimator (verl's `grpo`, `rloo`, `gae`, ...; verl-bot's `reco`, `vps`, `grail`) sums a
    response's token rewards or reads them as returns, so the manager's G on every token would count G once
    per token: a reward that grows with the response's length.
    """
    spec = estimator_spec(estimator)
    return spec is not None and spec.token_level


def layout_of(token_level: Any, estimator: Any) -> str:
    """The manager's layout (`LAYOUTS`) for the knob `token_level` and the run's estimator: `auto` is "dense" for
    an estimator that reads dense token rewards (`reads_dense_rewards`), "returns" for verl's return-based ones
    (`RETURN_ESTIMATORS`), "scalar" (one reward w_g * G per response) for every other."""
    if token_level == "auto":
        if reads_dense_rewards(estimator):
            return "dense"
        return "returns" if enum_name(estimator) in RETURN_ESTIMATORS else "scalar"
    return "returns" if token_level == "returns" else ("dense" if token_level else "scalar")


@dataclass(frozen=True)
class ManagerSettings(MethodSettings, node="reward.reward_kwargs.bot", label="bot manager", nested=("scorers", "prm")):
    """The `bot` manager's knobs, its `scorers` (data_source -> scorer spec, `verl_bot.rewards.scorers`; `prm`:
    `verl_bot.rewards.prm.PrmSettings`) and the run's `estimator`, which `token_level` resolves against (`layout`)."""

    w_global: float = knob(1.0, source="paper", doc="w_g, the weight of the global score G")
    w_local: float = knob(1.0, source="paper", doc="w_s, the weight of the local signal S_t")
    local_clip: float = knob(1.0, bounds="[0, inf)", source="ours", doc="|S_t| is clipped to it per token; 0: no clip")
    timeout_s: float = knob(120.0, bounds="(0, inf)", source="ours", doc="seconds per scorer call")
    retries: int = knob(2, bounds="[0, inf)", source="ours", doc="extra HTTP attempts of a scorer call")
    failure_score: float = knob(0.0, source="ours", doc="G of a rollout whose scorer failed")
    token_level: bool | str = knob(
        "auto", choices=("auto", "returns"), source="ours", doc="the layout (`LAYOUTS`): true dense, false scalar, "
        "returns, auto: the one of the run's estimator (`layout_of`)"
    )
    fn_workers: int = knob(2, bounds="[0, inf)", source="ours", doc="worker processes for verl's reward functions")
    max_failure_rate: float = knob(0.5, bounds="[0, 1]", source="ours", doc="the run stops past this failed share")
    failure_patience: int = knob(3, bounds="[1, inf)", source="ours", doc="... this many steps in a row")
    scorers: dict[str, Any] = field(default_factory=dict)
    estimator: Any = None  # the run's algorithm.adv_estimator

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "scorers", dict(self.scorers or {}))

    @property
    def layout(self) -> str:
        """The layout `token_level` gives the run's estimator (`layout_of`)."""
        return layout_of(self.token_level, self.estimator)

    @property
    def per_token(self) -> bool:
        """True when the manager returns a vector per response (layout dense or returns), False for one scalar."""
        return self.layout != "scalar"

    def credit(self, overlong: tuple[int, int, float] | None) -> CreditSettings:
        """The settings of `token_credit`: its fields that are the manager's knobs (and `layout`), the streams the
        estimator reads when the rewards are per token, and DAPO's `overlong` shaping."""
        shared = {f.name: getattr(self, f.name) for f in fields(CreditSettings) if hasattr(self, f.name)}
        streams = streams_for(self.estimator) if self.per_token else ()
        return CreditSettings(**shared, streams=streams, overlong=overlong)


def manager_settings(config: Any) -> ManagerSettings:
    """The `bot` manager's settings of a run: `reward.reward_kwargs.bot` and `algorithm.adv_estimator`."""
    estimator = (config.get("algorithm") or {}).get("adv_estimator")
    return ManagerSettings.from_config(config_node(config, ManagerSettings.node), estimator=estimator)


def layout_line(config: Any) -> str:
    """What the `bot` manager gives the run's estimator, for the run's start-up line."""
    layout = manager_settings(config).layout
    return f"bot manager: {layout} token rewards, {LAYOUTS[layout]}"


def bot_manager_in_use(config: Any) -> bool:
    """True when the run's reward manager is verl-bot's (`reward.reward_manager.name=bot`)."""
    manager = ((config.get("reward") or {}).get("reward_manager") or {}).get("name")
    return manager == "bot"
