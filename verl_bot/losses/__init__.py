"""Policy losses: pure tensor functions, one module per method, and their table `LOSSES`.

A loss has verl's `PolicyLossFn` signature, is registered with verl's `register_policy_loss` (by
`verl_bot.hooks.registries`) and selected with `actor_rollout_ref.actor.policy_loss.loss_mode=<name>`. verl's actor
config refuses unknown keys, so its knobs are `+algorithm.<name>_<knob>`, shipped with every actor update and read
with `verl_bot.credit.context.loss_settings()` (None outside verl's trainer: defaults). A new loss is a module plus
one row in `LOSSES`: its function, its knobs (a `verl_bot.knobs.MethodSettings` class) and its start-up check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verl_bot.actor_needs import ActorNeeds
from verl_bot.advantage.reco import NEEDS as RECO_NEEDS
from verl_bot.advantage.reco import RecoSettings
from verl_bot.knobs import MethodSettings, StartupCheck
from verl_bot.losses import reco


@dataclass(frozen=True)
class LossSpec:
    """A verl-bot policy loss: verl's `PolicyLossFn`, its knobs (`verl_bot.knobs`), its start-up check and what it
    needs from the actor update besides its knobs (`verl_bot.actor_needs`)."""

    fn: Callable[..., Any]
    settings: type[MethodSettings] | None = None
    check: StartupCheck | None = None
    actor: ActorNeeds | None = None


LOSSES: dict[str, LossSpec] = {
    # ReCo's token ratio; its knobs are ReCo's, declared once with its response weights (verl_bot.advantage.reco)
    "reco": LossSpec(
        reco.compute_policy_loss_reco, settings=RecoSettings, check=reco.startup_problem, actor=RECO_NEEDS
    ),
}


def loss_name(config: Any) -> str | None:
    """The configured `actor_rollout_ref.actor.policy_loss.loss_mode` when it is one of verl-bot's losses, else None."""
    actor = (config.get("actor_rollout_ref") or {}).get("actor") or {}
    mode = str((actor.get("policy_loss") or {}).get("loss_mode", "vanilla"))
    return mode if mode in LOSSES else None


def loss_knobs(config: Any, name: str) -> dict[str, Any]:
    """The `+algorithm.<name>_*` keys of the run's config (what the loss `name` reads from `loss_settings()`)."""
    algorithm = config.get("algorithm") or {}
    return {str(k): algorithm[k] for k in algorithm if str(k).startswith(f"{name}_")}
