"""Hook: `verl.trainer.ppo.v1.trainer_base.PPOTrainer._compute_advantage` (the batch context of the estimators).

A run that does not use verl-bot (`verl_bot.launch.activation`) gets verl's method as it is.
Around verl's own method, for runs that use verl-bot's `bot` reward manager or
one of its estimators:

Steps 2-5 are the trainer-neutral `verl_bot.step` (`context.step_context`, `records.record_step`); this
adapter reads the batch from TransferQueue:

1. read the batch's rows from TransferQueue: each trajectory's `extra_fields`
   (`reward_extra_info`: `scorer_failed`, the scorer's error, ...), the reward
   streams and the other trajectory fields the configured estimator declared
   (`verl_bot.credit.streams`; `EstimatorSpec.fields`, e.g. ReCo's `responses`), and the
   padding tags (`is_padding`, rows verl adds to fill a batch);
2. stop the run when the scorers keep failing: a failure share above
   `reward.reward_kwargs.bot.max_failure_rate` for `failure_patience`
   consecutive steps raises `VerlBotConfigError` naming the data source and
   the scorer's last error, before this step updates anything;
3. make that the active `verl_bot.credit.context.BatchContext` while verl computes
   the advantages (`verl_bot.hooks.v1.multi_trajectory` takes failed rows out of
   their groups; estimators read streams and report diagnostics);
4. add the estimator's diagnostics and `verl_bot/scorer_failed_rows` to the step's metrics; stop the run (one
   line, `inert`) when verl's advantage step went past `multi_trajectory`'s hook, the replay buffer was built
   without `replay_buffer`'s, or no row of the `bot` manager's dense rewards went through `agent_loop_output`'s
   (`verl_bot.step.rows.DENSE_MARK`): hooks that a changed verl would leave silently inert;
5. for any estimator, on the steps `algorithm.token_report_steps` asks for: read the rows back from
   TransferQueue after verl's own method wrote the advantages (token ids, `rm_scores`, advantages, uid,
   data_source) and write them as token records (`verl_bot.observe.token_records`) for the token-credit report.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from verl_bot.credit.context import use_context
from verl_bot.credit.streams import FIELD_PREFIX, StreamsUnavailable
from verl_bot.hooks.compat import inert
from verl_bot.hooks.v1.replay_buffer import armed
from verl_bot.hooks.wrap import wrap
from verl_bot.launch.activation import in_use
from verl_bot.step import failures
from verl_bot.step.context import step_context
from verl_bot.step.records import record_step
from verl_bot.step.rows import SCALAR_ROWS, went_past_dense_rows


def column_values(column: Any) -> list:
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
        for extra, source in zip(column_values(data["extra_fields"]), column_values(data["data_source"]), strict=True)
    ]


def fetch_padded(batch: Any, fields: list[str]) -> dict[str, torch.Tensor]:
    """The trajectory fields `fields` of a v1 trainer batch (KVBatchMeta) from TransferQueue, right-padded
    (B, T) like verl pads `rm_scores` (rows in `batch.keys` order)."""
    import transfer_queue as tq

    padded = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
    padded = padded.to_padded_tensor()
    return {name: padded[name] for name in fields}


def fetch_streams(batch: Any, names: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """Read the streams `names` of a v1 trainer batch (KVBatchMeta) from TransferQueue, right-padded (B, T)."""
    fields = [FIELD_PREFIX + name for name in names]
    try:
        padded = fetch_padded(batch, fields)
    except Exception as exc:  # noqa: BLE001 - a missing field surfaces as backend-specific errors
        raise StreamsUnavailable(
            f"the batch has no reward streams {fields} ({type(exc).__name__}: {exc}). They are written by "
            "verl-bot's `bot` reward manager (reward.reward_manager.name=bot, token_level=true)"
        ) from exc
    return {name: padded[FIELD_PREFIX + name] for name in names}


def padding_mask(batch: Any) -> torch.Tensor:
    """(B,) bool: True on the rows verl added to fill the batch (`is_padding` tag)."""
    return torch.tensor([bool(tag.get("is_padding", False)) for tag in batch.tags], dtype=torch.bool)


def _advantage_with_context(original, trainer, batch, metrics, *args, **kwargs):
    """verl's `_compute_advantage` inside the batch context (steps 1-4 of the module docstring)."""
    rows = fetch_rows(batch)
    ctx, step_metrics = step_context(
        trainer,
        rows,
        padding_mask(batch),
        read_streams=lambda names: fetch_streams(batch, names),
        read_fields=lambda names: fetch_padded(batch, names),
    )
    if ctx is None:
        return original(trainer, batch, metrics, *args, **kwargs)
    if went_past_dense_rows(ctx.dense_rewards, rows):
        raise inert("AgentLoopOutput.as_dict", "hooks/v1/agent_loop_output.py", SCALAR_ROWS)
    metrics.update(step_metrics)
    before = failures.calls()
    with use_context(ctx):
        result = original(trainer, batch, metrics, *args, **kwargs)
    metrics.update(ctx.metrics)
    if failures.calls() == before:
        raise inert("trainer_base.compute_advantage_for_multi_trajectories", "hooks/v1/multi_trajectory.py",
                    "failed rollouts would keep their advantages")
    return result


