"""Hook: `verl.trainer.ppo.v1.trainer_base.PPOTrainer._compute_advantage` (the batch context of the estimators).

Around verl's own method, for runs that use verl-bot's `bot` reward manager or
one of its estimators:

1. read the batch's rows from TransferQueue: each trajectory's `extra_fields`
   (`reward_extra_info`: `scorer_failed`, the scorer's error, ...), the reward
   streams the configured estimator declared (`verl_bot.streams`), and the
   padding tags (`is_padding`, rows verl adds to fill a batch);
2. stop the run when the scorers keep failing: a failure share above
   `reward.reward_kwargs.bot.max_failure_rate` for `failure_patience`
   consecutive steps raises `VerlBotConfigError` naming the data source and
   the scorer's last error, before this step updates anything;
3. make that the active `verl_bot.context.BatchContext` while verl computes
   the advantages (`verl_bot.hooks.multi_trajectory` takes failed rows out of
   their groups; estimators read streams and report diagnostics);
4. add the estimator's diagnostics and `verl_bot/scorer_failed_rows` to the step's metrics.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from verl_bot.advantage import estimator_spec
from verl_bot.context import BatchContext, use_context
from verl_bot.errors import VerlBotConfigError
from verl_bot.hooks._patch import wrap
from verl_bot.rewards.settings import bot_manager_in_use, manager_settings
from verl_bot.streams import FIELD_PREFIX, StreamsUnavailable

STREAK_ATTR = "_verl_bot_failure_streak"


def _values(column: Any) -> list:
    """The plain values of a TransferQueue non-tensor column (a LinkedList, NonTensorStack or numpy array)."""
    return [getattr(value, "data", value) for value in list(column)]


def fetch_rows(batch: Any) -> list[dict]:
    """Each row's `extra_fields` dict plus its `data_source` (rows in `batch.keys` order)."""
    import transfer_queue as tq

    data = tq.kv_batch_get(
        keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields", "data_source"]
    )
    return [
        {**(extra if isinstance(extra, dict) else {}), "data_source": str(source)}
        for extra, source in zip(_values(data["extra_fields"]), _values(data["data_source"]), strict=True)
    ]


def fetch_streams(batch: Any, names: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """Read the streams `names` of a v1 trainer batch (KVBatchMeta) from TransferQueue, right-padded (B, T)."""
    import transfer_queue as tq

    fields = [FIELD_PREFIX + name for name in names]
    try:
        padded = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        padded = padded.to_padded_tensor()
    except Exception as exc:  # noqa: BLE001 - a missing field surfaces as backend-specific errors
        raise StreamsUnavailable(
            f"the batch has no reward streams {fields} ({type(exc).__name__}: {exc}). They are written by "
            "verl-bot's `bot` reward manager (reward.reward_manager.name=bot, token_level=true)"
        ) from exc
    return {name: padded[FIELD_PREFIX + name] for name in names}


def padding_mask(batch: Any) -> torch.Tensor:
    """(B,) bool: True on the rows verl added to fill the batch (`is_padding` tag)."""
    return torch.tensor([bool(tag.get("is_padding", False)) for tag in batch.tags], dtype=torch.bool)


def failed_mask(rows: list[dict], padding: torch.Tensor) -> torch.Tensor:
    """(B,) bool: rows whose scorer failed (`reward_extra_info.scorer_failed`), padding excluded."""
    failed = [float((row.get("reward_extra_info") or {}).get("scorer_failed", 0.0)) > 0 for row in rows]
    return torch.tensor(failed, dtype=torch.bool) & ~padding


def check_failure_rate(streak: list[float], share: float, rows: list[dict], failed: torch.Tensor, settings: dict):
    """Append this step's failure share to `streak` (or clear it); raise when it exceeded the limit long enough.

    Raises `VerlBotConfigError` naming the failing data source(s) and the scorer's last error message.
    """
    if share <= float(settings["max_failure_rate"]):
        streak.clear()
        return
    streak.append(share)
    if len(streak) < int(settings["failure_patience"]):
        return
    failed_rows = [row for row, bad in zip(rows, failed.tolist(), strict=True) if bad]
    infos = [row.get("reward_extra_info") or {} for row in failed_rows]
    sources = sorted({str(row.get("data_source", "?")) for row in failed_rows})
    last_error = next((i["scorer_error_msg"] for i in reversed(infos) if i.get("scorer_error_msg")), "(no message)")
    shares = ", ".join(f"{s:.2f}" for s in streak)
    raise VerlBotConfigError(
        f"verl-bot: the scorer failed on {shares} of the rollouts for {len(streak)} consecutive steps "
        f"(> reward.reward_kwargs.bot.max_failure_rate={settings['max_failure_rate']}, failure_patience="
        f"{settings['failure_patience']}); scorer of data_source {', '.join(sources)}: last error: {last_error}"
    )


def _make_compute_advantage(original):
    @functools.wraps(original)
    def _compute_advantage(self, batch, metrics, *args, **kwargs):
        spec = estimator_spec(self.config.algorithm.adv_estimator)
        if spec is None and not bot_manager_in_use(self.config):
            return original(self, batch, metrics, *args, **kwargs)
        padding = padding_mask(batch)
        rows = fetch_rows(batch)
        ctx = BatchContext(rows=rows)
        if bot_manager_in_use(self.config):
            settings = manager_settings(self.config)
            ctx.dense_rewards = bool(settings["token_level"])
            ctx.failed = failed_mask(rows, padding)
            real = int((~padding).sum())
            share = float(ctx.failed.sum()) / max(real, 1)
            streak = self.__dict__.setdefault(STREAK_ATTR, [])
            check_failure_rate(streak, share, rows, ctx.failed, settings)
            metrics["verl_bot/scorer_failed_rows"] = float(ctx.failed.sum())
        if spec is not None and spec.streams:
            ctx.streams = fetch_streams(batch, spec.streams)
        with use_context(ctx):
            result = original(self, batch, metrics, *args, **kwargs)
        metrics.update(ctx.metrics)
        return result

    return _compute_advantage


def install() -> list[str]:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return [wrap(PPOTrainer, "_compute_advantage", ["self", "batch", "metrics"], _make_compute_advantage)]
