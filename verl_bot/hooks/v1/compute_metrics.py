"""Hook: `verl.trainer.ppo.v1.trainer_base.PPOTrainer._compute_metrics` (the reward metrics of the iteration).

After verl's own method, for a run that uses verl-bot (`verl_bot.launch.activation`; any other run gets verl's
method as it is): `verl_bot.training.metrics.reward_metrics_or_warn` of the batch read from TransferQueue.
"""

from __future__ import annotations

import functools

from verl_bot.hooks.v1.batch import TQBatch
from verl_bot.hooks.wrap import wrap
from verl_bot.launch.activation import in_use
from verl_bot.training.metrics import reward_metrics_or_warn


def _make_compute_metrics(original):
    @functools.wraps(original)
    def _compute_metrics(self, batch, metrics, *args, **kwargs):
        result = original(self, batch, metrics, *args, **kwargs)
        if in_use(self.config):
            metrics.update(reward_metrics_or_warn(self, TQBatch(batch)))
        return result

    return _compute_metrics


def install() -> list[str]:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return [wrap(PPOTrainer, "_compute_metrics", ["self", "batch", "metrics"], _make_compute_metrics)]
