"""The reward metrics of a training iteration (`reward/<key>/mean`, `reward/flag/<name>/mean`), every trainer.

verl logs a rollout's `reward_extra_info` only at validation; this adds the training iteration's, from its real rows
(`verl_bot.rewards.metrics.training_reward_metrics`); of a multi-output sample only the last output counts (verl
copies its `reward_extra_info` to the earlier ones), so a sample weighs one rollout whatever its number of outputs.
Metrics are never worth a failed iteration: a failure is one warning line, once per run.
"""

from __future__ import annotations

import logging
from typing import Any

from verl_bot.rewards.metrics import training_reward_metrics
from verl_bot.training.batch import TrainingBatch
from verl_bot.training.failures import last_outputs

logger = logging.getLogger("verl_bot")
WARNED_ATTR = "_verl_bot_metrics_warned"


def reward_metrics(batch: TrainingBatch) -> dict[str, float]:
    """`training_reward_metrics` of the batch's real rows, each sample's last output only."""
    last = last_outputs(batch.keys()) if batch.sessions() is not None else None
    padding = batch.padding().tolist()
    rows = batch.rows()
    return training_reward_metrics(
        [row for i, row in enumerate(rows) if not padding[i] and (last is None or last[i])]
    )


def reward_metrics_or_warn(trainer: Any, batch: TrainingBatch) -> dict[str, float]:
    """`reward_metrics(batch)`, or {} and one warning per run when the batch cannot be read."""
    try:
        return reward_metrics(batch)
    except Exception as exc:  # noqa: BLE001 - metrics are never worth a failed training iteration
        if not trainer.__dict__.get(WARNED_ATTR):
            trainer.__dict__[WARNED_ATTR] = True
            logger.warning("verl-bot: no reward/<key>/mean metrics this run: %s: %s", type(exc).__name__, exc)
        return {}
