"""Hook: `verl.workers.engine.fsdp.transformer_impl.FSDPEngineWithLMHead.forward_step` (a method's token weights).

The one place of verl's actor update that has both the model the update uses (`self.module`) and each micro-batch
with its packed model inputs. For a training micro-batch that carries the knobs of a method whose
`verl_bot.actor_needs.ActorNeeds` declares token `weights` (GRAIL's: `verl_bot.advantage.grail_update`), the method's
weights multiply the micro-batch's advantages inside verl's loss function (`_make_forward_step`). Text-only models;
no Ulysses sequence parallelism (each method's start-up check refuses what it cannot take). How GRAIL runs through
it: docs/ALGORITHMS.md, section GRAIL in a verl run.
"""

from __future__ import annotations

import functools
from contextlib import nullcontext
from typing import Any

import torch

from verl_bot.actor_needs import ActorNeeds, MicroBatch
from verl_bot.advantage import ESTIMATORS
from verl_bot.errors import VerlBotConfigError
from verl_bot.hooks.wrap import wrap
from verl_bot.losses import LOSSES

TEXT_INPUTS = {"input_ids", "attention_mask", "position_ids", "cu_seqlens", "cu_seqlens_cpu"}
WEIGHING = [spec.actor for spec in (*ESTIMATORS.values(), *LOSSES.values())
            if spec.actor is not None and spec.actor.weights is not None]


def _rows(column: torch.Tensor, lengths: torch.Tensor | None = None) -> list[torch.Tensor]:
    """(n_i,) rows of a micro-batch column: a nested tensor's rows, or a right-padded one's cut to `lengths`."""
    if column.is_nested:
        return list(column.unbind())
    return [row[: int(n)] for row, n in zip(column, lengths, strict=True)]


def _lengths(rows: list[torch.Tensor]) -> torch.Tensor:
    return torch.tensor([len(r) for r in rows], dtype=torch.long)


def response_lengths(micro_batch: Any) -> torch.Tensor:
    """(B,) each response's length: a nested `responses`' row sizes (v1), else each row's sequence length minus its
    prompt's (the legacy trainer's right-padded responses; `input_ids` is nested on both)."""
    responses = micro_batch["responses"]
    if responses.is_nested:
        return responses.offsets().diff().cpu()
    seq_lens = micro_batch["input_ids"].offsets().diff().cpu()
    prompts = micro_batch["prompts"]
    prompt_lens = (micro_batch["attention_mask"][:, : prompts.shape[1]].sum(-1).cpu() if "attention_mask" in
                   micro_batch.keys() else None)
    if prompt_lens is None:
        raise RuntimeError("a right-padded actor micro-batch without its attention mask")
    return seq_lens - prompt_lens


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


def micro_batch_view(engine: Any, data: Any, fields: tuple[str, ...]) -> MicroBatch:
    """The micro-batch `data` as a method's `ActorNeeds.weights` reads it (`verl_bot.actor_needs.MicroBatch`)."""
    from verl.utils import tensordict_utils as tu
    from verl.utils.device import get_device_name

    model_inputs, output_args = engine.prepare_model_inputs(micro_batch=data)
    extra = sorted(set(model_inputs) - TEXT_INPUTS)
    if extra:
        raise VerlBotConfigError(f"verl-bot's token weights support text-only models; the actor's inputs have {extra}")
    packed = bool(tu.get_non_tensor_data(data=data, key="use_remove_padding", default=True))
    resp_lens = response_lengths(data)
    columns = {name: _rows(data[name], resp_lens) for name in ("responses", "response_mask", "advantages", *fields)}
    if any(not torch.equal(resp_lens, _lengths(rows)) for rows in columns.values()):
        raise RuntimeError("verl-bot: the token fields, advantages and responses of a micro-batch differ in length")
    seq_lens = data["input_ids"].offsets().diff().cpu()
    rows, cols, _, _ = response_positions(seq_lens, resp_lens, packed)
    device = data["input_ids"].device
    rows, cols = rows.to(device), cols.to(device)
    temperature = output_args["temperature_rmpad"][cols] if packed else output_args["temperature"][rows]
    dtype = getattr(engine, "_autocast_dtype", torch.bfloat16)
    return MicroBatch(
        module=engine.module, model_inputs=model_inputs, rows=rows, cols=cols,
        labels=torch.cat(columns["responses"]).to(device, torch.long), temperature=temperature, lengths=resp_lens,
        masks=columns["response_mask"], advantages=columns["advantages"],
        fields={name: columns[name] for name in fields},
        autocast=lambda: nullcontext() if dtype == torch.float32 else torch.autocast(get_device_name(), dtype=dtype),
        synchronize=_sync_device,
    )


