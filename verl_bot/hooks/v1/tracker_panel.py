"""Hook: `verl.trainer.ppo.v1.trainer_base.PPOTrainer.step` (one training step): the token-credit panel and the
per-token histograms in the run's experiment trackers (`verl_bot.observe.panels`).

A run that does not use verl-bot (`verl_bot.launch.activation`) gets verl's method as it is. For a run that does, the
knobs
`algorithm.token_panel_*` are read before each step (a bad one stops the run before step 1 trains); after verl's
own `step` (every advantage call of the step done, its rows still in TransferQueue: verl clears them after
`_compute_metrics`), on the steps `verl_bot.observe.panels.logged_step` picks and only when `trainer.logger` (verl's
`Tracking`) holds a tracker that shows them, wandb or tensorboard:

1. read every row's uid, prompt, response mask, token rewards (`rm_scores`) and advantages from TransferQueue,
   and G (`reward_extra_info.score`) when the `bot` manager composed dense rewards; histograms of r_t, A_t and
   then S_t of every response token of the step (padding rows left out);
2. choose the panel's rollouts (`verl_bot.observe.panels.chosen_rows`) and read those as the token records read a
   step (`compute_advantage.fetch_record_rows`, `verl_bot.observe.token_records.build_records`): the panel shows the
   values the token records hold;
3. send them at the step's number, before verl logs the step's scalars: to wandb a `wandb.Html` panel
   (`verl_bot/token_credit`) and `wandb.Histogram`s (`verl_bot/r_t`, `verl_bot/S_t`, `verl_bot/A_t`); to
   tensorboard the Markdown panel as text and the histograms, on verl's own SummaryWriter.

The time it took is the step's `timing_s/verl_bot_panel` (verl turns `timing_raw` into `timing_s/*`). A panel
that fails is one warning per run; the run goes on. The other trackers (mlflow, swanlab, clearml, trackio,
vemlp_wandb, file, console) get nothing more than verl's scalars.
"""

from __future__ import annotations

import functools
import logging
import time
import types
from typing import Any

import numpy as np
import torch

from verl_bot.hooks.v1.compute_advantage import column_values, fetch_record_rows, padding_mask
from verl_bot.hooks.wrap import wrap
from verl_bot.launch.activation import in_use
from verl_bot.observe import panels, token_records
from verl_bot.step.panel import dense_weights, panel_settings, send_panel, showing_trackers

logger = logging.getLogger("verl_bot")
TIMER = "verl_bot_panel"
WARNED_ATTR = "_verl_bot_panel_warned"


def flat_tokens(column: Any, lengths: list[int]) -> torch.Tensor:
    """(N,) float64: the first `lengths[i]` values of row i of a (B, *) TransferQueue column (nested, or padded
    like `rm_scores`), concatenated (N = sum of `lengths`)."""
    rows = column.unbind() if getattr(column, "is_nested", False) else column
    parts = [row.reshape(-1)[:n].double() for row, n in zip(rows, lengths, strict=True)]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def row_lengths(mask: Any) -> list[int]:
    """Each row's response length, as `fetch_record_rows` counts it (a nested mask's row sizes, else its sum)."""
    return mask.offsets().diff().tolist() if getattr(mask, "is_nested", False) else [int(m.sum()) for m in mask]


def step_values(data: Any, padding: list[bool], dense: tuple[float, float] | None) -> dict[str, np.ndarray]:
    """{"rewards", "advantages"[, "local"]: (N,)} of every response token (`response_mask` 1) of the rows that
    are not padding, from a TransferQueue read of `response_mask`, `rm_scores`, `advantages` (and, with `dense`
    (w_g, w_s), `extra_fields`)."""
    lengths = row_lengths(data["response_mask"])
    real = torch.repeat_interleave(torch.tensor([not p for p in padding]), torch.tensor(lengths, dtype=torch.long))
    keep = (flat_tokens(data["response_mask"], lengths) > 0) & real
    values = {name: flat_tokens(data[field], lengths) for name, field in
              (("rewards", "rm_scores"), ("advantages", "advantages"))}
    if dense is not None:
        infos = [(e.get("reward_extra_info") if isinstance(e, dict) else None) or {}
                 for e in column_values(data["extra_fields"])]
        scores = np.array([float(i.get("score", np.nan)) for i in infos])
        values["local"] = torch.from_numpy(panels.local_signal(values["rewards"].numpy(), scores, np.array(lengths),
                                                                 *dense))
    everything = bool(keep.all())  # single-turn rollouts without padding rows: no copy
    return {name: (array if everything else array[keep]).numpy() for name, array in values.items()}


