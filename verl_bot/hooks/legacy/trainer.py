"""Hook: `verl.trainer.ppo.ray_trainer` (legacy trainer: the step's batch context, failures, records, metrics).

verl's legacy `RayPPOTrainer.fit` computes a step's advantages on the driver with the module function
`compute_advantage(data, adv_estimator, ...)` on the whole batch (one `DataProto`), and its data metrics with
`compute_data_metrics(batch, use_critic)`; both are looked up in `ray_trainer`'s module globals at each call.
verl's v1 utilities import the same `compute_advantage` (`verl.trainer.ppo.v1.utils`), so the wrappers act only
while a legacy trainer's `fit` runs a verl-bot run (`verl_bot.launch.activation`); else: verl's functions as
they are.

- `RayPPOTrainer.fit`: the trainer becomes the active one for the wrappers below while `fit` runs; the step it
  resumes from is noted first (`verl_bot.hooks.resume`: its metrics file keeps the earlier steps' lines);
- `compute_advantage`: the step's batch context (`verl_bot.step.context.step_context`: the rows'
  `reward_extra_info`, failed rows, the failure-rate stop, the estimator's streams `bot_stream_<name>` and fields
  from the batch), failed rollouts out of their groups (`verl_bot.step.failures`), then the token records of
  the steps asked for (`verl_bot.step.records`); a step of the `bot` manager's dense rewards none of whose rows
  carries `agent_loop`'s mark (`verl_bot.step.rows.DENSE_MARK`) went past that hook and stops the run;
- `compute_data_metrics`: verl's, plus the reward metrics of the step's rollouts
  (`verl_bot.rewards.metrics.training_reward_metrics`) and the estimator's diagnostics of its advantage call;
  on the steps `verl_bot.observe.panels.logged_step` picks, with wandb or tensorboard among `trainer.logger`, the
  step's token-credit panel and per-token histograms are made ready (`verl_bot.step.panel`);
- `verl.utils.tracking.Tracking.log` (verl's trackers, made by the legacy `fit` itself): the panel ready for the
  step goes to wandb and tensorboard just before verl logs the step's scalars.
A panel that fails is one warning per run; the run goes on.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from verl_bot.credit.context import use_context
from verl_bot.credit.streams import FIELD_PREFIX, StreamsUnavailable
from verl_bot.hooks.compat import inert
from verl_bot.hooks.legacy.agent_loop import INFO_KEY
from verl_bot.hooks.resume import legacy_resume_step, note_resumed_step
from verl_bot.hooks.wrap import wrap
from verl_bot.launch.activation import in_use
from verl_bot.observe import panels, token_records
from verl_bot.rewards.metrics import training_reward_metrics
from verl_bot.step.context import step_context
from verl_bot.step.failures import advantages_without_failures
from verl_bot.step.panel import SHOWN_BY, dense_weights, panel_settings, send_panel, showing_trackers
from verl_bot.step.records import record_step
from verl_bot.step.rows import SCALAR_ROWS, went_past_dense_rows

STEP_METRICS_ATTR = "_verl_bot_step_metrics"
PANEL_ATTR = "_verl_bot_panel"
WARNED_ATTR = "_verl_bot_panel_warned"
logger = logging.getLogger("verl_bot")
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
    keys = list(data.non_tensor_batch)
    rows = [dict(zip(keys, values, strict=True)) for values in zip(*data.non_tensor_batch.values(), strict=True)]
    for row in rows:
        if not isinstance(row.get(INFO_KEY), dict):
            row[INFO_KEY] = {}
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


def step_values(data: Any, rows: list[dict], dense: tuple[float, float] | None) -> dict[str, np.ndarray]:
    """{"rewards", "advantages"[, "local"]: (N,)} of every response token (`response_mask` 1) of the batch, from
    its `record_rows`; with `dense` (w_g, w_s) the local signal S_t of the `bot` manager's rewards."""
    lengths = np.array([len(row["rewards"]) for row in rows])
    mask = data.batch["response_mask"]
    keep = np.concatenate([mask[i, :n].numpy() > 0 for i, n in enumerate(lengths)])
    values = {name: np.concatenate([np.asarray(row[name], dtype=np.float64) for row in rows])
              for name in ("rewards", "advantages")}
    if dense is not None:
        scores = np.array([float(row["info"].get("score", np.nan)) for row in rows])
        values["local"] = panels.local_signal(values["rewards"], scores, lengths, *dense)
    return {name: array[keep] for name, array in values.items()}


