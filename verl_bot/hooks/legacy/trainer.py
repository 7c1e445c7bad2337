"""Hook: `verl.trainer.ppo.ray_trainer` (legacy trainer: the step's batch context, failures, records, metrics).

verl's legacy `RayPPOTrainer.fit` computes a step's advantages on the driver with the module function
`compute_advantage(data, adv_estimator, ...)` on the whole batch (one `DataProto`), and its data metrics with
`compute_data_metrics(batch, use_critic)`; both are looked up in `ray_trainer`'s module globals at each call.
verl's v1 utilities import the same `compute_advantage` (`verl.trainer.ppo.v1.utils`), so the wrappers act only
while a legacy trainer's `fit` runs a verl-bot run (`verl_bot.launch.activation`); else: verl's functions as
they are.

- `RayPPOTrainer.fit`: the trainer becomes the active one for the wrappers below while `fit` runs;
- `compute_advantage`: the step's batch context (`verl_bot.step.context.step_context`: the rows'
  `reward_extra_info`, failed rows, the failure-rate stop, the estimator's streams `bot_stream_<name>` and fields
  from the batch), failed rollouts out of their groups (`verl_bot.step.failures`), then the token records of
  the steps asked for (`verl_bot.step.records`);
- `compute_data_metrics`: verl's, plus the reward metrics of the step's rollouts
  (`verl_bot.rewards.metrics.training_reward_metrics`) and the estimator's diagnostics of its advantage call.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator
from typing import Any

import torch

from verl_bot.credit.context import use_context
from verl_bot.credit.streams import FIELD_PREFIX, StreamsUnavailable
from verl_bot.hooks.legacy.agent_loop import INFO_KEY
from verl_bot.hooks.wrap import wrap
from verl_bot.launch.activation import in_use
from verl_bot.rewards.metrics import training_reward_metrics
from verl_bot.step.context import step_context
from verl_bot.step.failures import advantages_without_failures
from verl_bot.step.records import record_step

STEP_METRICS_ATTR = "_verl_bot_step_metrics"
_trainer: contextvars.ContextVar[Any] = contextvars.ContextVar("verl_bot_legacy_trainer", default=None)


@contextlib.contextmanager
def active(trainer: Any) -> Iterator[None]:
    """`trainer` is the legacy trainer whose step the module functions below serve, inside the block."""
    token = _trainer.set(trainer)
    try:
        yield
    finally:
        _trainer.reset(token)


def running_trainer() -> Any:
    """The legacy trainer of a verl-bot run whose `fit` is running, or None."""
    trainer = _trainer.get()
    return trainer if trainer is not None and in_use(trainer.config) else None


def batch_rows(data: Any) -> list[dict]:
    """(B,) each row's non-tensor values (`data_source`, agent-loop extra fields, ...) with its
    `reward_extra_info` dict, as the v1 adapter reads a trajectory's `extra_fields`."""
    columns = data.non_tensor_batch
    rows = [{key: values[i] for key, values in columns.items()} for i in range(len(data))]
    for row in rows:
        row[INFO_KEY] = row.get(INFO_KEY) if isinstance(row.get(INFO_KEY), dict) else {}
    return rows


def batch_streams(data: Any, names: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """The streams `names` of the batch, (B, T) each (`bot_stream_<name>`, written by `agent_loop`)."""
    missing = [FIELD_PREFIX + name for name in names if FIELD_PREFIX + name not in data.batch.keys()]
    if missing:
        raise StreamsUnavailable(
            f"the batch has no reward streams {missing}. They are written by verl-bot's `bot` reward manager "
            "(reward.reward_manager.name=bot, token_level=true)"
        )
    return {name: data.batch[FIELD_PREFIX + name] for name in names}


def record_rows(data: Any) -> list[dict]:
    """The rows of the batch as `verl_bot.observe.token_records.build_records` reads them (unpadded)."""
    prompt_width = data.batch["prompts"].shape[1]
    attention = data.batch["attention_mask"]
    uids = data.non_tensor_batch["uid"]
    seen: dict[str, int] = {}
    rows = []
    for i, info in enumerate(batch_rows(data)):
        prompt_mask = attention[i, :prompt_width].bool()
        length = int(attention[i, prompt_width:].sum())
        uid = str(uids[i])
        seen[uid] = seen.get(uid, -1) + 1
        rows.append(
            {
                "uid": uid,
                "key": f"{uid}_{seen[uid]}",
                "data_source": str(info.get("data_source", "")),
                "prompt_ids": data.batch["prompts"][i][prompt_mask].tolist(),
                "response_ids": data.batch["responses"][i, :length].tolist(),
                "rewards": data.batch["token_level_scores"][i, :length].tolist(),
                "advantages": data.batch["advantages"][i, :length].tolist(),
                "info": info[INFO_KEY],
            }
        )
    return rows


def _make_compute_advantage(original):
    @functools.wraps(original)
    def compute_advantage(data, adv_estimator, *args, **kwargs):
        trainer = running_trainer()
        if trainer is None:
            return original(data, adv_estimator, *args, **kwargs)
        ctx, metrics = step_context(
            trainer,
            batch_rows(data),
            torch.zeros(len(data), dtype=torch.bool),  # the legacy trainer adds no padding rows
            read_streams=lambda names: batch_streams(data, names),
            read_fields=lambda names: {name: data.batch[name] for name in names},
        )
        if ctx is None:
            result = original(data, adv_estimator, *args, **kwargs)
        else:
            with use_context(ctx):
                result = advantages_without_failures(original, data, None, adv_estimator, *args, **kwargs)
            metrics.update(ctx.metrics)
        trainer.__dict__[STEP_METRICS_ATTR] = metrics
        record_step(trainer, lambda: record_rows(result))
        return result

    return compute_advantage


def _make_compute_data_metrics(original):
    @functools.wraps(original)
    def compute_data_metrics(batch, *args, **kwargs):
        metrics = original(batch, *args, **kwargs)
        trainer = running_trainer()
        if trainer is not None:
            metrics.update(training_reward_metrics(batch_rows(batch)))
            metrics.update(trainer.__dict__.pop(STEP_METRICS_ATTR, {}))
        return metrics

    return compute_data_metrics


def _make_fit(original):
    @functools.wraps(original)
    def fit(self, *args, **kwargs):
        with active(self):
            return original(self, *args, **kwargs)

    return fit


def install() -> list[str]:
    from verl.trainer.ppo import ray_trainer

    return [
        wrap(ray_trainer.RayPPOTrainer, "fit", ["self"], _make_fit),
        wrap(ray_trainer, "compute_advantage", ["data", "adv_estimator"], _make_compute_advantage),
        wrap(ray_trainer, "compute_data_metrics", ["batch", "use_critic"], _make_compute_data_metrics),
    ]
