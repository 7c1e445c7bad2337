"""The batch context of one advantage computation (`step_context`), and the stop when the scorers keep failing.

The context holds the rows, the failed ones, and what the configured estimator declared (`EstimatorSpec.streams`,
`EstimatorSpec.fields`), read through `verl_bot.training.batch.TrainingBatch`; it is active
(`verl_bot.credit.context`) while verl computes the advantages.
"""

from __future__ import annotations

from typing import Any

import torch

from verl_bot.advantage import estimator_spec
from verl_bot.credit.context import BatchContext
from verl_bot.errors import VerlBotConfigError
from verl_bot.rewards.settings import ManagerSettings, bot_manager_in_use, manager_settings
from verl_bot.training.batch import TrainingBatch, streams

STREAK_ATTR = "_verl_bot_failure_streak"


def failed_mask(rows: list[dict], padding: torch.Tensor) -> torch.Tensor:
    """(B,) bool: rows whose scorer failed (`reward_extra_info.scorer_failed`), padding excluded."""
    failed = [float((row.get("reward_extra_info") or {}).get("scorer_failed", 0.0) or 0.0) > 0 for row in rows]
    return torch.tensor(failed, dtype=torch.bool) & ~padding


def check_failure_rate(streak: list[float], share: float, rows: list[dict], failed: torch.Tensor,
                       settings: ManagerSettings):
    """Append this step's failure share to `streak` (or clear it); raise when it exceeded the limit long enough.

    Raises `VerlBotConfigError` naming the failing data source(s) and the scorer's last error message.
    """
    if share <= settings.max_failure_rate:
        streak.clear()
        return
    streak.append(share)
    if len(streak) < settings.failure_patience:
        return
    failed_rows = [row for row, bad in zip(rows, failed.tolist(), strict=True) if bad]
    infos = [row.get("reward_extra_info") or {} for row in failed_rows]
    sources = sorted({str(row.get("data_source", "?")) for row in failed_rows})
    last_error = next((i["scorer_error_msg"] for i in reversed(infos) if i.get("scorer_error_msg")), "(no message)")
    shares = ", ".join(f"{s:.2f}" for s in streak)
    raise VerlBotConfigError(
        f"verl-bot: the scorer failed on {shares} of the rollouts for {len(streak)} consecutive steps "
        f"(> reward.reward_kwargs.bot.max_failure_rate={settings.max_failure_rate}, failure_patience="
        f"{settings.failure_patience}); scorer of data_source {', '.join(sources)}: last error: {last_error}"
    )


def step_context(trainer: Any, batch: TrainingBatch) -> tuple[BatchContext | None, dict[str, float]]:
    """The batch context of this step's advantage call and the metrics it adds, or (None, {}) for a run with
    neither verl-bot's manager nor one of its estimators.

    With the `bot` manager: the failed rows, and the failure-rate stop (`check_failure_rate`, its streak kept on
    `trainer`).
    """
    config = trainer.config
    spec = estimator_spec(config.algorithm.adv_estimator)
    bot_manager = bot_manager_in_use(config)
    if spec is None and not bot_manager:
        return None, {}
    rows, padding = batch.rows(), batch.padding()
    ctx = BatchContext(rows=rows, sessions=batch.sessions())
    metrics = {}
    if bot_manager:
        settings = manager_settings(config)
        ctx.dense_rewards = settings.per_token
        ctx.failed = failed_mask(rows, padding)
        share = float(ctx.failed.sum()) / max(int((~padding).sum()), 1)
        check_failure_rate(trainer.__dict__.setdefault(STREAK_ATTR, []), share, rows, ctx.failed, settings)
        metrics["verl_bot/scorer_failed_rows"] = float(ctx.failed.sum())
    if spec is not None and spec.streams:
        ctx.streams = streams(batch, spec.streams)
    if spec is not None and spec.fields:
        ctx.tensors.update(batch.padded(list(spec.fields)))
    return ctx, metrics
