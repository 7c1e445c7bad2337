"""Hook: `verl.trainer.ppo.v1.trainer_base.PPOTrainer._compute_metrics` (reward metrics of the training step).

verl's v1 trainer logs `reward_extra_info` only at validation. After verl's own
method, the wrapper adds `verl_bot.rewards.metrics.training_reward_metrics` of
the batch's non-padding rows (`reward/<key>/mean`, `reward/flag/<name>/mean`).
Metrics are never worth a failed training step: a failure here is a warning.
"""

from __future__ import annotations

import functools
import logging

from verl_bot.hooks._patch import wrap
from verl_bot.hooks.compute_advantage import fetch_rows, padding_mask
from verl_bot.rewards.metrics import training_reward_metrics

logger = logging.getLogger("verl_bot")


def _make_compute_metrics(original):
    @functools.wraps(original)
    def _compute_metrics(self, batch, metrics, *args, **kwargs):
        result = original(self, batch, metrics, *args, **kwargs)
        try:
            rows = fetch_rows(batch)
            real = [row for row, pad in zip(rows, padding_mask(batch).tolist(), strict=True) if not pad]
            metrics.update(training_reward_metrics(real))
        except Exception:  # noqa: BLE001 - metrics are never worth a failed training step
            logger.warning("verl-bot: could not add reward/<key>/mean metrics", exc_info=True)
        return result

    return _compute_metrics


def install() -> list[str]:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return [wrap(PPOTrainer, "_compute_metrics", ["self", "batch", "metrics"], _make_compute_metrics)]