def panel_records(trainer: Any, batch: Any, data: Any, padding: list[bool], rollouts: int) -> list[dict]:
    """The token records (`verl_bot.observe.token_records`) of the panel's rollouts of the step."""
    prompts = data["prompts"]
    ids = [row.tolist() for row in prompts.unbind()] if getattr(prompts, "is_nested", False) else prompts.tolist()
    uids = [str(u) for u in column_values(data["uid"])]
    real = [i for i, pad in enumerate(padding) if not pad]
    first = {uids[i]: i for i in reversed(real)}  # a group's rollouts share its prompt: one decode per group
    texts = dict(zip(first, trainer.tokenizer.batch_decode([ids[i] for i in first.values()],
                                                           skip_special_tokens=True), strict=True))
    chosen = [real[i] for i in panels.chosen_rows([uids[i] for i in real], [texts[uids[i]] for i in real],
                                                    rollouts)]
    rows = types.SimpleNamespace(keys=[batch.keys[i] for i in chosen], partition_id=batch.partition_id,
                                 tags=[batch.tags[i] for i in chosen])
    algorithm = trainer.config.algorithm
    estimator = str(getattr(algorithm.adv_estimator, "value", algorithm.adv_estimator))
    return token_records.build_records(int(trainer.global_steps), estimator, fetch_record_rows(rows),
                                       trainer.tokenizer, 0)


def log_panel(trainer: Any, batch: Any, settings: panels.PanelSettings, trackers: dict[str, Any]) -> None:
    """Steps 1-3 of the module docstring for the step `batch` (verl's KVBatchMeta of the whole step)."""
    import transfer_queue as tq

    dense = dense_weights(trainer.config)
    fields = ["uid", "prompts", "response_mask", "rm_scores", "advantages", *(["extra_fields"] if dense else [])]
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
    padding = padding_mask(batch).tolist()
    if all(padding):
        return
    values = step_values(data, padding, dense)
    records = panel_records(trainer, batch, data, padding, settings.rollouts)
    send_panel(trackers, int(trainer.global_steps), records, values, settings.tokens)


def after_step(trainer: Any, batch: Any, settings: panels.PanelSettings, timing_raw: dict) -> None:
    """The panel of the step just trained, when it is a logged step and a tracker shows it; never raises."""
    trackers = showing_trackers(getattr(trainer, "logger", None))
    if not trackers or not panels.logged_step(int(trainer.global_steps), int(trainer.total_training_steps),
                                                 settings.every):
        return
    start = time.perf_counter()
    try:
        log_panel(trainer, batch, settings, trackers)
    except Exception as exc:  # noqa: BLE001 - a panel is never worth a failed training step
        if not trainer.__dict__.get(WARNED_ATTR):
            trainer.__dict__[WARNED_ATTR] = True
            logger.warning("verl-bot: no token-credit panel at step %s (none more warned this run): %s: %s",
                           trainer.global_steps, type(exc).__name__, exc)
    timing_raw[TIMER] = time.perf_counter() - start


def _make_step(original):
    @functools.wraps(original)
    def step(self, metrics, timing_raw, *args, **kwargs):
        if not in_use(self.config):
            return original(self, metrics, timing_raw, *args, **kwargs)
        settings = panel_settings(self.config)
        batch = original(self, metrics, timing_raw, *args, **kwargs)
        after_step(self, batch, settings, timing_raw)
        return batch

    return step


def install() -> list[str]:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return [wrap(PPOTrainer, "step", ["self", "metrics", "timing_raw"], _make_step)]
