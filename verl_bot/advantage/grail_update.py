"""GRAIL's part of the actor update (`NEEDS`, on its `ESTIMATORS` row): what the trainer ships, what the actor
computes, what the iteration logs.

1. trainer: each response's answer span as per-token codes (`response_span_codes`), shipped as the update's field
   `SPAN_FIELD` with the knobs under `SETTINGS_KEY`;
2. actor, per micro-batch (`micro_batch_weights`): the answer's saliency (`grail.answer_saliency`) under the
   engine's precision, then the weights (`grail.grail_weights`) that multiply the advantages;
3. after the update (`step_metrics`): the worker's metrics under their `grail/` names.

How it runs in verl: docs/ALGORITHMS.md, section GRAIL in a verl run.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from verl_bot.actor_needs import ActorNeeds, MicroBatch
from verl_bot.advantage.grail import (
    SETTINGS_KEY,
    SPAN_CONTENT,
    SPAN_FIELD,
    SPAN_MARKER,
    GrailSettings,
    answer_saliency,
    answer_span,
    grail_weights,
    reweighted_rows,
    span_codes,
    weight_stats,
)
from verl_bot.credit.spans import token_char_spans

# worker metric (after verl's `actor/` prefix) -> iteration metric
STEP_METRICS = {
    "actor/grail/w_mean": "grail/w_mean",
    "actor/grail/w_cap_share": "grail/w_max_share",
    "actor/grail/answer_rate": "grail/answer_rate",
    "actor/grail/reweighted_rate": "grail/reweighted_rate",
    "actor/grail/saliency_s": "grail/saliency_s",
}


def response_span_codes(tokenizer: Any, responses: list[list[int]], answer: str) -> list[np.ndarray]:
    """(n_i,) int8 span codes of each response's token ids (`verl_bot.advantage.grail.span_codes`).

    The text is the tokenizer's decoding (special tokens skipped), as the reward reads it; only a response with an
    answer span goes through the token-by-token mapping, the exact char<->token mapping of
    `verl_bot.credit.spans.token_char_spans` (no re-encoding).
    """
    codes = []
    for ids in responses:
        span = answer_span(tokenizer.decode(ids, skip_special_tokens=True), answer)
        if span is None:
            codes.append(np.zeros(len(ids), dtype=np.int8))
            continue
        text, char_spans = token_char_spans(tokenizer, ids)
        codes.append(span_codes(char_spans, answer_span(text, answer)))
    return codes


def token_fields(tokenizer: Any, responses: list[list[int]], knobs: dict) -> dict[str, list[np.ndarray]]:
    """{`SPAN_FIELD`: the span codes of each response} (part 1)."""
    return {SPAN_FIELD: response_span_codes(tokenizer, responses, GrailSettings(**knobs).answer)}


def _pad(values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(B, max n_i) right-padded rows of `values` (N,), the concatenation of B rows of `lengths` (B,)."""
    rows = list(values.split(lengths.tolist()))
    return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True) if rows else values.new_zeros((0, 0))


def micro_batch_weights(mb: MicroBatch, knobs: dict) -> tuple[list[torch.Tensor], dict[str, float]]:
    """GRAIL's weights of one micro-batch (part 2): one (n_i,) float32 tensor per response, and its diagnostics
    (`grail.weight_stats`, plus `saliency_s`, the time of the saliency)."""
    settings = GrailSettings(**knobs)
    device = mb.labels.device
    span = torch.cat(mb.fields[SPAN_FIELD]).to(device, torch.long)
    answer = (span == SPAN_MARKER) | (span == SPAN_CONTENT)
    if settings.sync_timing:  # only when asked: a synchronization stops the host from running ahead
        mb.synchronize()
    start = time.perf_counter()
    with mb.autocast():
        scores = answer_saliency(mb.module, mb.model_inputs, mb.rows, mb.cols, mb.labels, answer, mb.temperature,
                                 leaf_source=settings.leaf_source)
    if settings.sync_timing:
        mb.synchronize()
    elapsed = time.perf_counter() - start
    lengths = mb.lengths.to(device)
    mask = _pad(torch.cat(mb.masks).to(device, torch.float32), lengths)
    adv = _pad(torch.cat(mb.advantages).to(device, torch.float32), lengths)
    reweight = reweighted_rows((adv * mask).sum(-1) / mask.sum(-1).clamp(min=1.0), settings.rollout_symmetry)
    span_pad = _pad(span, lengths)
    weights = grail_weights(_pad(scores, lengths), span_pad, mask, reweight, std=settings.std, mean=settings.mean,
                            w_min=settings.w_min, w_max=settings.w_max)
    stats = {**weight_stats(weights, span_pad, mask, reweight, settings.w_max), "saliency_s": elapsed}
    return [weights[i, : int(n)] for i, n in enumerate(lengths)], stats


def mini_batches_per_step(config: Any, rows: int) -> int:
    """How many actor mini-batches verl's update runs for a batch of `rows` rollouts (all epochs)."""
    actor = config.actor_rollout_ref.actor
    per_mini = int(actor.ppo_mini_batch_size) * int(config.actor_rollout_ref.rollout.n)
    return max(rows // per_mini, 1) * int(actor.ppo_epochs)


def step_metrics(config: Any, metrics: dict, rows: int, fields_s: float) -> None:
    """The worker's GRAIL metrics under their iteration names, the saliency time per iteration, the span time
    (part 3), in place.

    verl prefixes the worker's metrics `actor/` and averages them over the update's mini-batches (a key containing
    "max" would be maxed instead, so the worker reports the share of tokens at w_max as `w_cap_share`, logged as
    `grail/w_max_share`). The saliency time, summed over each mini-batch's micro-batches, is therefore multiplied
    by the number of mini-batches (`grail/saliency_s` is per iteration); `grail/span_s` is the time of part 1.
    """
    for worker_key, step_key in STEP_METRICS.items():
        if worker_key in metrics:
            metrics[step_key] = float(metrics.pop(worker_key))
    if "grail/saliency_s" in metrics:
        metrics["grail/saliency_s"] *= mini_batches_per_step(config, rows)
    metrics["grail/span_s"] = fields_s


NEEDS = ActorNeeds(
    key=SETTINGS_KEY,
    knobs=lambda config: GrailSettings.from_config(config.algorithm).as_dict(),
    token_fields=token_fields,
    fields=(SPAN_FIELD,),
    weights=micro_batch_weights,
    metrics=step_metrics,
    metric_prefix="grail/",
)
