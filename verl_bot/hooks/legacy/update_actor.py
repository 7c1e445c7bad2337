"""Hook: `verl.trainer.ppo.ray_trainer.RayPPOTrainer._update_actor` (what the methods in use need from the update).

A run that does not use verl-bot (`verl_bot.launch.activation`) gets verl's method as it is. For one that does
(`verl_bot.training.actor_update`): an iteration whose advantages did not go through verl-bot's step logic stops
the run; the methods' knobs go into the batch's `meta_info`, which verl turns into the update's non-tensor data
(`DataProto.to_tensordict`) and every actor micro-batch carries; their per-token fields, computed from the
responses, become right-padded (B, T) fields of the batch for the update (assigned, and taken out after it). After
the update, the iteration's metrics are reduced as verl reduces them and named (`update_metrics`).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from verl.utils.metric import reduce_metrics

from verl_bot.hooks.legacy.batch import ProtoBatch
from verl_bot.hooks.legacy.trainer import HOOKS
from verl_bot.hooks.wrap import wrap
from verl_bot.launch.activation import in_use
from verl_bot.training.actor_update import (
    check_advantage_call,
    token_fields,
    update_knobs,
    update_metrics,
    wants_token_fields,
)


def padded_fields(batch: Any, fields: dict[str, list]) -> dict[str, torch.Tensor]:
    """Each field's (n_i,) rows as a (B, T) tensor right-padded with 0 to the batch's response width."""
    width = batch.batch["responses"].shape[1]
    out = {}
    for name, rows in fields.items():
        tensor = torch.zeros((len(rows), width), dtype=torch.from_numpy(rows[0]).dtype if rows else torch.float32)
        for i, row in enumerate(rows):
            tensor[i, : len(row)] = torch.from_numpy(row)
        out[name] = tensor
    return out


def _make_update_actor(original):
    @functools.wraps(original)
    def _update_actor(self, batch, *args, **kwargs):
        if not in_use(self.config):
            return original(self, batch, *args, **kwargs)
        check_advantage_call(self, HOOKS.advantage)
        knobs = update_knobs(self.config)
        fields, fields_s = {}, 0.0
        if wants_token_fields(self.config):
            responses = [row.tolist() for row in ProtoBatch(batch).ragged(["responses"])["responses"]]
            found, fields_s = token_fields(self, responses)
            fields = padded_fields(batch, found)
        batch.meta_info.update(knobs)
        for name, tensor in fields.items():
            batch.batch[name] = tensor
        try:
            output = original(self, batch, *args, **kwargs)
        finally:
            for key in knobs:
                batch.meta_info.pop(key, None)
            for name in fields:
                batch.pop(batch_keys=[name])
        # the worker's metrics, one list each (verl reduces them after this method): reduced as verl reduces them,
        # then named, the same scalars the v1 update's metrics are
        metrics = reduce_metrics(output.meta_info["metrics"])
        update_metrics(self.config, metrics, rows=len(batch), fields_s=fields_s)
        output.meta_info["metrics"] = metrics
        return output

    return _update_actor


def install() -> list[str]:
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    return [wrap(RayPPOTrainer, "_update_actor", ["self", "batch"], _make_update_actor)]
