"""What a verl-bot method needs from the actor update of a training iteration: `ActorNeeds`, on its table row.

An estimator (`verl_bot.advantage.ESTIMATORS`) or a policy loss (`verl_bot.losses.LOSSES`) that needs more than
verl's update gives it declares it here, once: its knobs shipped with the update (a non-tensor entry every actor
micro-batch carries), per-token fields computed from the responses (shipped as the update's fields), token weights
that multiply the advantages of each micro-batch (computed in the actor, which holds the model), and how the
worker's metrics become the iteration's. The trainer adapters and the worker hook carry them for any method
(`verl_bot.training.actor_update`, `verl_bot.hooks.engine_forward_step`) without naming one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True)
class MicroBatch:
    """One actor micro-batch as a method's `ActorNeeds.weights` reads it (built by the worker hook).

    Attributes:
        module: the model being updated. model_inputs: verl's prepared keyword inputs of its forward, (R, S)
            layout (R = 1 for packed sequences).
        rows, cols: (N,) int64 model-input coordinates of the positions predicting each response token, in
            response-token order (N = the micro-batch's response tokens).
        labels: (N,) int64 the response tokens. temperature: (N,) float each position's sampling temperature.
        lengths: (B,) each response's length n_i. masks, advantages: (B,) lists of (n_i,) tensors.
        fields: the method's token fields, name -> (B,) list of (n_i,) tensors.
        autocast: a context manager of the engine's compute precision. synchronize: waits for the device.
    """

    module: torch.nn.Module
    model_inputs: Mapping[str, Any]
    rows: torch.Tensor
    cols: torch.Tensor
    labels: torch.Tensor
    temperature: torch.Tensor
    lengths: torch.Tensor
    masks: list[torch.Tensor]
    advantages: list[torch.Tensor]
    fields: Mapping[str, list[torch.Tensor]]
    autocast: Callable[[], AbstractContextManager]
    synchronize: Callable[[], None]


# (tokenizer, the responses' token ids, the method's knobs) -> field name -> one (n_i,) array per response
TokenFields = Callable[[Any, list[list[int]], dict], dict[str, list[np.ndarray]]]
# (micro-batch, knobs) -> one (n_i,) weight tensor per response, and the micro-batch's diagnostics
Weights = Callable[[MicroBatch, dict], tuple[list[torch.Tensor], dict[str, float]]]
# (verl's config, the iteration's metrics (in place), the update's rows, seconds spent on the token fields)
StepMetrics = Callable[[Any, dict, int, float], None]


@dataclass(frozen=True)
class ActorNeeds:
    """What a method needs from the actor update.

    Attributes:
        key: the non-tensor entry its knobs ride under (the update's `extra_info` on v1, `meta_info` on legacy);
            "" with no knobs to ship.
        knobs: (verl's config) -> the knobs every micro-batch carries (plain values), or None.
        token_fields: computes the per-token fields the actor reads (`TokenFields`), or None.
        fields: the names of those fields.
        weights: token weights multiplying each micro-batch's advantages (`Weights`), or None.
        metrics: names the worker's metrics after the update (`StepMetrics`), or None.
        metric_prefix: the prefix of the metrics its worker side reports (verl prefixes them `actor/`).
    """

    key: str = ""
    knobs: Callable[[Any], dict[str, Any]] | None = None
    token_fields: TokenFields | None = None
    fields: tuple[str, ...] = ()
    weights: Weights | None = None
    metrics: StepMetrics | None = None
    metric_prefix: str = ""
