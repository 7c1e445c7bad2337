"""The advantage call of a training iteration, the same on every trainer: `advantage_call`.

A trainer adapter hands over the iteration's batch (`verl_bot.training.batch.TrainingBatch`) and verl's own
advantage computation; around it:

1. the batch context (`verl_bot.training.context.step_context`): failed rows, streams and fields the estimator
   declared, the failure-rate stop;
2. the dense rows of the `bot` manager checked (`verl_bot.training.rows`): none marked (the adapter's hook never
   fired) or one whose token rewards no longer match their checksum stops the run, naming the row;
3. verl's computation inside the context (failed rollouts out of their groups: `verl_bot.training.failures`, which
   the adapter's hook of verl's advantage function calls); the estimator's diagnostics into the metrics;
4. the token records of the steps `algorithm.token_report_steps` asks for (`verl_bot.training.records`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from verl_bot.credit.context import use_context
from verl_bot.errors import VerlBotConfigError, inert
from verl_bot.training import failures
from verl_bot.training.actor_update import ADVANTAGE_ATTR
from verl_bot.training.batch import REWARDS, TrainingBatch
from verl_bot.training.context import step_context
from verl_bot.training.records import record_step
from verl_bot.training.rows import DENSE_MARK, SCALAR_ROWS, changed_message, changed_rows, went_past_dense_rows

T = TypeVar("T")


@dataclass(frozen=True)
class AdapterHooks:
    """Where a trainer adapter's hooks sit (verl's target, verl-bot's module), for the stops that name them."""

    advantage: tuple[str, str]  # where the trainer hands over its iteration's batch for the advantages
    dense_rows: tuple[str, str]  # the hook that stores the `bot` manager's dense rows
    failures: tuple[str, str]  # the hook of verl's advantage function (failed rows out of their groups)


def check_dense_rows(batch: TrainingBatch, rows: list[dict], hooks: AdapterHooks) -> None:
    """Stop the run when no row carries the dense mark, or a marked row's token rewards changed (one line)."""
    if went_past_dense_rows(True, rows):
        raise inert(*hooks.dense_rows, SCALAR_ROWS)
    marked = [i for i, row in enumerate(rows) if isinstance(row.get(DENSE_MARK), str)]
    if not marked:
        return
    rewards = batch.ragged([REWARDS], marked)[REWARDS]
    changed = changed_rows([rows[i] for i in marked], rewards)
    if changed:
        first = changed[0]
        raise VerlBotConfigError(changed_message(rows[marked[first]], marked[first], rewards[first]))


def advantage_call(trainer: Any, batch: TrainingBatch, compute: Callable[[], T], metrics: dict,
                   hooks: AdapterHooks) -> T:
    """verl's advantage computation `compute()` of this iteration with verl-bot's steps 1-4 around it (a run with
    neither verl-bot's manager nor one of its estimators: steps 1-3 are skipped)."""
    ctx, step_metrics = step_context(trainer, batch)
    if ctx is None:
        result = compute()
    else:
        if ctx.dense_rewards:
            check_dense_rows(batch, ctx.rows, hooks)
        metrics.update(step_metrics)
        before = failures.calls()
        with use_context(ctx):
            result = compute()
        metrics.update(ctx.metrics)
        if failures.calls() == before:
            raise inert(*hooks.failures, "failed rollouts would keep their advantages")
    trainer.__dict__[ADVANTAGE_ATTR] = trainer.global_steps
    record_step(trainer, batch)
    return result
