"""The token records of a training step, on the steps `algorithm.token_report_steps` asks for (both trainers).

The rows are read through the iteration's `verl_bot.training.batch.TrainingBatch` (`record_rows`), only on a
recorded step, after verl wrote the advantages.
"""

from __future__ import annotations

import logging
from typing import Any

from verl_bot.errors import VerlBotConfigError
from verl_bot.observe import token_records
from verl_bot.training.batch import TrainingBatch, record_rows

RECORDED_ATTR = "_verl_bot_recorded_step"
logger = logging.getLogger("verl_bot")


def record_step(trainer: Any, batch: TrainingBatch) -> None:
    """Write the token records of this step when `algorithm.token_report_steps` asks for it.

    A step outside the run raises `VerlBotConfigError` (at the first step, before any update); a failure to
    read or write the records is logged as a warning and the run goes on.
    """
    algorithm = trainer.config.algorithm
    if not algorithm.get(token_records.STEPS_KEY):
        return
    try:
        steps = token_records.recorded_steps(algorithm, int(trainer.total_training_steps))
    except ValueError as exc:
        raise VerlBotConfigError(f"verl-bot: {exc}") from exc
    step = int(trainer.global_steps)
    if step not in steps:
        return
    try:
        estimator = str(getattr(algorithm.adv_estimator, "value", algorithm.adv_estimator))
        groups = int(algorithm.get(token_records.GROUPS_KEY, token_records.DEFAULT_GROUPS))
        records = token_records.build_records(step, estimator, record_rows(batch), trainer.tokenizer, groups)
        folder = token_records.record_dir(algorithm, trainer.config.trainer.default_local_dir)
        # a step with several advantage calls appends to its file (only the last step is remembered)
        path = token_records.write_records(folder, step, records, append=trainer.__dict__.get(RECORDED_ATTR) == step)
        trainer.__dict__[RECORDED_ATTR] = step
        logger.info("token records of step %d: %d rollouts -> %s", step, len(records), path)
    except Exception as exc:  # noqa: BLE001 - a report must never cost the run
        logger.warning("token records of step %d not written: %s: %s", step, type(exc).__name__, exc)
