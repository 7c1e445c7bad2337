"""What a verl-bot method ships with the actor update and reads back from it, the same on every trainer.

verl hands a registered policy loss only tensors and the actor's config (which refuses unknown keys), so each method
in use declares what it needs (`verl_bot.actor_needs.ActorNeeds` on its row) and the trainer adapter ships, with
what this module computes, its knobs as non-tensor entries of every micro-batch (v1: the batch meta's `extra_info`;
legacy: the `DataProto`'s `meta_info`; a loss's under `LOSS_KNOBS_KEY`) and its per-token fields; `update_metrics`
names the iteration's metrics and stops an update of a verl-bot loss without `KNOBS_METRIC`, `check_advantage_call`
an iteration whose advantages skipped `advantage_call`. Explained in docs/architecture.md, section One seam per
trainer.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from verl_bot.actor_needs import ActorNeeds
from verl_bot.advantage import estimator_spec
from verl_bot.errors import VerlBotConfigError, inert
from verl_bot.losses import LOSSES, loss_knobs, loss_name

LOSS_KNOBS_KEY = "verl_bot_loss"
KNOBS_METRIC = "verl_bot/loss_knobs"  # a loss metric of the worker; verl's update names it actor/verl_bot/loss_knobs
ADVANTAGE_ATTR = "_verl_bot_advantage_step"  # on the trainer: the iteration of its last `advantage_call`


def needs_in_use(config: Any) -> list[ActorNeeds]:
    """What the run's estimator and loss need from the actor update (their rows' `actor`)."""
    spec = estimator_spec(config.algorithm.adv_estimator)
    loss = loss_name(config)
    rows = [spec, LOSSES[loss] if loss is not None else None]
    return [row.actor for row in rows if row is not None and row.actor is not None]


def update_knobs(config: Any) -> dict[str, dict]:
    """{non-tensor key: knobs} to ship with the update: a verl-bot loss's `+algorithm.<loss>_*` knobs under
    `LOSS_KNOBS_KEY`, each method's declared knobs under its key."""
    loss = loss_name(config)
    knobs = {LOSS_KNOBS_KEY: loss_knobs(config, loss)} if loss is not None else {}
    knobs.update({needs.key: needs.knobs(config) for needs in needs_in_use(config) if needs.knobs is not None})
    return knobs


def token_fields(trainer: Any, responses: list[list[int]]) -> tuple[dict[str, list[np.ndarray]], float]:
    """The per-token fields the methods in use compute from the responses' token ids (field -> one (n_i,) array
    per response), and the seconds it took."""
    start = time.perf_counter()
    fields: dict[str, list[np.ndarray]] = {}
    for needs in needs_in_use(trainer.config):
        if needs.token_fields is not None:
            fields.update(needs.token_fields(trainer.tokenizer, responses, needs.knobs(trainer.config)))
    return fields, time.perf_counter() - start


def wants_token_fields(config: Any) -> bool:
    """True when a method in use computes per-token fields for the update."""
    return any(needs.token_fields is not None for needs in needs_in_use(config))


def check_advantage_call(trainer: Any, target: tuple[str, str]) -> None:
    """Stop the run before an actor update whose iteration's advantages did not go through verl-bot's step logic
    (`target`: the adapter's hand-over, verl's function and verl-bot's module, named in the line)."""
    if trainer.__dict__.get(ADVANTAGE_ATTR) != trainer.global_steps:
        raise inert(*target, f"{type(trainer).__name__} computed this iteration's advantages another way: failed "
                             "rollouts, the dense-row checks and the reward metrics would be skipped")


def update_metrics(config: Any, metrics: dict, rows: int, fields_s: float = 0.0) -> None:
    """In place, after the update: a verl-bot loss's metrics from `actor/<loss>/...` (verl prefixes every actor
    metric) to `<loss>/...` beside the estimator's, then each method's own (`ActorNeeds.metrics`). A verl-bot
    loss's update without `KNOBS_METRIC` stops the run."""
    name = loss_name(config)
    if name is not None:
        if metrics.pop(f"actor/{KNOBS_METRIC}", None) is None:
            import verl

            raise VerlBotConfigError(
                f"verl-bot: the actor update ran the {name} policy loss without its knobs: verl {verl.__version__}'s "
                "actor did not call its loss through verl's engine_workers.ppo_loss, which verl-bot wraps "
                "(verl_bot/hooks/ppo_loss.py); `python -m verl_bot.hooks.touch_points` lists the touch points"
            )
        prefix = f"actor/{name}/"
        for key in [k for k in metrics if k.startswith(prefix)]:
            metrics[key.removeprefix("actor/")] = metrics.pop(key)
    for needs in needs_in_use(config):
        if needs.metrics is not None:
            needs.metrics(config, metrics, rows, fields_s)
