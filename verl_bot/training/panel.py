"""The token-credit panel and the per-token histograms of an iteration, sent to the run's trackers (every trainer).

On the steps `verl_bot.observe.panels.logged_step` picks, when verl's `Tracking` holds wandb or tensorboard:
`panel_of` reads the iteration's batch (`verl_bot.training.batch.TrainingBatch`, after its advantages were
written): the histograms of r_t, A_t (and S_t of the `bot` manager's composition) of every response token, and the
token records of the panel's rollouts; `send_panel` sends them (wandb: a `wandb.Html` panel and
`wandb.Histogram`s; tensorboard: the Markdown panel as text and the histograms, on verl's own SummaryWriter). The
adapter says when (v1: after verl's `step`; legacy: prepared with the data metrics, sent just before verl logs).
A panel that fails is one warning per run (`warn_once`); the run goes on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from verl_bot.knobs import enum_name
from verl_bot.observe import panels, token_records
from verl_bot.rewards.settings import bot_manager_in_use, manager_settings
from verl_bot.training.batch import TrainingBatch, real_rows, record_rows, token_values

SHOWN_BY = ("wandb", "tensorboard")  # the trackers of verl's `Tracking` that get the panel and the histograms
WARNED_ATTR = "_verl_bot_panel_warned"
logger = logging.getLogger("verl_bot")


@dataclass(frozen=True)
class Panel:
    """One iteration's panel, ready to send: its step, the records of its rollouts, the token values (N,) of
    every response token, how many tokens a rollout shows."""

    step: int
    records: list[dict]
    values: dict[str, np.ndarray]
    tokens: int


def panel_settings(config: Any) -> panels.PanelSettings:
    """The run's `algorithm.token_panel_*` knobs; a bad one is a `VerlBotConfigError` (the start-up checks refuse
    it before Ray; here it stops the first step)."""
    return panels.PanelSettings.from_config(config.algorithm)


def showing_trackers(tracking: Any) -> dict[str, Any]:
    """{name: verl's logger object} of the trackers of verl's `Tracking` that show a panel."""
    loggers = getattr(tracking, "logger", None) or {}
    return {name: loggers[name] for name in SHOWN_BY if name in loggers}


def local_of(config: Any):
    """A function (rewards (N,), scores (B,), lengths (B,)) -> (N,) S_t undoing the `bot` manager's composition
    (dense: `verl_bot.observe.panels.local_signal`; returns: `local_signal_returns`) when it gives a vector per
    response with w_s != 0, else None."""
    if not bot_manager_in_use(config):
        return None
    settings = manager_settings(config)
    if not settings.per_token or not settings.w_local:
        return None
    undo = panels.local_signal if settings.layout == "dense" else panels.local_signal_returns
    w_global, w_local = settings.w_global, settings.w_local
    return lambda rewards, scores, lengths: undo(rewards, scores, lengths, w_global, w_local)


def due(trainer: Any, backends: Any) -> bool:
    """True when this iteration (`trainer.global_steps`) sends a panel to one of `backends` (verl's
    `trainer.logger` names, or its `Tracking`'s loggers)."""
    settings = panel_settings(trainer.config)
    backends = [backends] if isinstance(backends, str) else list(backends or [])
    return bool(set(backends) & set(SHOWN_BY)) and panels.logged_step(
        int(trainer.global_steps), int(trainer.total_training_steps), settings.every)


def panel_of(trainer: Any, batch: TrainingBatch, settings: panels.PanelSettings | None = None) -> Panel | None:
    """The panel of the iteration `batch` (advantages written) at `settings` (None: the run's knobs), None when
    every row is padding."""
    settings = settings or panel_settings(trainer.config)
    rows = real_rows(batch)
    if not rows:
        return None
    values = token_values(batch, local_of(trainer.config))
    every = batch.rows()
    uids = [str(every[i].get("uid", "")) for i in rows]
    first = {uid: i for uid, i in reversed(list(zip(uids, rows, strict=True)))}  # one decode per group
    prompts = dict(zip(first, trainer.tokenizer.batch_decode(batch.prompts(list(first.values())),
                                                             skip_special_tokens=True), strict=True))
    chosen = [rows[i] for i in panels.chosen_rows(uids, [prompts[uid] for uid in uids], settings.rollouts)]
    step = int(trainer.global_steps)
    estimator = enum_name(trainer.config.algorithm.adv_estimator)
    records = token_records.build_records(step, estimator, record_rows(batch, chosen), trainer.tokenizer, 0)
    return Panel(step, records, values, settings.tokens)


def warn_once(trainer: Any, exc: Exception) -> None:
    """One warning per run: a panel failed (the run goes on)."""
    if not trainer.__dict__.get(WARNED_ATTR):
        trainer.__dict__[WARNED_ATTR] = True
        logger.warning("verl-bot: no token-credit panel at step %s (none more warned this run): %s: %s",
                       trainer.global_steps, type(exc).__name__, exc)


def send_wandb(wandb: Any, step: int, panel: str, histograms: dict[str, panels.Histogram]) -> None:
    """The HTML panel and the histograms to the run of `wandb` (the module verl's `Tracking` logs with)."""
    data = {panels.PANEL_KEY: wandb.Html(panel, inject=False)}
    data.update({key: wandb.Histogram(np_histogram=(h.counts, h.edges)) for key, h in histograms.items()})
    wandb.log(data, step=step)


def send_tensorboard(writer: Any, step: int, panel: str, histograms: dict[str, panels.Histogram]) -> None:
    """The Markdown panel (text dashboard) and the histograms to a torch SummaryWriter (verl's adapter's)."""
    writer.add_text(panels.PANEL_KEY, panel, step)
    for key, h in histograms.items():
        writer.add_histogram_raw(key, min=h.low, max=h.high, num=h.num, sum=h.total, sum_squares=h.total_squares,
                                 bucket_limits=h.edges[1:].tolist(), bucket_counts=h.counts.tolist(), global_step=step)
    writer.flush()


def send_panel(trackers: dict[str, Any], panel: Panel) -> None:
    """`panel`: its records' panel and the histograms of its token values (`panels.step_histograms`) to each
    tracker of `trackers` (`showing_trackers`)."""
    histograms = panels.step_histograms(panel.values)
    estimator = panel.records[0]["estimator"]
    if "wandb" in trackers:
        html = panels.panel_html(panel.step, estimator, panel.records, panel.tokens)
        send_wandb(trackers["wandb"], panel.step, html, histograms)
    if "tensorboard" in trackers:
        markdown = panels.panel_markdown(panel.step, estimator, panel.records, panel.tokens)
        send_tensorboard(trackers["tensorboard"].writer, panel.step, markdown, histograms)
