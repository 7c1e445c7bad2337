"""GRAIL: Gradient-Reweighted Advantage (arXiv 2606.04889), as in its authors' code (github.com/declare-lab/grail).

The pure parts: the answer span in the text and its per-token codes (`answer_span`, `span_codes`, `SPAN_*`), the
saliency of a causal LM (`answer_saliency`: plain torch, any `transformers` CausalLM, FSDP2-sharded or not), the
weights (`grail_weights`: w_t = clip(w_mean + sigma_w * z_t, w_min, w_max), z_t the log-saliency's z-score per
sequence [code]), the knobs (`GrailSettings`, `+algorithm.grail_*`) and the setups refused at start-up
(`startup_problem`). The estimator `algorithm.adv_estimator=grail` is verl's GRPO; the weights multiply the
advantages inside verl's actor update (`verl_bot.advantage.grail_update`, `verl_bot.hooks.engine_forward_step`).
The formulas, what is the authors' and what ours, knobs, metrics and cost: docs/ALGORITHMS.md, section GRAIL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from verl_bot.errors import VerlBotConfigError
from verl_bot.knobs import MethodSettings, knob
from verl_bot_contract.think import split_think

# per-token span codes (response-aligned)
SPAN_OTHER, SPAN_MARKER, SPAN_CONTENT, SPAN_AFTER = 0, 1, 2, 3
# how the codes and the knobs travel from the trainer to the actor's micro-batches (TransferQueue field,
# `batch.extra_info` key)
SPAN_FIELD = "verl_bot_grail_span"
SETTINGS_KEY = "verl_bot_grail"

BOXED_MARKER = "\\boxed{"
_FINAL_BLOCK = re.compile(r"<\s*final\s*>((?:(?!<\s*/?\s*final\s*>).)*)<\s*/\s*final\s*>", re.I | re.S)

ANSWERS = ("auto", "final", "boxed")
SYMMETRIES = ("wrong", "correct", "all")
LEAVES = ("embeddings", "first", "middle", "last")
LOG_EPS = 1e-8  # the authors' log(s + 1e-8) and sqrt(var + 1e-8)


@dataclass(frozen=True)
class GrailSettings(MethodSettings, prefix="grail_", label="GRAIL"):
    """GRAIL's knobs (`+algorithm.grail_<name>=...`); defaults are the authors' yaml (qwen3_grail.yaml).

    answer is ours: `auto` = the first `<final>...</final>` block if the response has one, else the first
    complete `\\boxed{...}` (the authors' rule); `final` or `boxed` = only that form. sync_timing is ours:
    `grail/saliency_s` is the host's time of the saliency, which on an accelerator leaves out the kernels
    still running when it returns; true synchronizes the device before and after it for the device time
    (two synchronizations per micro-batch, which remove the overlap of host and device work).
    """

    std: float = knob(0.5, bounds="(0, inf)", source="code", doc="sigma_w, the spread of the weights")
    mean: float = knob(1.0, source="code", doc="w_mean, the weight of an average token")
    w_min: float = knob(0.5, bounds="[0, inf)", source="code", doc="lower clip of the weights")
    w_max: float = knob(5.0, bounds="[0, inf)", source="code", doc="upper clip; the answer's content gets it")
    rollout_symmetry: str = knob(SYMMETRIES[0], choices=SYMMETRIES, source="code", doc="which rollouts: by A")
    leaf_source: str = knob(LEAVES[0], choices=LEAVES, source="code", doc="the attribution leaf")
    answer: str = knob(ANSWERS[0], choices=ANSWERS, source="ours", doc="the answer span's form")
    sync_timing: bool = knob(False, source="ours", doc="synchronize the device around the saliency")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.w_min <= self.w_max:
            raise VerlBotConfigError(
                f"algorithm.grail_w_min={self.w_min}, grail_w_max={self.w_max}: need 0 <= w_min <= w_max"
            )


def startup_problem(config: Any, train_files: list[str]) -> str | None:
    """Why `adv_estimator=grail` cannot run with verl's composed `config` (one line), or None: an actor strategy
    other than `fsdp2`, Ulysses sequence parallelism, fused kernels or distillation. `train_files` is not needed.
    """
    actor = config.actor_rollout_ref.actor
    strategy = str(actor.get("strategy", "fsdp"))
    if strategy == "fsdp":
        return (
            "adv_estimator=grail with actor_rollout_ref.actor.strategy=fsdp (FSDP1): GRAIL's extra backward is "
            "tested on FSDP2 only; set actor_rollout_ref.actor.strategy=fsdp2"
        )
    if strategy != "fsdp2":
        return (
            f"adv_estimator=grail with actor_rollout_ref.actor.strategy={strategy}: GRAIL's weights are computed in "
            "verl's FSDP engine only; set actor_rollout_ref.actor.strategy=fsdp2"
        )
    sp = max(int(actor.get("ulysses_sequence_parallel_size", 1) or 1),
             int((actor.get("fsdp_config") or {}).get("ulysses_sequence_parallel_size", 1) or 1))
    if sp > 1:
        return (
            f"adv_estimator=grail with Ulysses sequence parallelism (ulysses_sequence_parallel_size={sp}): the "
            "saliency needs whole sequences on one rank; set actor_rollout_ref.actor.ulysses_sequence_parallel_size=1"
        )
    if (config.actor_rollout_ref.get("model") or {}).get("use_fused_kernels", False):
        return (
            "adv_estimator=grail with actor_rollout_ref.model.use_fused_kernels=true: the saliency needs the "
            "answer's logits, which fused kernels never build; set use_fused_kernels=false"
        )
    if (config.get("distillation") or {}).get("enabled", False):
        return "adv_estimator=grail with distillation.enabled=true is not supported; disable distillation"
    return None


class AnswerSpan(NamedTuple):
    """Character offsets of an answer in a response: marker [start, content_start), content
    [content_start, content_end), closing [content_end, end); everything from `end` on is after it."""

    start: int
    content_start: int
    content_end: int
    end: int


def first_boxed_span(text: str) -> AnswerSpan | None:
    """The first complete `\\boxed{...}` of `text` (brace depth counted; an unbalanced one is skipped), as the
    authors' `_find_boxed_char_span`; None if there is none."""
    i = 0
    while True:
        start = text.find(BOXED_MARKER, i)
        if start == -1:
            return None
        j, depth = start + len(BOXED_MARKER), 1
        while j < len(text) and depth > 0:
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
            j += 1
        if depth == 0:
            return AnswerSpan(start, start + len(BOXED_MARKER), j - 1, j)
        i = start + len(BOXED_MARKER)


def first_final_span(text: str) -> AnswerSpan | None:
    """The first complete `<final>...</final>` block of `text` with no other final tag inside (tags as the math
    reward reads them: case-insensitive, spaces allowed); None if there is none."""
    m = _FINAL_BLOCK.search(text)
    return None if m is None else AnswerSpan(m.start(), m.start(1), m.end(1), m.end())


def answer_span(text: str, answer: str = "auto") -> AnswerSpan | None:
    """The answer span of a response text: `final`, `boxed`, or `auto` (a `<final>` block, else `\\boxed{}`),
    looked for after a reasoning model's think block (`verl_bot_contract.think.split_think`, as the reward
    servers read it): a draft inside the block is not the answer, and a response cut off inside it has none."""
    start = split_think(text).end
    answer_text = text[start:]
    if answer == "boxed":
        span = first_boxed_span(answer_text)
    else:
        span = first_final_span(answer_text)
        if span is None and answer != "final":
            span = first_boxed_span(answer_text)
    return None if span is None else AnswerSpan(*(offset + start for offset in span))


def span_codes(char_spans: np.ndarray, span: AnswerSpan | None) -> np.ndarray:
    """Per-token span codes from each token's `[start, end)` character span.

    Args:
        char_spans: (n, 2) int character span of each token (`verl_bot.credit.spans.token_char_spans`).
        span: the answer's character span, or None.

    Returns:
        (n,) int8: `SPAN_CONTENT` for a token overlapping the content; else `SPAN_MARKER` for one overlapping
        the marker or the closing tag/brace; else `SPAN_AFTER` for one starting at or after the span's end
        (tokens that cover no character, e.g. EOS, count by where they sit); else `SPAN_OTHER`. All
        `SPAN_OTHER` without a span.
    """
    n = len(char_spans)
    codes = np.zeros(n, dtype=np.int8)
    if span is None or n == 0:
        return codes
    s, e = char_spans[:, 0], char_spans[:, 1]

    def overlaps(a: int, b: int) -> np.ndarray:
        return (s < b) & (e > a) & (e > s)

    codes[s >= span.end] = SPAN_AFTER
    codes[overlaps(span.start, span.end)] = SPAN_MARKER
    codes[overlaps(span.content_start, span.content_end)] = SPAN_CONTENT
    return codes


def reweighted_rows(row_advantage: torch.Tensor, symmetry: str) -> torch.Tensor:
    """(B,) bool: the rollouts GRAIL reweights. `wrong`: A <= 0; `correct`: A > 0; `all`: every one.

    row_advantage: (B,) each rollout's advantage (GRPO's A_i).
    """
    if symmetry == "wrong":
        return row_advantage <= 0
    if symmetry == "correct":
        return row_advantage > 0
    return torch.ones_like(row_advantage, dtype=torch.bool)


@torch.no_grad()
def grail_weights(
    scores: torch.Tensor,
    span: torch.Tensor,
    mask: torch.Tensor,
    reweight: torch.Tensor,
    std: float = 0.5,
    mean: float = 1.0,
    w_min: float = 0.5,
    w_max: float = 5.0,
) -> torch.Tensor:
    """GRAIL's per-token weights from saliency scores (phase 2 of the authors' `compute_grail_weights`).

    Args:
        scores: (B, T) saliency s_t >= 0 of each response token (any value on padding).
        span: (B, T) int span codes (`SPAN_*`), 0 on padding.
        mask: (B, T) 1 on valid response tokens, 0 on padding.
        reweight: (B,) bool, False for rollouts kept at weight 1 by the symmetry setting.
        std, mean, w_min, w_max: sigma_w, w_mean and the clip range.

    Returns:
        (B, T) float32 weights: clip(mean + std * z(log s), w_min, w_max) within each sequence; 1 on rows
        without an answer or not reweighted; w_max on answer content, mean on its marker/closing and on
        valid tokens after it (in every row, as the authors' code does); 0 on padding.
    """
    valid = mask.bool()
    m = valid.float()
    log_s = torch.log(scores.float() + LOG_EPS)
    count = m.sum(dim=-1, keepdim=True).clamp(min=1.0)
    mu = (log_s * m).sum(dim=-1, keepdim=True) / count
    sd = torch.sqrt((((log_s - mu) ** 2) * m).sum(dim=-1, keepdim=True) / count + LOG_EPS)
    weights = (mean + std * (log_s - mu) / sd).clamp(w_min, w_max)
    has_answer = ((span == SPAN_MARKER) | (span == SPAN_CONTENT)).any(dim=-1)
    keep_one = ~(has_answer & reweight.bool())
    weights = torch.where(keep_one[:, None], torch.ones_like(weights), weights)
    weights = torch.where(span == SPAN_CONTENT, torch.full_like(weights, w_max), weights)
    weights = torch.where((span == SPAN_MARKER) | (span == SPAN_AFTER), torch.full_like(weights, mean), weights)
    return weights * m


def weight_stats(weights: torch.Tensor, span: torch.Tensor, mask: torch.Tensor, reweight: torch.Tensor,
                 w_max: float) -> dict[str, float]:
    """Diagnostics of one micro-batch: mean weight and share at w_max over valid tokens, share of rows with an
    answer and of rows reweighted (answer and symmetry). All tensors as in `grail_weights`."""
    valid = mask.bool()
    n_valid = max(int(valid.sum()), 1)
    has_answer = ((span == SPAN_MARKER) | (span == SPAN_CONTENT)).any(dim=-1)
    rows = max(span.shape[0], 1)
    return {
        "w_mean": float(weights[valid].sum()) / n_valid,
        "w_cap_share": float(((weights >= w_max) & valid).sum()) / n_valid,
        "answer_rate": float(has_answer.sum()) / rows,
        "reweighted_rate": float((has_answer & reweight.bool()).sum()) / rows,
    }


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The decoder layers of a `transformers` CausalLM (the first ModuleList named `layers`)."""
    for name, module in model.named_modules():
        if name.split(".")[-1] == "layers" and isinstance(module, torch.nn.ModuleList):
            return module
    raise ValueError(f"GRAIL: no decoder `layers` ModuleList in {type(model).__name__}")


def _leaf_hook(model: torch.nn.Module, leaf_source: str, store: dict):
    """Install the hook that makes the attribution leaf; returns its handle.

    `embeddings`: the input embeddings (output of `get_input_embeddings()`); `first`/`middle`/`last`: the
    hidden states entering decoder layer 1, L//2 and L-1 (the authors' `hidden_states[1]`, `[L//2]`,
    `[L-1]` of `output_hidden_states`). The leaf is the tensor detached and marked `requires_grad`; a
    recomputation under gradient checkpointing makes a new one with the same values, the first is kept.
    """

    def make_leaf(tensor: torch.Tensor) -> torch.Tensor:
        leaf = tensor.detach().requires_grad_(True)
        store.setdefault("leaf", leaf)
        return leaf

    if leaf_source == "embeddings":
        return model.get_input_embeddings().register_forward_hook(lambda mod, args, out: make_leaf(out))
    layers = decoder_layers(model)
    index = {"first": 1, "middle": len(layers) // 2, "last": len(layers) - 1}[leaf_source]
    if not 0 < index < len(layers):
        raise ValueError(f"GRAIL: grail_leaf_source={leaf_source} needs more than {len(layers)} decoder layer(s)")

    def pre_hook(mod, args, kwargs):
        if args:
            return (make_leaf(args[0]), *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": make_leaf(kwargs["hidden_states"])}

    return layers[index].register_forward_pre_hook(pre_hook, with_kwargs=True)


def answer_saliency(
    model: torch.nn.Module,
    model_inputs: Mapping[str, Any],
    rows: torch.Tensor,
    cols: torch.Tensor,
    labels: torch.Tensor,
    answer: torch.Tensor,
    temperature: torch.Tensor,
    leaf_source: str = "embeddings",
) -> torch.Tensor:
    """GRAIL's saliency s = ||g ⊙ e||_2 of the positions (rows, cols) of the model's input.

    One forward of `model(**model_inputs)` with the leaf hooked in and logits only at the answer positions
    (`logits_to_keep` as an index tensor, and a pre-hook on the output embeddings that keeps only each
    position's own row of a padded layout), L_ans = -sum log softmax(logits / temperature)[label] over the
    positions with `answer`, then g = autograd.grad(L_ans, leaf): parameter gradients are not touched.
    Without any answer position the same forward and backward run on a zero loss (every rank of a
    sharded model then runs the same collectives).

    Args:
        model: a `transformers` CausalLM accepting `logits_to_keep` (plain, FSDP2 or PEFT-wrapped) whose output
            embeddings (`get_output_embeddings()`, the lm_head) take the hidden states as first argument.
        model_inputs: its keyword inputs, (R, S) layout (R = 1 for packed sequences).
        rows, cols: (N,) int64 coordinates in that layout of the positions to score; position (r, c)
            predicts token (r, c + 1).
        labels: (N,) int64 the token each position predicts.
        answer: (N,) bool, True where that token belongs to the answer span (marker, content, closing).
        temperature: (N,) float sampling temperature of each position.
        leaf_source: see `_leaf_hook`.

    Returns:
        (N,) float32 scores.
    """
    store: dict[str, torch.Tensor] = {}
    answer = answer.bool()
    has_answer = bool(answer.any())
    keep = torch.unique(cols[answer]) if has_answer else cols[:1].clone()
    # the lm_head gets the hidden states of the kept columns of every row, (R, len(keep), H): only each answer
    # position's own row is needed, (1, N_answer, H), R times fewer logits of the vocabulary's width
    own = (rows[answer], torch.searchsorted(keep, cols[answer]))
    handles = [
        _leaf_hook(model, leaf_source, store),
        model.get_output_embeddings().register_forward_pre_hook(
            lambda mod, args: (args[0][own].unsqueeze(0), *args[1:])
        ),
    ]
    try:
        with torch.enable_grad():
            out = model(**model_inputs, logits_to_keep=keep, use_cache=False)
            if "leaf" not in store:
                raise RuntimeError("GRAIL: the attribution leaf was not produced by the forward")
            sel = out.logits[0]  # (N_answer, V): the logits of the answer positions, in their order
            if has_answer:
                temps = temperature[answer].to(sel.device, torch.float32).unsqueeze(-1)
                logp = torch.log_softmax(sel.float() / temps, dim=-1)
                loss = -logp.gather(-1, labels[answer].unsqueeze(-1)).sum()
            else:
                loss = sel.float().sum() * 0.0
            (grad,) = torch.autograd.grad(loss, store["leaf"])
    finally:
        for handle in handles:
            handle.remove()
    leaf = store["leaf"].detach()
    return (grad[rows, cols].float() * leaf[rows, cols].float()).norm(dim=-1)


def compute_grail_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl adapter registered as `algorithm.adv_estimator=grail`: verl's own GRPO advantage.

    GRAIL's token weights are not computed here: they need the model of the update and are applied in the
    actor update (`verl_bot.hooks.engine_forward_step`). Reads verl's `norm_adv_by_std_in_grpo` (default True).

    Args:
        token_level_rewards: (B, T) one scalar reward per response (on its last token). response_mask: (B, T).
        index: (B,) uids.

    Returns:
        (advantages, returns): both (B, T), verl's `compute_grpo_outcome_advantage`.
    """
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    get = config.get if config is not None else (lambda key, default=None: default)
    return compute_grpo_outcome_advantage(
        token_level_rewards=token_level_rewards,
        response_mask=response_mask,
        index=index,
        norm_adv_by_std_in_grpo=bool(get("norm_adv_by_std_in_grpo", True)),
        config=config,
    )
