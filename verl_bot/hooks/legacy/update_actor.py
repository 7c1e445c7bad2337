"""Hook: `verl.trainer.ppo.ray_trainer.RayPPOTrainer._update_actor` (legacy trainer: a verl-bot loss's knobs).

A run that does not use verl-bot (`verl_bot.launch.activation`) gets verl's method as it is. For a verl-bot
policy loss (`verl_bot.step.actor_update`): its knobs go into the batch's `meta_info`, which verl turns into
the update's non-tensor data (`DataProto.to_tensordict`) and every actor micro-batch carries
(`verl_bot.hooks.ppo_loss` reads them there); after the update, the step's metrics are named (`update_metrics`)
in the metrics the update returns.
"""

from __future__ import annotations

import functools

from verl_bot.hooks.wrap import wrap
from verl_bot.launch.activation import in_use
from verl_bot.step.actor_update import LOSS_KNOBS_KEY, loss_update_knobs, update_metrics


def _make_update_actor(original):
    @functools.wraps(original)
    def _update_actor(self, batch, *args, **kwargs):
        if not in_use(self.config):
            return original(self, batch, *args, **kwargs)
        knobs = loss_update_knobs(self.config)
        if knobs is not None:
            batch.meta_info[LOSS_KNOBS_KEY] = knobs
        try:
            output = original(self, batch, *args, **kwargs)
        finally:
            batch.meta_info.pop(LOSS_KNOBS_KEY, None)
        update_metrics(self.config, output.meta_info["metrics"])
        return output

    return _update_actor


def install() -> list[str]:
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    return [wrap(RayPPOTrainer, "_update_actor", ["self", "batch"], _make_update_actor)]