def ready_panel(trainer: Any, data: Any) -> None:
    """The token-credit panel of this step (its rollouts' token records and the step's token values) kept on the
    trainer for `Tracking.log`, on a logged step of a run that logs to wandb or tensorboard."""
    settings = panel_settings(trainer.config)
    backends = trainer.config.trainer.get("logger") or []
    backends = [backends] if isinstance(backends, str) else list(backends)
    step = int(trainer.global_steps)
    if not set(backends) & set(SHOWN_BY) or not panels.logged_step(step, int(trainer.total_training_steps),
                                                                    settings.every):
        return
    try:
        rows = record_rows(data)
        texts = trainer.tokenizer.batch_decode([row["prompt_ids"] for row in rows], skip_special_tokens=True)
        chosen = panels.chosen_rows([row["uid"] for row in rows], texts, settings.rollouts)
        estimator = trainer.config.algorithm.adv_estimator
        estimator = str(getattr(estimator, "value", estimator))
        records = token_records.build_records(step, estimator, [rows[i] for i in chosen], trainer.tokenizer, 0)
        values = step_values(data, rows, dense_weights(trainer.config))
        trainer.__dict__[PANEL_ATTR] = (step, records, values, settings.tokens)
    except Exception as exc:  # noqa: BLE001 - a panel is never worth a failed training step
        warn_once(trainer, step, exc)


def warn_once(trainer: Any, step: int, exc: Exception) -> None:
    if not trainer.__dict__.get(WARNED_ATTR):
        trainer.__dict__[WARNED_ATTR] = True
        logger.warning("verl-bot: no token-credit panel at step %s (none more warned this run): %s: %s",
                       step, type(exc).__name__, exc)


def _make_compute_advantage(original):
    @functools.wraps(original)
    def compute_advantage(data, adv_estimator, *args, **kwargs):
        trainer = running_trainer()
        if trainer is None:
            return original(data, adv_estimator, *args, **kwargs)
        rows = batch_rows(data)
        ctx, metrics = step_context(
            trainer,
            rows,
            torch.zeros(len(data), dtype=torch.bool),  # the legacy trainer adds no padding rows
            read_streams=lambda names: batch_streams(data, names),
            read_fields=lambda names: {name: data.batch[name] for name in names},
        )
        if ctx is None:
            result = original(data, adv_estimator, *args, **kwargs)
        else:
            if went_past_dense_rows(ctx.dense_rewards, rows):
                raise inert("AgentLoopWorker._postprocess", "hooks/legacy/agent_loop.py", SCALAR_ROWS)
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
            ready_panel(trainer, batch)
        return metrics

    return compute_data_metrics


def _make_tracking_log(original):
    @functools.wraps(original)
    def log(self, data, step, *args, **kwargs):
        trainer = running_trainer()
        ready = trainer.__dict__.pop(PANEL_ATTR, None) if trainer is not None else None
        if ready is not None and ready[0] == step:
            try:
                send_panel(showing_trackers(self), *ready)
            except Exception as exc:  # noqa: BLE001 - a panel is never worth a failed training step
                warn_once(trainer, step, exc)
        return original(self, data, step, *args, **kwargs)

    return log


def _make_fit(original):
    @functools.wraps(original)
    def fit(self, *args, **kwargs):
        if in_use(self.config):
            note_resumed_step(legacy_resume_step(self.config))
        with active(self):
            return original(self, *args, **kwargs)

    return fit


def install() -> list[str]:
    from verl.trainer.ppo import ray_trainer
    from verl.utils.tracking import Tracking

    return [
        wrap(Tracking, "log", ["self", "data", "step"], _make_tracking_log),
        wrap(ray_trainer.RayPPOTrainer, "fit", ["self"], _make_fit),
        wrap(ray_trainer, "compute_advantage", ["data", "adv_estimator"], _make_compute_advantage),
        wrap(ray_trainer, "compute_data_metrics", ["batch", "use_critic"], _make_compute_data_metrics),
    ]
