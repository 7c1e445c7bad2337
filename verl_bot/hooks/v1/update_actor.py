"""Hook: `verl.trainer.ppo.v1.trainer_base.PPOTrainer._update_actor` (what the methods in use need from the update).

A run that does not use verl-bot (`verl_bot.launch.activation`) gets verl's method as it is. For one that does
(`verl_bot.training.actor_update`): an iteration whose advantages did not go through verl-bot's step logic stops
the run; the methods' knobs go into the update's `extra_info` (verl sends it to the actor workers with the update
and every micro-batch carries it, as it carries `temperature`); their per-token fields, computed from the responses
read from TransferQueue, are written back to TransferQueue as nested fields and named in the batch meta (the worker
fetches the fields the meta names). verl's method runs on that copy of the batch meta (the caller keeps its own);
after it, the iteration's metrics are named (`update_metrics`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch

from verl_bot.hooks.v1.batch import rows_of
from verl_bot.hooks.v1.compute_advantage import HOOKS
from verl_bot.hooks.wrap import wrap
from verl_bot.launch.activation import in_use
from verl_bot.training.actor_update import (
    check_advantage_call,
    token_fields,
    update_knobs,
    update_metrics,
    wants_token_fields,
)


def update_batch(trainer: Any, batch: Any) -> tuple[Any, float]:
    """The batch meta for verl's update (knobs in `extra_info`, the methods' token fields in TransferQueue and named)
    and the seconds the fields took."""
    extra_info = {**(batch.extra_info or {}), **update_knobs(trainer.config)}
    if not wants_token_fields(trainer.config):
        return dataclasses.replace(batch, extra_info=extra_info), 0.0
    import transfer_queue as tq
    from tensordict import TensorDict

    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["responses"])
    responses = [row.tolist() for row in rows_of(data["responses"])]
    fields, seconds = token_fields(trainer, responses)
    nested = {name: torch.nested.as_nested_tensor([torch.from_numpy(v) for v in values], layout=torch.jagged)
              for name, values in fields.items()}
    tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id,
                    fields=TensorDict(nested, batch_size=len(responses)))
    # the worker fetches the fields the batch meta names (all of them when it names none)
    names = None if batch.fields is None else [*dict.fromkeys([*batch.fields, *fields])]
    return dataclasses.replace(batch, fields=names, extra_info=extra_info), seconds


def _make_update_actor(original):
    @functools.wraps(original)
    def _update_actor(self, batch, metrics, *args, **kwargs):
        if not in_use(self.config):
            return original(self, batch, metrics, *args, **kwargs)
        check_advantage_call(self, HOOKS.advantage)
        updated, fields_s = update_batch(self, batch)
        result = original(self, updated, metrics, *args, **kwargs)
        if result is updated:  # verl returns the batch it got: hand back the caller's
            result = batch
        update_metrics(self.config, metrics, rows=len(batch.keys), fields_s=fields_s)
        return result

    return _update_actor


def install() -> list[str]:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return [wrap(PPOTrainer, "_update_actor", ["self", "batch", "metrics"], _make_update_actor)]