def check_buffer_armed(trainer: Any) -> None:
    """Stop the run when verl's replay buffer was built without verl-bot's fatal-marker check (its
    `_build_replay_buffer` hook never fired): a reward configuration error would then train on silently."""
    if not armed(getattr(trainer, "replay_buffer", None)):
        raise inert("PPOTrainer._build_replay_buffer", "hooks/v1/replay_buffer.py",
                    "a reward configuration error would not stop the run")


def _rows_of(column: Any, lengths: list[int]) -> list[list]:
    """Per-row lists of a (B, *) TransferQueue column: a nested tensor's rows, or a padded one cut to `lengths`."""
    if getattr(column, "is_nested", False):
        return [row.tolist() for row in column.unbind()]
    return [row[:n].tolist() for row, n in zip(column, lengths, strict=True)]


def fetch_record_rows(batch: Any) -> list[dict]:
    """The rows of the batch as `verl_bot.observe.token_records.build_records` reads them (padding rows left out), read
    back from TransferQueue after verl wrote the advantages."""
    import transfer_queue as tq

    fields = ["uid", "prompts", "responses", "response_mask", "rm_scores", "advantages", "data_source", "extra_fields"]
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
    mask = data["response_mask"]
    lengths = (
        mask.offsets().diff().tolist() if getattr(mask, "is_nested", False) else [int(m.sum()) for m in mask]
    )
    prompts = data["prompts"]
    prompt_ids = (
        [row.tolist() for row in prompts.unbind()] if getattr(prompts, "is_nested", False) else prompts.tolist()
    )
    columns = {name: _rows_of(data[name], lengths) for name in ("responses", "rm_scores", "advantages")}
    padding = padding_mask(batch).tolist()
    rows = []
    columns_of_rows = (column_values(data[name]) for name in ("uid", "data_source", "extra_fields"))
    for i, (uid, source, extra) in enumerate(zip(*columns_of_rows, strict=True)):
        if padding[i]:
            continue
        rows.append(
            {
                "uid": str(uid),
                "key": str(batch.keys[i]),
                "data_source": str(source),
                "prompt_ids": prompt_ids[i],
                "response_ids": columns["responses"][i],
                "rewards": columns["rm_scores"][i],
                "advantages": columns["advantages"][i],
                "info": (extra.get("reward_extra_info") if isinstance(extra, dict) else None) or {},
            }
        )
    return rows


def _make_compute_advantage(original):
    @functools.wraps(original)
    def _compute_advantage(self, batch, metrics, *args, **kwargs):
        if not in_use(self.config):
            return original(self, batch, metrics, *args, **kwargs)
        check_buffer_armed(self)
        result = _advantage_with_context(original, self, batch, metrics, *args, **kwargs)
        record_step(self, lambda: fetch_record_rows(batch))
        return result

    return _compute_advantage


def install() -> list[str]:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return [wrap(PPOTrainer, "_compute_advantage", ["self", "batch", "metrics"], _make_compute_advantage)]
