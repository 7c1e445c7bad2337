"""Advantage estimators: pure tensor functions, one module per method, and their table (put into verl's
registry by `verl_bot.hooks.registries`).

`ESTIMATORS` says, per estimator, what it reads besides verl's registry arguments:
`streams` (named reward streams of the `bot` manager, `verl_bot.credit.streams`), `fields`
(other fields of the trajectories, e.g. the response ids, which the trainer hook
reads from TransferQueue into the batch context's `tensors`) and
`token_level` (it reads the dense per-token rewards of the `bot` manager, so a
scalar reward on the last token, or KL folded into the rewards, would make its
advantages meaningless: the start-up checks refuse both). A new estimator is a
pure function in its own module plus one row here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verl_bot.advantage import pass_, pure, reco, vps
from verl_bot.advantage.bot import bot_options, compute_bot_advantage
from verl_bot.advantage.grail import GrailSettings, compute_grail_advantage


@dataclass(frozen=True)
class EstimatorSpec:
    """What a verl-bot estimator needs: its verl adapter, the reward streams it reads, dense token rewards."""

    fn: Callable[..., Any]
    streams: tuple[str, ...] = ()
    token_level: bool = True
    fields: tuple[str, ...] = ()  # TransferQueue fields of the trajectories, padded like the rewards
    options: Callable[[Any], Any] | None = None  # parses the estimator's knobs from `algorithm` (raises if bad)


ESTIMATORS: dict[str, EstimatorSpec] = {
    "bot": EstimatorSpec(compute_bot_advantage, options=bot_options),
    "pure": EstimatorSpec(pure.compute_pure_advantage, streams=pure.STREAMS),
    "pass": EstimatorSpec(pass_.compute_pass_advantage, streams=pass_.STREAMS, options=pass_.pass_settings),
    # GRPO-VPS: GRPO on the scalar score plus belief progress from the `vps_single_turn` agent loop's probes
    "vps": EstimatorSpec(vps.compute_vps_advantage, token_level=False, options=vps.VPSSettings.from_config),
    # GRPO on the summed rewards (any reward manager), times ReCo's response weights
    "reco": EstimatorSpec(
        reco.compute_reco_advantage, token_level=False, options=reco.reco_options, fields=reco.FIELDS
    ),
    # GRPO's advantage; its token weights are applied in the actor update (verl_bot.hooks.engine_forward_step)
    "grail": EstimatorSpec(compute_grail_advantage, token_level=False, options=GrailSettings.from_config),
}


def estimator_spec(name: Any) -> EstimatorSpec | None:
    """The spec of verl-bot's estimator `name` (a string or verl's enum), None for verl's own estimators."""
    return ESTIMATORS.get(str(getattr(name, "value", name)))
