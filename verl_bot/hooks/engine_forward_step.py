"""Hook: `verl.workers.engine.fsdp.transformer_impl.FSDPEngineWithLMHead.forward_step` (GRAIL's token weights).

The one place of verl's actor update that has both the model the update uses
(`self.module`) and each micro-batch with its packed model inputs. For a
training micro-batch that carries GRAIL's knobs (`verl_bot_grail`, put in
`batch.extra_info` by `verl_bot.hooks.v1.update_actor`) and span codes, before
verl's own `forward_step`:

1. `self.prepare_model_inputs(micro_batch)` (verl's own: packed or padded
   layout, temperatures);
2. the saliency of every response token, `verl_bot.advantage.grail.answer_saliency`,
   under the engine's autocast: one forward and one backward to the detached
   embedding leaf (`torch.autograd.grad`: parameter gradients untouched; the
   attribution graph is freed before verl's forward);
3. the weights, `verl_bot.advantage.grail.grail_weights`, per sequence;
4. verl's `forward_step` runs with its loss function wrapped: the wrapper
   multiplies the micro-batch's `advantages` by the weights (a shallow copy of
   the micro-batch, nothing else changes) and adds `grail/...` metrics.

Why here and not a wrapper of `verl.workers.utils.losses.ppo_loss`: verl's
worker module binds `ppo_loss` by name at import (`from ... import ppo_loss`,
imported before any plugin runs) and `init_model` binds that into a partial,
so wrapping the losses module's function never reaches the loss verl calls.
The loss function arriving here is whatever verl bound (`ppo_loss`,
`distillation_ppo_loss`, or one set with `set_loss_fn`), so the wrapper always
reaches it.

Supported (start-up checks in `verl_bot.launch.preflight` refuse the rest): the FSDP2
engine, no Ulysses sequence parallelism, no fused kernels, no distillation,
text-only models.
"""

from __future__ import annotations

import functools
import time
from contextlib import nullcontext
from typing import Any

import torch

from verl_bot.advantage.grail import (
    SETTINGS_KEY,
    SPAN_CONTENT,
    SPAN_FIELD,
    SPAN_MARKER,
    GrailSettings,
    answer_saliency,
    grail_weights,
    reweighted_rows,
    weight_stats,
)
from verl_bot.errors import VerlBotConfigError
from verl_bot.hooks.wrap import wrap

TEXT_INPUTS = {"input_ids", "attention_mask", "position_ids", "cu_seqlens", "cu_seqlens_cpu"}


def _rows(nested: torch.Tensor) -> list[torch.Tensor]:
    return list(nested.unbind())


def _lengths(rows: list[torch.Tensor]) -> torch.Tensor:
    return torch.tensor([len(r) for r in rows], dtype=torch.long)


def response_positions(seq_lens: torch.Tensor, resp_lens: torch.Tensor, packed: bool):
    """Model-input coordinates of the positions that predict each response token.

    Args:
        seq_lens: (B,) prompt + response length of each sequence. resp_lens: (B,) response lengths.
        packed: True for verl's packed layout (one row, sequences back to back), False for right-padded rows.

    Returns:
        rows, cols: (N,) with N = sum(resp_lens), in response-token order; row_of, col_of: (N,) the token's
        sequence and its index in the response (for padding to (B, max resp_len)).
    """
    b = len(seq_lens)
    row_of = torch.repeat_interleave(torch.arange(b), resp_lens)
    first = torch.cumsum(resp_lens, 0) - resp_lens
    col_of = torch.arange(int(resp_lens.sum())) - torch.repeat_interleave(first, resp_lens)
    in_seq = (seq_lens - resp_lens)[row_of] - 1 + col_of
    if packed:
        seq_start = torch.cumsum(seq_lens, 0) - seq_lens
        return torch.zeros_like(row_of), seq_start[row_of] + in_seq, row_of, col_of
    return row_of, in_seq, row_of, col_of


