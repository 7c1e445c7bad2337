"""Hook: `verl.trainer.ppo.v1.trainer_base.PPOTrainer.step` (one training iteration): the token-credit panel.

A run that does not use verl-bot (`verl_bot.launch.activation`) gets verl's method as it is. For one that does, the
knobs `algorithm.token_panel_*` are read before each iteration (a bad one stops the run before it trains); after
verl's own `step` (every advantage call done, its rows still in TransferQueue: verl clears them after
`_compute_metrics`), on a logged step with wandb or tensorboard among verl's trackers, the panel of the batch
(`verl_bot.training.panel`, read through `verl_bot.hooks.v1.batch.TQBatch`) goes to them at the step's number,
before verl logs the step's scalars. The time it took is `timing_s/verl_bot_panel`.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from verl_bot.hooks.v1.batch import TQBatch
from verl_bot.hooks.wrap import wrap
from verl_bot.launch.activation import in_use
from verl_bot.training.panel import due, panel_of, panel_settings, send_panel, showing_trackers, warn_once

TIMER = "verl_bot_panel"


def after_step(trainer: Any, batch: Any, timing_raw: dict) -> None:
    """The panel of the iteration just trained, when it is a logged step and a tracker shows it; never raises."""
    trackers = showing_trackers(getattr(trainer, "logger", None))
    if not due(trainer, trackers):
        return
    start = time.perf_counter()
    try:
        panel = panel_of(trainer, TQBatch(batch))
        if panel is not None:
            send_panel(trackers, panel)
    except Exception as exc:  # noqa: BLE001 - a panel is never worth a failed training iteration
        warn_once(trainer, exc)
    timing_raw[TIMER] = time.perf_counter() - start


def _make_step(original):
    @functools.wraps(original)
    def step(self, metrics, timing_raw, *args, **kwargs):
        if not in_use(self.config):
            return original(self, metrics, timing_raw, *args, **kwargs)
        panel_settings(self.config)
        batch = original(self, metrics, timing_raw, *args, **kwargs)
        after_step(self, batch, timing_raw)
        return batch

    return step


def install() -> list[str]:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return [wrap(PPOTrainer, "step", ["self", "metrics", "timing_raw"], _make_step)]
