"""The token-credit panel and the per-token histograms of a step, sent to the run's trackers (both trainers).

The trainer adapters read the step's tokens and its panel rollouts in their trainer's way (v1:
`verl_bot.hooks.v1.tracker_panel`, from TransferQueue; legacy: `verl_bot.hooks.legacy.trainer`, from the step's
`DataProto`); what the panel shows and the histograms are `verl_bot.observe.panels`; here: which of verl's
trackers show them, and the sending (wandb: a `wandb.Html` panel and `wandb.Histogram`s; tensorboard: the
Markdown panel as text and the histograms, on verl's own SummaryWriter).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from verl_bot.errors import VerlBotConfigError
from verl_bot.observe import panels
from verl_bot.rewards.settings import bot_manager_in_use, manager_settings

SHOWN_BY = ("wandb", "tensorboard")  # the trackers of verl's `Tracking` that get the panel and the histograms


def panel_settings(config: Any) -> panels.PanelSettings:
    """The run's `algorithm.token_panel_*` knobs; a bad one is a `VerlBotConfigError` (the start-up checks refuse
    it before Ray; here it stops the first step)."""
    try:
        return panels.panel_settings(config.algorithm)
    except ValueError as exc:
        raise VerlBotConfigError(f"verl-bot: {exc}") from exc


def showing_trackers(tracking: Any) -> dict[str, Any]:
    """{name: verl's logger object} of the trackers of verl's `Tracking` that show a panel."""
    loggers = getattr(tracking, "logger", None) or {}
    return {name: loggers[name] for name in SHOWN_BY if name in loggers}


def dense_weights(config: Any) -> tuple[float, float] | None:
    """(w_g, w_s) when the `bot` manager composes dense rewards `w_g * G + w_s * S_t` (w_s != 0), else None."""
    if not bot_manager_in_use(config):
        return None
    settings = manager_settings(config)
    if not settings["token_level"] or not float(settings["w_local"]):
        return None
    return float(settings["w_global"]), float(settings["w_local"])


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


def send_panel(trackers: dict[str, Any], step: int, records: list[dict], values: dict[str, np.ndarray],
               tokens: int) -> None:
    """The panel of `records` (token records of the panel's rollouts) and the histograms of `values` (the step's
    token values, `panels.step_histograms`) to each tracker of `trackers` (`showing_trackers`)."""
    histograms = panels.step_histograms(values)
    estimator = records[0]["estimator"]
    if "wandb" in trackers:
        send_wandb(trackers["wandb"], step, panels.panel_html(step, estimator, records, tokens), histograms)
    if "tensorboard" in trackers:
        send_tensorboard(trackers["tensorboard"].writer, step, panels.panel_markdown(step, estimator, records, tokens),
                         histograms)
