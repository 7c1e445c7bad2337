"""What an estimator may read beyond verl's registry arguments: the batch context of one advantage call.

verl's estimator registry passes `token_level_rewards`, `response_mask`, `index`
(uids) and `config`. Some estimators need more of the same batch: the named
reward streams (`verl_bot.credit.streams`), which rows' scorers failed, the old
log-probs (ReCo), per-row probe results (GRPO-VPS). `verl_bot.hooks.v1.compute_advantage`
gathers them from TransferQueue for the batch and makes them the active
context while verl's own `_compute_advantage` runs; an estimator reads them with
`current()`. Rows are in the batch's order (the order of `token_level_rewards`).

Estimators also report diagnostics here (`report_metrics`); the same hook adds
them to the step's metrics. Outside a training step (unit tests, scripts) there
is no context: `current()` is None and `report_metrics` does nothing.

Policy losses have a context of their own, on the worker side: verl passes a
registered loss only tensors and the actor's config (a dataclass that refuses
unknown keys), so the trainer ships a verl-bot loss's settings with the update
(`verl_bot.hooks.v1.update_actor`) and the worker makes them active around verl's
`ppo_loss` (`verl_bot.hooks.ppo_loss`); the loss reads them with `loss_settings()`.
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
