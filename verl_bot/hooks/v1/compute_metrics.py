"""Hook: `verl.trainer.ppo.v1.trainer_base.PPOTrainer._compute_metrics` (reward metrics of the training step).

verl's v1 trainer logs `reward_extra_info` only at validation. After verl's own
method, for a run that uses verl-bot (`verl_bot.launch.activation`; any other run gets
verl's method as it is), the wrapper adds
`verl_bot.rewards.metrics.training_reward_metrics` of the batch's non-padding
rows (`reward/<key>/mean`, `reward/flag/<name>/mean`), read from their
`extra_fields`; of a multi-output agent loop's sample only the last output
counts (verl copies its `reward_extra_info` to the earlier ones), so a sample
weighs one rollout whatever its number of outputs. Metrics are never worth a failed training step: a failure here
is one warning line, once per run.
"""

from __future__ import annotations

import functools
import logging

from verl_bot.hooks.v1.compute_advantage import column_values, padding_mask
from verl_bot.hooks.wrap import wrap
from verl_bot.launch.activation import in_use
from verl_bot.rewards.metrics import training_reward_metrics
from verl_bot.step.failures import last_outputs

logger = logging.getLogger("verl_bot")
WARNED_ATTR = "_verl_bot_metrics_warned"


def extra_fields(batch) -> list:
    """Each row's `extra_fields` (rows in `batch.keys` order), read from TransferQueue."""
    import transfer_queue as tq

    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
    return column_values(data["extra_fields"])


def reward_metrics(trainer, batch) -> dict[str, float]:
    """`training_reward_metrics` of the batch's non-padding rows, each sample's last output only; {} (and one
    warning per run) if unreadable."""
    try:
        rows = extra_fields(batch)
        keep = [last and not pad for last, pad in zip(last_outputs(list(batch.keys)), padding_mask(batch).tolist(),
                                                      strict=True)]
        return training_reward_metrics([row for row, kept in zip(rows, keep, strict=True) if kept])
    except Exception as exc:  # noqa: BLE001 - metrics are never worth a failed training step
        if not trainer.__dict__.get(WARNED_ATTR):
            trainer.__dict__[WARNED_ATTR] = True
            logger.warning("verl-bot: no reward/<key>/mean metrics this run: %s: %s", type(exc).__name__, exc)
        return {}


def _make_compute_metrics(original):
    @functools.wraps(original)
    def _compute_metrics(self, batch, metrics, *args, **kwargs):
        result = original(self, batch, metrics, *args, **kwargs)
        if in_use(self.config):
            metrics.update(reward_metrics(self, batch))
        return result

    return _compute_metrics


def install() -> list[str]:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return [wrap(PPOTrainer, "_compute_metrics", ["self", "batch", "metrics"], _make_compute_metrics)]
