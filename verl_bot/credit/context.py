"""What an estimator may read beyond verl's registry arguments: the batch context of one advantage call.

verl's registry passes `token_level_rewards`, `response_mask`, `index` (uids) and `config`; `BatchContext` carries
the rest of the same batch (named reward streams, failed rows, old log-probs, per-row probe results, rows in the
order of `token_level_rewards`), made active by the iteration's advantage call (`verl_bot.training.context`) and read
with `current()`; estimators report diagnostics with `report_metrics`. Outside an iteration (unit tests, scripts)
`current()` is None and `report_metrics` does nothing. A policy loss's knobs, shipped with the actor update, are
active around verl's `ppo_loss` on the worker (`use_loss_settings`, `loss_settings()`): docs/ALGORITHMS.md, section
ReCo in a verl run (where the loss's knobs live).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class BatchContext:
    """The batch behind one advantage computation.

    Attributes:
        streams: stream name -> (B, T) float tensor (right-padded like `token_level_rewards`).
        dense_rewards: True when the rewards come from verl-bot's manager with a reward on every token.
        failed: (B,) bool, True where the row's scorer failed (no verdict); None when unknown.
        rows: (B,) per-row dicts: each trajectory's `extra_fields` (`reward_extra_info`, probe results, ...)
            and its `data_source`.
        tensors: other (B, T) tensors of the batch by verl's field name (e.g. `old_log_probs`).
        metrics: diagnostics reported by the estimator, logged with the step's metrics.
        sessions: (B,) each row's `{uid}_{session}` when some sample of the batch has several rows (a
            multi-output agent loop, `verl_bot.hooks.v1.multi_trajectory`); None when every row is its own.
    """

    streams: Mapping[str, torch.Tensor] = field(default_factory=dict)
    dense_rewards: bool = False
    failed: torch.Tensor | None = None
    rows: list[dict] = field(default_factory=list)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    sessions: Any = None


_active: contextvars.ContextVar[BatchContext | None] = contextvars.ContextVar("verl_bot_batch", default=None)


@contextlib.contextmanager
def use_context(ctx: BatchContext) -> Iterator[BatchContext]:
    """Make `ctx` the active batch context inside the block."""
    token = _active.set(ctx)
    try:
        yield ctx
    finally:
        _active.reset(token)


def current() -> BatchContext | None:
    """The active batch context, or None outside an advantage computation of verl's trainer."""
    return _active.get()


def report_metrics(values: Mapping[str, Any]) -> None:
    """Add estimator diagnostics (name -> float) to the step's metrics; a no-op without an active context."""
    ctx = _active.get()
    if ctx is not None:
        ctx.metrics.update({name: float(v) for name, v in values.items()})


_loss_settings: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "verl_bot_loss_settings", default=None
)


@contextlib.contextmanager
def use_loss_settings(settings: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Make `settings` (knob name -> value) what `loss_settings()` returns inside the block."""
    token = _loss_settings.set(settings)
    try:
        yield settings
    finally:
        _loss_settings.reset(token)


def loss_settings() -> Mapping[str, Any] | None:
    """The settings the trainer shipped with this actor update, or None (no verl-bot loss, or outside verl)."""
    return _loss_settings.get()