def _pad(values: torch.Tensor, row_of: torch.Tensor, col_of: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    out = values.new_zeros(shape)
    out[row_of, col_of] = values
    return out


def micro_batch_weights(engine: Any, micro_batch: Any, settings: GrailSettings) -> tuple[list[torch.Tensor], dict]:
    """GRAIL weights of one micro-batch: one (n_i,) float32 tensor per response, and its diagnostics."""
    from verl.utils import tensordict_utils as tu
    from verl.utils.device import get_device_name

    model_inputs, output_args = engine.prepare_model_inputs(micro_batch=micro_batch)
    extra = sorted(set(model_inputs) - TEXT_INPUTS)
    if extra:
        raise VerlBotConfigError(f"adv_estimator=grail supports text-only models; the actor's inputs have {extra}")
    packed = bool(tu.get_non_tensor_data(data=micro_batch, key="use_remove_padding", default=True))
    responses = _rows(micro_batch["responses"])
    codes = _rows(micro_batch[SPAN_FIELD])
    masks = _rows(micro_batch["response_mask"])
    advantages = _rows(micro_batch["advantages"])
    resp_lens = _lengths(responses)
    seq_lens = micro_batch["input_ids"].offsets().diff().cpu()
    if not (torch.equal(resp_lens, _lengths(codes)) and torch.equal(resp_lens, _lengths(advantages))):
        raise RuntimeError("GRAIL: span codes, advantages and responses of a micro-batch differ in length")
    rows, cols, row_of, col_of = response_positions(seq_lens, resp_lens, packed)
    device = micro_batch["input_ids"].device
    span = torch.cat(codes).to(device, torch.long)
    labels = torch.cat(responses).to(device, torch.long)
    answer = (span == SPAN_MARKER) | (span == SPAN_CONTENT)
    if packed:
        temperature = output_args["temperature_rmpad"][cols.to(device)]
    else:
        temperature = output_args["temperature"][rows.to(device)]
    dtype = getattr(engine, "_autocast_dtype", torch.bfloat16)
    autocast = nullcontext() if dtype == torch.float32 else torch.autocast(device_type=get_device_name(), dtype=dtype)
    with autocast:
        scores = answer_saliency(
            engine.module, model_inputs, rows.to(device), cols.to(device), labels, answer, temperature,
            leaf_source=settings.leaf_source,
        )
    shape = (len(resp_lens), int(resp_lens.max()) if len(resp_lens) else 0)
    row_of, col_of = row_of.to(device), col_of.to(device)
    mask = _pad(torch.cat(masks).to(device, torch.float32), row_of, col_of, shape)
    adv = _pad(torch.cat(advantages).to(device, torch.float32), row_of, col_of, shape)
    row_adv = (adv * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    reweight = reweighted_rows(row_adv, settings.rollout_symmetry)
    span_pad = _pad(span, row_of, col_of, shape)
    weights = grail_weights(
        _pad(scores, row_of, col_of, shape), span_pad, mask, reweight,
        std=settings.std, mean=settings.mean, w_min=settings.w_min, w_max=settings.w_max,
    )
    stats = weight_stats(weights, span_pad, mask, reweight, settings.w_max)
    return [weights[i, : int(n)] for i, n in enumerate(resp_lens)], stats


def weighted_loss(loss_function, row_weights: list[torch.Tensor], stats: dict[str, float]):
    """`loss_function` with the micro-batch's advantages multiplied by `row_weights`, plus `grail/` metrics."""
    from verl.utils.metric import AggregationType, Metric

    def loss(model_output, data, dp_group=None):
        data = data.copy()
        rows = _rows(data["advantages"])
        data["advantages"] = torch.nested.as_nested_tensor(
            [a * w.to(a.device, a.dtype) for a, w in zip(rows, row_weights, strict=True)], layout=torch.jagged
        )
        value, metrics = loss_function(model_output=model_output, data=data, dp_group=dp_group)
        for name, v in stats.items():
            kind = AggregationType.SUM if name == "saliency_s" else AggregationType.MEAN
            metrics[f"grail/{name}"] = Metric(value=v, aggregation=kind)
        return value, metrics

    return loss


def _sync_device() -> None:
    from verl.utils.device import get_torch_device

    sync = getattr(get_torch_device(), "synchronize", None)
    if sync is not None:
        sync()


def _make_forward_step(original):
    @functools.wraps(original)
    def forward_step(self, micro_batch, loss_function, forward_only):
        from verl.utils import tensordict_utils as tu
        from verl.utils.device import get_device_id

        raw = tu.get_non_tensor_data(data=micro_batch, key=SETTINGS_KEY, default=None)
        if forward_only or loss_function is None or raw is None:
            return original(self, micro_batch, loss_function=loss_function, forward_only=forward_only)
        if SPAN_FIELD not in micro_batch.keys():
            raise RuntimeError(f"GRAIL: the actor micro-batch has no {SPAN_FIELD} (written by hooks/update_actor.py)")
        if getattr(self, "use_ulysses_sp", False):
            raise VerlBotConfigError("adv_estimator=grail does not support Ulysses sequence parallelism")
        micro_batch = micro_batch.to(get_device_id())
        settings = GrailSettings(**raw)
        if settings.sync_timing:  # only when asked: a synchronization stops the host from running ahead
            _sync_device()
        start = time.perf_counter()
        row_weights, stats = micro_batch_weights(self, micro_batch, settings)
        if settings.sync_timing:
            _sync_device()
        stats["saliency_s"] = time.perf_counter() - start
        return original(
            self, micro_batch, loss_function=weighted_loss(loss_function, row_weights, stats), forward_only=forward_only
        )

    return forward_step


def install() -> list[str]:
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    params = ["self", "micro_batch", "loss_function", "forward_only"]
    return [wrap(FSDPEngineWithLMHead, "forward_step", params, _make_forward_step)]
