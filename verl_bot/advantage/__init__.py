"""Advantage estimators: pure tensor functions, one module per method, and their table `ESTIMATORS` (put into verl's
registry by `verl_bot.hooks.registries`).

Each row (`EstimatorSpec`) says what its estimator reads besides verl's registry arguments (named reward streams,
fields of the trajectories, the `bot` manager's dense token rewards), its knobs, its own start-up check (asked by
`verl_bot.launch.preflight` for the estimator in use) and what it needs from the actor update. A new estimator is
a pure function in its own module plus one row here: docs/architecture.md, section One seam per trainer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verl_bot.actor_needs import ActorNeeds
from verl_bot.advantage import grail, grail_update, pass_, pure, reco, turn_bot, turn_index, vps
from verl_bot.advantage.bot import BotSettings, compute_bot_advantage
from verl_bot.knobs import MethodSettings, StartupCheck


@dataclass(frozen=True)
class EstimatorSpec:
    """What a verl-bot estimator needs: its verl adapter, the reward streams it reads, dense token rewards, its
    knobs, its start-up check and what it needs from the actor update (`verl_bot.actor_needs`)."""

    fn: Callable[..., Any]
    streams: tuple[str, ...] = ()  # named reward streams of the `bot` manager (`verl_bot.credit.streams`)
    # it reads the `bot` manager's dense per-token rewards: a scalar reward on the last token, or KL folded into the
    # rewards, would make its advantages meaningless, and the start-up checks refuse both
    token_level: bool = True
    # TransferQueue fields of the trajectories (e.g. the response ids), padded like the rewards; the trainer hook
    # reads them into the batch context's `tensors`
    fields: tuple[str, ...] = ()
    settings: type[MethodSettings] | None = None  # its knobs (`verl_bot.knobs`), read and checked at start-up
    check: StartupCheck | None = None
    scalar_knob: str | None = None  # a bool knob (a settings field) with which it takes one scalar per response
    actor: ActorNeeds | None = None


ESTIMATORS: dict[str, EstimatorSpec] = {
    "bot": EstimatorSpec(compute_bot_advantage, settings=BotSettings, scalar_knob="broadcast_scalar"),
    "pure": EstimatorSpec(
        pure.compute_pure_advantage, streams=pure.STREAMS, settings=pure.PureSettings, check=pure.startup_problem
    ),
    "pass": EstimatorSpec(pass_.compute_pass_advantage, streams=pass_.STREAMS, settings=pass_.PassSettings),
    # GRPO-VPS: GRPO on the scalar score plus belief progress from the `vps_single_turn` agent loop's probes
    "vps": EstimatorSpec(
        vps.compute_vps_advantage, token_level=False, settings=vps.VPSSettings, check=vps.startup_problem
    ),
    # GRPO on the summed rewards (any reward manager), times ReCo's response weights
    "reco": EstimatorSpec(
        reco.compute_reco_advantage, token_level=False, settings=reco.RecoSettings, fields=reco.FIELDS,
        actor=reco.NEEDS,
    ),
    # GRPO's advantage; its token weights are applied in the actor update (verl_bot.hooks.engine_forward_step)
    "grail": EstimatorSpec(
        grail.compute_grail_advantage, token_level=False, settings=grail.GrailSettings, check=grail.startup_problem,
        actor=grail_update.NEEDS,
    ),
    # turn-level BoT: returns over the following turns, a leave-one-out bag baseline (multi-turn tool loops)
    "turn_bot": EstimatorSpec(turn_bot.compute_turn_bot_advantage, streams=turn_bot.STREAMS,
                              settings=turn_bot.TurnBotSettings, check=turn_bot.startup_problem),
    # the per-turn-index baseline (MT-GRPO's normalisation over T turns): the BIASED reference turn_bot is measured by
    "turn_index_biased": EstimatorSpec(turn_index.compute_turn_index_advantage, streams=turn_index.STREAMS,
                                       settings=turn_index.TurnIndexSettings),
}


def estimator_spec(name: Any) -> EstimatorSpec | None:
    """The spec of verl-bot's estimator `name` (a string or verl's enum), None for verl's own estimators."""
    return ESTIMATORS.get(str(getattr(name, "value", name)))