def weighted_advantages(advantages: torch.Tensor, row_weights: list[torch.Tensor]) -> torch.Tensor:
    """`advantages` (nested (B, n_i), or right-padded (B, T)) times each row's weights (n_i,), same layout."""
    if advantages.is_nested:
        return torch.nested.as_nested_tensor(
            [a * w.to(a.device, a.dtype) for a, w in zip(advantages.unbind(), row_weights, strict=True)],
            layout=torch.jagged,
        )
    weights = torch.ones_like(advantages)
    for i, w in enumerate(row_weights):
        weights[i, : len(w)] = w.to(advantages.device, advantages.dtype)
    return advantages * weights


def weighted_loss(loss_function, row_weights: list[torch.Tensor], stats: dict[str, float], prefix: str):
    """`loss_function` with the micro-batch's advantages multiplied by `row_weights`, plus `<prefix><name>`
    metrics (a time, `*_s`, summed over micro-batches; the rest averaged)."""
    from verl.utils.metric import AggregationType, Metric

    def loss(model_output, data, dp_group=None):
        data = data.copy()
        data["advantages"] = weighted_advantages(data["advantages"], row_weights)
        value, metrics = loss_function(model_output=model_output, data=data, dp_group=dp_group)
        for name, v in stats.items():
            kind = AggregationType.SUM if name.endswith("_s") else AggregationType.MEAN
            metrics[f"{prefix}{name}"] = Metric(value=v, aggregation=kind)
        return value, metrics

    return loss


def _sync_device() -> None:
    from verl.utils.device import get_torch_device

    sync = getattr(get_torch_device(), "synchronize", None)
    if sync is not None:
        sync()


def weighing(data: Any) -> tuple[ActorNeeds, dict] | None:
    """The method whose knobs the micro-batch `data` carries and whose needs declare token weights, with its knobs."""
    from verl.utils import tensordict_utils as tu

    for needs in WEIGHING:
        knobs = tu.get_non_tensor_data(data=data, key=needs.key, default=None)
        if knobs is not None:
            return needs, dict(knobs)
    return None


def _make_forward_step(original):
    """For a training micro-batch whose method declares token weights, before verl's own `forward_step`:

    1. `self.prepare_model_inputs(micro_batch)` (verl's own: packed or padded layout, temperatures), and the
       micro-batch as the method reads it (`micro_batch_view`: the coordinates of the positions predicting each
       response token, per-row responses, masks, advantages and the method's token fields, nested on v1 or
       right-padded on the legacy trainer);
    2. the method's weights, one (n_i,) tensor per response;
    3. verl's `forward_step` runs with its loss function wrapped (`weighted_loss`): the micro-batch's `advantages`
       times the weights (a shallow copy of the micro-batch, nothing else changes), and the method's diagnostics as
       loss metrics `<prefix><name>` (a time, `*_s`, summed over micro-batches; the rest averaged).

    Why here and not a wrapper of `verl.workers.utils.losses.ppo_loss`: verl's worker module binds `ppo_loss` by name
    at import and `init_model` binds that into a partial, so wrapping the losses module's function never reaches the
    loss verl calls. The loss function arriving here is whatever verl bound (`ppo_loss`, `distillation_ppo_loss`, or
    one set with `set_loss_fn`), so the wrapper always reaches it.
    """

    @functools.wraps(original)
    def forward_step(self, micro_batch, loss_function, forward_only):
        from verl.utils.device import get_device_id

        found = None if forward_only or loss_function is None else weighing(micro_batch)
        if found is None:
            return original(self, micro_batch, loss_function=loss_function, forward_only=forward_only)
        needs, knobs = found
        if getattr(self, "use_ulysses_sp", False):
            raise VerlBotConfigError("verl-bot's token weights do not support Ulysses sequence parallelism")
        data = micro_batch.to(get_device_id())
        row_weights, stats = needs.weights(micro_batch_view(self, data, needs.fields), knobs)
        wrapped = weighted_loss(loss_function, row_weights, stats, needs.metric_prefix)
        return original(self, data, loss_function=wrapped, forward_only=forward_only)

    return forward_step


def install() -> list[str]:
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    params = ["self", "micro_batch", "loss_function", "forward_only"]
    return [wrap(FSDPEngineWithLMHead, "forward_step", params, _make_forward_step)]
