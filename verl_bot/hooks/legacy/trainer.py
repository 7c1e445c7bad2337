"""Hook: where verl's legacy-family trainers hand over their batch (`RayPPOTrainer` and every subclass).

verl's `RayPPOTrainer` keeps an iteration in one `DataProto` on the driver and hands it, whatever `fit` runs it (its
own, `SeparateRayPPOTrainer.fit_step` of verl's one-step-off and fully async trainers, a recipe's or a user's
subclass), to module functions it binds by name: `compute_advantage` (`ray_trainer`), `compute_data_metrics`
(`metric_utils`), then `Tracking.log`. The wrappers act for the legacy-family trainer of a verl-bot run constructed in
this process (`RayPPOTrainer.__init__` registers it): docs/architecture.md, section One seam per trainer.
"""

from __future__ import annotations

import functools
from typing import Any

from verl_bot.hooks.legacy.batch import ProtoBatch
from verl_bot.hooks.resume import legacy_resume_step, note_resumed_step
from verl_bot.hooks.wrap import wrap
from verl_bot.launch.activation import in_use
from verl_bot.training.advantage import AdapterHooks, advantage_call
from verl_bot.training.failures import advantages_without_failures
from verl_bot.training.metrics import reward_metrics_or_warn
from verl_bot.training.panel import due, panel_of, send_panel, showing_trackers, warn_once

STEP_METRICS_ATTR = "_verl_bot_step_metrics"
PANEL_ATTR = "_verl_bot_panel"
HOOKS = AdapterHooks(
    advantage=("ray_trainer.compute_advantage", "hooks/legacy/trainer.py"),
    dense_rows=("AgentLoopWorker._postprocess", "hooks/legacy/agent_loop.py"),
    failures=("ray_trainer.compute_advantage", "hooks/legacy/trainer.py"),
)
_trainer: list[Any] = []  # this process's legacy-family trainer of a verl-bot run (a process runs one)


def running_trainer() -> Any:
    """The legacy-family trainer of a verl-bot run constructed in this process, or None."""
    trainer = _trainer[0] if _trainer else None
    return trainer if trainer is not None and in_use(trainer.config) else None


def register(trainer: Any) -> None:
    """`trainer` is this process's legacy-family trainer (of a verl-bot run); its resume step is noted."""
    _trainer[:] = [trainer]
    note_resumed_step(legacy_resume_step(trainer.config))


def _make_init(original):
    """`RayPPOTrainer.__init__`: the trainer is this process's; the iteration it resumes from is noted
    (`verl_bot.hooks.resume`: its metrics file keeps the earlier iterations' lines)."""

    @functools.wraps(original)
    def __init__(self, config, *args, **kwargs):
        original(self, config, *args, **kwargs)
        if in_use(self.config):
            register(self)

    return __init__


def _make_compute_advantage(original):
    """`compute_advantage`: `verl_bot.training.advantage.advantage_call` over the batch
    (`verl_bot.hooks.legacy.batch.ProtoBatch`), failed rollouts out of their groups (`verl_bot.training.failures`);
    verl's v1 trainer is no `RayPPOTrainer`, so its own use of `compute_advantage` is left alone."""

    @functools.wraps(original)
    def compute_advantage(data, adv_estimator, *args, **kwargs):
        trainer = running_trainer()
        if trainer is None:
            return original(data, adv_estimator, *args, **kwargs)
        metrics: dict = {}
        result = advantage_call(
            trainer, ProtoBatch(data),
            lambda: advantages_without_failures(lambda d: original(d, adv_estimator, *args, **kwargs), data,
                                                adv_estimator),
            metrics, HOOKS,
        )
        trainer.__dict__[STEP_METRICS_ATTR] = metrics
        return result

    return compute_advantage


def _make_compute_data_metrics(original):
    """`compute_data_metrics`: verl's, plus the iteration's reward metrics and the estimator's diagnostics; on a
    logged iteration the token-credit panel is prepared (`verl_bot.training.panel`)."""

    @functools.wraps(original)
    def compute_data_metrics(batch, *args, **kwargs):
        metrics = original(batch, *args, **kwargs)
        trainer = running_trainer()
        if trainer is None:
            return metrics
        view = ProtoBatch(batch)
        metrics.update(reward_metrics_or_warn(trainer, view))
        metrics.update(trainer.__dict__.pop(STEP_METRICS_ATTR, {}))
        if due(trainer, trainer.config.trainer.get("logger")):
            try:
                trainer.__dict__[PANEL_ATTR] = panel_of(trainer, view)
            except Exception as exc:  # noqa: BLE001 - a panel is never worth a failed training iteration
                warn_once(trainer, exc)
        return metrics

    return compute_data_metrics


def _make_tracking_log(original):
    """`Tracking.log`: the prepared panel goes to wandb and tensorboard just before verl logs the iteration's
    scalars."""

    @functools.wraps(original)
    def log(self, data, step, *args, **kwargs):
        trainer = running_trainer()
        panel = trainer.__dict__.pop(PANEL_ATTR, None) if trainer is not None else None
        if panel is not None and panel.step == step:
            try:
                send_panel(showing_trackers(self), panel)
            except Exception as exc:  # noqa: BLE001 - a panel is never worth a failed training iteration
                warn_once(trainer, exc)
        return original(self, data, step, *args, **kwargs)

    return log


SEPARATION = "verl.experimental.separation.ray_trainer"  # verl's one-step-off and fully async trainers' base
BOUND = {"compute_advantage": "verl.trainer.ppo.ray_trainer", "compute_data_metrics": "verl.trainer.ppo.metric_utils"}


def check_bindings() -> list[str]:
    """verl's `SeparateRayPPOTrainer` hands its batch to the functions it bound by name at its import: they must be
    the ones this module wraps (found), not functions of its own (changed)."""
    import importlib

    from verl_bot.hooks.compat import note

    separation = importlib.import_module(SEPARATION)
    labels = []
    for name, home in BOUND.items():
        label = f"separation.ray_trainer.{name}"
        same = getattr(separation, name, None) is getattr(importlib.import_module(home), name)
        note(label, "found" if same else "changed", f"{SEPARATION} hands its batch to a {name} other than {home}'s")
        labels.append(label)
    return labels


def install_metrics() -> list[str]:
    from verl.trainer.ppo import metric_utils

    return [wrap(metric_utils, "compute_data_metrics", ["batch", "use_critic"], _make_compute_data_metrics)]


def install() -> list[str]:
    from verl.trainer.ppo import ray_trainer
    from verl.utils.tracking import Tracking

    return [
        wrap(ray_trainer.RayPPOTrainer, "__init__", ["self", "config"], _make_init),
        wrap(ray_trainer, "compute_advantage", ["data", "adv_estimator"], _make_compute_advantage),
        wrap(Tracking, "log", ["self", "data", "step"], _make_tracking_log),
    ]
