"""What a verl-bot policy loss needs around the actor update, the same on both trainers.

verl hands a registered policy loss only tensors and the actor's config, a dataclass that refuses keys it does
not know, so a verl-bot loss keeps its knobs in the `algorithm` config (`+algorithm.<loss>_*`, e.g.
`+algorithm.reco_rvar_cap`), which only the trainer reads. The trainer adapter ships them with the update under
`LOSS_KNOBS_KEY` (v1: the batch meta's `extra_info`; legacy: the `DataProto`'s `meta_info`, both of which reach
every actor micro-batch as non-tensor data, where `verl_bot.hooks.ppo_loss` makes them the active
`loss_settings()`), and after the update names the step's metrics with `update_metrics`.

The worker hook also reports that the knobs were active (`KNOBS_METRIC`, 1 per micro-batch): a verl-bot loss's
update without it is an update whose loss ran without its knobs (a verl whose actor no longer calls the
`ppo_loss` verl-bot wraps), and stops the run at its first step, naming the hook.
"""

from __future__ import annotations

from typing import Any

from verl_bot.errors import VerlBotConfigError
from verl_bot.losses import loss_knobs, loss_name
from verl_bot.losses.reco import pairing_metrics

LOSS_KNOBS_KEY = "verl_bot_loss"
KNOBS_METRIC = "verl_bot/loss_knobs"  # a loss metric of the worker; verl's update names it actor/verl_bot/loss_knobs


def loss_update_knobs(config: Any) -> dict[str, Any] | None:
    """The knobs to ship with the actor update when the run's policy loss is one of verl-bot's, else None."""
    name = loss_name(config)
    return None if name is None else loss_knobs(config, name)


def update_metrics(config: Any, metrics: dict) -> None:
    """In place: the loss's metrics from `actor/<loss>/...` (verl prefixes every actor metric) to `<loss>/...`,
    beside the estimator's; `reco/weights_on`, `reco/token_ratio_on` when either half of ReCo is on."""
    name = loss_name(config)
    if name is not None:
        if metrics.pop(f"actor/{KNOBS_METRIC}", None) is None:
            import verl

            raise VerlBotConfigError(
                f"verl-bot: the actor update ran the {name} policy loss without its knobs: verl {verl.__version__}'s "
                "actor did not call its loss through verl's engine_workers.ppo_loss, which verl-bot wraps "
                "(verl_bot/hooks/ppo_loss.py); `python -m verl_bot.hooks.touch_points` lists the touch points"
            )
        prefix = f"actor/{name}/"
        for key in [k for k in metrics if k.startswith(prefix)]:
            metrics[key.removeprefix("actor/")] = metrics.pop(key)
    estimator = str(getattr(config.algorithm.adv_estimator, "value", config.algorithm.adv_estimator))
    loss_mode = config.actor_rollout_ref.actor.policy_loss.get("loss_mode", "vanilla")
    metrics.update(pairing_metrics(estimator, str(loss_mode)))
