"""PASS: Process Advantage Signal Shaping (arXiv 2606.29296), reconstructed from its abstract.

`pass_advantage` and its verl adapter `compute_pass_advantage` (`algorithm.adv_estimator=pass`), the knobs
(`PassSettings`, `+algorithm.pass_*`) and the metrics (`pass_metrics`). Three operations [paper], every
formula [ours]: Chunk-by-Value (`value_chunks`), Divide-Length (`value_density`), Advantage Fusion:

    A_{i,t} = Z_g(outcome)_i + format_coef * Z_g(format)_i + process_coef * Z_g^tok(D)_{i,t}

The formulas, knobs, reductions and metrics: docs/ALGORITHMS.md, section PASS.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from verl.utils.groupwise import as_torch_index

from verl_bot.advantage.bot import BotStats, bot_advantage_and_stats
from verl_bot.advantage.groups import group_sum, raise_for_rows
from verl_bot.credit.context import report_metrics
from verl_bot.credit.streams import active_streams, response_value
from verl_bot.knobs import MethodSettings, knob

STREAMS = ("local", "outcome", "format")
DENSITIES = ("suffix", "sequence", "chunk")
OPS = ("grpo", "drgrpo")
DEFAULT_STD_FLOOR = 1e-3  # measured: an order of magnitude below any group of the CPU tasks (docs/ALGORITHMS.md)


@dataclass(frozen=True)
class PassSettings(MethodSettings, prefix="pass_", label="PASS"):
    """The knobs of PASS (`+algorithm.pass_<name>`); the defaults are ours (the paper gives no values)."""

    format_coef: float = knob(1.0, source="ours", doc="lambda_f, weight of the standardized format stream")
    process_coef: float = knob(1.0, source="ours", doc="lambda_p, weight of the standardized process density")
    dead_zone: float = knob(0.0, bounds="[0, inf)", source="ours", doc="delta; |s| < delta counts as 0 in chunks")
    min_chunk: int = knob(1, bounds="[1, inf)", source="ours", doc="m_min; shorter runs join the chunk before them")
    density: str = knob("suffix", choices=DENSITIES, source="ours", doc="Divide-Length (module docstring)")
    op: str = knob(
        "grpo", choices=OPS, source="ours", doc="group operator of every stream: mean/std, or the mean only"
    )
    epsilon: float = knob(1e-6, bounds="(0, inf)", source="ours", doc="added to each std before dividing")
    std_floor: float = knob(
        DEFAULT_STD_FLOOR, bounds="[0, inf)", source="ours", doc="floor of the process density's group std"
    )


def pass_settings(algorithm: Mapping[str, Any] | None) -> PassSettings:
    """PassSettings from verl's `algorithm` config (`pass_*` keys; None: the defaults).

    `pass_op` defaults to `grpo`, or `drgrpo` when `algorithm.norm_adv_by_std_in_grpo=false`. Raises
    VerlBotConfigError (a ValueError) naming the key for a bad value or an unknown `pass_*` key (also at
    start-up: `verl_bot.launch.preflight`).
    """
    norm_by_std = (algorithm if algorithm is not None else {}).get("norm_adv_by_std_in_grpo", True)
    return PassSettings.from_config(algorithm, op="grpo" if norm_by_std else "drgrpo")


class PassOutput(NamedTuple):
    """What `pass_advantage` computes (B rows, T tokens, G groups).

    advantages: (B, T) A_{i,t}, 0 on padding. outcome: (B,) Z_g(outcome)_i. format: (B,) format_coef * Z_g(format)_i.
    process: (B, T) process_coef * Z_g^tok(D), 0 on padding. chunks: (B,) number of chunks (0 for empty rows).
    process_stats: the token operator's `BotStats` of D ((G,) each). tied: (G,) bool, groups of >= 2 rollouts
    whose outcomes and formats are all equal.
    """

    advantages: torch.Tensor
    outcome: torch.Tensor
    format: torch.Tensor
    process: torch.Tensor
    chunks: torch.Tensor
    process_stats: BotStats
    tied: torch.Tensor


def _sign_class(signal: torch.Tensor, dead_zone: float) -> torch.Tensor:
    """(B, T) class of each value (same dtype): its sign, and 0 where |s| < dead_zone."""
    sign = torch.sign(signal)
    return sign if dead_zone == 0 else sign.masked_fill_(signal.abs() < dead_zone, 0.0)


def value_chunks(
    signal: torch.Tensor, response_mask: torch.Tensor, dead_zone: float = 0.0, min_chunk: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunk-by-Value: chunks of one sign class of the signal, vectorized over rows and tokens.

    Args:
        signal: (B, T) process signal s_t.
        response_mask: (B, T) 1 on response tokens (masked tokens in the middle are skipped, not boundaries).
        dead_zone: |s| < dead_zone is class 0.
        min_chunk: runs of fewer tokens join the chunk before them (a short first run: the first long run).

    Returns:
        chunk_id: (B, T) int64, 1-based chunk of each valid token in its row (masked tokens carry the id of
            the chunk before them, 0 before a row's first valid token).
        chunks: (B,) int64 number of chunks of each row (0 for a row without valid tokens).
    """
    mask = response_mask != 0
    batch, width = signal.shape
    cls = _sign_class(signal, dead_zone)
    if width > 1 and not bool((mask[:, 1:] <= mask[:, :-1]).all()):
        # masked tokens inside a row (tool outputs): compare with the class of the previous VALID token
        pos = torch.arange(1, width + 1, device=signal.device)
        last_valid = torch.where(mask, pos, 0).cummax(dim=1).values  # 1 + last valid position <= t, 0 if none
        before = torch.full((batch, 1), 2.0, dtype=cls.dtype, device=signal.device)  # no class: 2
        cls = torch.cat([before, cls], dim=1).gather(1, last_valid)
    starts = mask.clone()
    starts[:, 1:] &= cls[:, 1:] != cls[:, :-1]
    if min_chunk > 1:
        run_id = _running_count(starts)  # 1-based run of each token
        run_len = torch.zeros(batch, width + 1, device=signal.device).scatter_add_(1, run_id, mask.float())
        long_start = starts & (run_len.gather(1, run_id) >= min_chunk)
        long_before = _running_count(long_start) - long_start.long()
        starts = (starts & (run_id == 1)) | (long_start & (long_before > 0))
    chunk_id = _running_count(starts)
    return chunk_id, chunk_id[:, -1] if width else chunk_id.new_zeros(batch)


def _running_count(flags: torch.Tensor) -> torch.Tensor:
    """(B, T) bool -> (B, T) int64 count of set flags up to and including t (a float cumsum: exact below 2^24
    tokens, and several times faster than an integer cumsum on CPU)."""
    return flags.float().cumsum(dim=1).long()


def value_density(
    signal: torch.Tensor, response_mask: torch.Tensor, chunk_id: torch.Tensor, density: str = "suffix"
) -> torch.Tensor:
    """Divide-Length: the average value density of each token's chunk (docs/ALGORITHMS.md, PASS), 0 on padding.

    Args:
        signal: (B, T) process signal. response_mask: (B, T). chunk_id: (B, T) from `value_chunks`.
        density: suffix | sequence | chunk.

    Returns:
        (B, T) density D in the signal's float dtype (at least float32).
    """
    if density not in DENSITIES:
        raise ValueError(f"density must be one of {DENSITIES}, got {density!r}")
    mask = response_mask != 0
    dtype = torch.promote_types(signal.dtype, torch.float32)
    values = torch.where(mask, signal.to(dtype), 0.0)
    valid = mask.to(dtype)
    lengths = valid.sum(dim=1, keepdim=True)  # (B, 1) L_i (a float sum: a bool sum is several times slower)
    if density == "sequence":
        return torch.where(mask, values.sum(dim=1, keepdim=True) / lengths.clamp(min=1.0), 0.0)
    slots = (signal.shape[0], signal.shape[1] + 1)  # per row: one slot per chunk id (slot 0: before any chunk)
    chunk_sum = torch.zeros(slots, dtype=dtype, device=signal.device).scatter_add_(1, chunk_id, values)
    chunk_len = torch.zeros(slots, dtype=dtype, device=signal.device).scatter_add_(1, chunk_id, valid)
    if density == "chunk":
        per_chunk = chunk_sum / chunk_len.clamp(min=1.0)
    else:  # suffix: what is left of the row from the chunk's first token on (total minus the chunks before it)
        left_sum = values.sum(dim=1, keepdim=True) - chunk_sum.cumsum(dim=1) + chunk_sum
        left_len = lengths - chunk_len.cumsum(dim=1) + chunk_len
        per_chunk = left_sum / left_len.clamp(min=1.0)
    return torch.where(mask, per_chunk.gather(1, chunk_id), 0.0)


def group_standardize(
    values: torch.Tensor, group: torch.Tensor, norm_by_std: bool, epsilon: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's GRPO operator over the rows of each group: (x - mean) / (std + eps) (unbiased std), or x - mean.

    In float64 around one member's value of each group (verl's `group_mean_std` works in float32, where 8
    equal scores of 0.2 leave a mean 1.5e-8 off and a std of 1e-8: -0.0147 on every token), so a group whose
    values are all equal gets exactly 0. A group of one keeps its raw value (verl's: mean 0, std 1).

    Args:
        values: (B,) one value per rollout. group: (B,) ids in [0, G).

    Returns:
        (B,) float32 standardized values, and (G,) bool: the groups of >= 2 rows whose values are all equal.
    """
    x = values.double()
    num_groups = int(group.max()) + 1
    count = group_sum(torch.ones_like(x), group, num_groups)  # (G,)
    shift = x.new_zeros(num_groups).scatter_reduce(0, group, x, reduce="amax", include_self=False)  # a member
    offset = x - shift[group]  # exact 0 for every member equal to the shift
    mean = group_sum(offset, group, num_groups) / count.clamp(min=1.0)
    centered = offset - mean[group]
    squares = group_sum(centered.square(), group, num_groups)
    out = centered / ((squares / (count - 1).clamp(min=1.0)).sqrt()[group] + epsilon) if norm_by_std else centered
    single = count[group] == 1
    out = torch.where(single, x / (1.0 + epsilon) if norm_by_std else x, out)
    return out.float(), (count >= 2) & (squares == 0)


@torch.no_grad()
def pass_advantage(
    process: torch.Tensor,
    outcome: torch.Tensor,
    format_score: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | list,
    settings: PassSettings = PassSettings(),  # noqa: B008 - frozen dataclass, immutable default
) -> PassOutput:
    """PASS advantages: Chunk-by-Value, Divide-Length, Advantage Fusion (docs/ALGORITHMS.md, PASS), vectorized.

    Args:
        process: (B, T) process signal s_t of each token (verl-bot's `local` stream).
        outcome: (B,) verifiable outcome of each rollout (1 solved, 0 not).
        format_score: (B,) format score of each rollout (0 when the scorer reports none).
        response_mask: (B, T) 1 on response tokens, 0 on padding.
        index: (B,) group label of each row (verl's `uid`).
        settings: the knobs.

    Returns:
        PassOutput: advantages (B, T) float32 and its parts.
    """
    if process.dim() != 2 or process.shape != response_mask.shape:
        raise ValueError(
            f"pass advantage: process {tuple(process.shape)} and response_mask {tuple(response_mask.shape)} "
            "must be the same (B, T) shape"
        )
    batch = process.shape[0]
    if outcome.shape != (batch,) or format_score.shape != (batch,):
        raise ValueError(
            f"pass advantage: outcome {tuple(outcome.shape)} and format {tuple(format_score.shape)} must be ({batch},)"
        )
    if index is None or len(index) != batch:
        raise ValueError("pass advantage needs one group id (uid) per row")
    mask = response_mask != 0
    if batch == 0:
        zeros, empty = torch.zeros_like(process, dtype=torch.float32), torch.zeros(0, device=process.device)
        stats = BotStats(empty.double(), empty.double(), empty.double(), torch.zeros((), dtype=torch.float64))
        return PassOutput(zeros, empty, empty, zeros, empty.long(), stats, empty.bool())
    has_tokens = mask.any(dim=1)
    if not bool(torch.isfinite(process.sum(dim=1)).all()):  # NaN/inf somewhere (maybe padding): which rows?
        bad = (~torch.isfinite(process) & mask).any(dim=1)
        raise_for_rows("pass advantage: non-finite process signal (local)", bad, index)
    raise_for_rows(
        "pass advantage: no verifiable outcome (the verdict's info has none of solved/correct/compiled)",
        ~torch.isfinite(outcome) & has_tokens,
        index,
    )
    raise_for_rows("pass advantage: non-finite format score", ~torch.isfinite(format_score) & has_tokens, index)

    norm_by_std = settings.op == "grpo"
    group = as_torch_index(index, device=process.device)
    chunk_id, chunks = value_chunks(process, response_mask, settings.dead_zone, settings.min_chunk)
    density = value_density(process, response_mask, chunk_id, settings.density)
    valid = mask.to(density.dtype)  # converted once (mixed-dtype products with the mask convert it every time)
    process_term, stats = bot_advantage_and_stats(
        density, valid, index, epsilon=settings.epsilon, norm_by_std=norm_by_std, std_floor=settings.std_floor
    )
    process_term = process_term.float().mul_(settings.process_coef)
    outcome_term, outcome_tied = group_standardize(
        torch.where(has_tokens, outcome, 0.0), group, norm_by_std, settings.epsilon
    )
    format_term, format_tied = group_standardize(
        torch.where(has_tokens, format_score, 0.0), group, norm_by_std, settings.epsilon
    )
    format_term = settings.format_coef * format_term
    row_terms = (outcome_term + format_term)[:, None]
    advantages = torch.addcmul(process_term, row_terms, valid.float())  # process_term is 0 on padding
    return PassOutput(advantages, outcome_term, format_term, process_term, chunks, stats, outcome_tied & format_tied)


def pass_metrics(
    out: PassOutput, response_mask: torch.Tensor, std_floor: float = DEFAULT_STD_FLOOR
) -> dict[str, float]:
    """Diagnostics of one batch: chunks per rollout, tokens per chunk, each stream's share of sum |A|, and the
    tied groups and the process floor.

    Args:
        out: `pass_advantage`'s output. response_mask: (B, T). std_floor: the floor it ran with.

    Returns:
        chunks_per_rollout, tokens_per_chunk; share_outcome, share_format, share_process (over valid tokens,
        summing to 1; 0 if A == 0); adv_abs_max (max |A|); tied_group_share and floor_share: among groups of
        >= 2 rollouts, the share whose outcomes and formats are all equal (only the process term is left),
        and the share whose process density has a std below `std_floor` (the floor binds); 0 without such
        groups.
    """
    mask = response_mask != 0
    lengths = mask.float().sum(dim=1)
    rollouts = (lengths > 0).sum().clamp(min=1)
    parts = {
        "outcome": (out.outcome.abs() * lengths).sum(),
        "format": (out.format.abs() * lengths).sum(),
        "process": torch.where(mask, out.process.abs(), 0.0).sum(),
    }
    total = sum(parts.values())
    metrics = {
        "pass/chunks_per_rollout": float(out.chunks.sum() / rollouts),
        "pass/tokens_per_chunk": float(lengths.sum() / out.chunks.sum().clamp(min=1)),
    }
    metrics.update({f"pass/share_{name}": float(part / total) if total > 0 else 0.0 for name, part in parts.items()})
    comparable = out.process_stats.rollouts >= 2
    groups = max(float(comparable.sum()), 1.0)
    floored = comparable & ((out.process_stats.within + out.process_stats.between).sqrt() < std_floor)
    low, high = torch.aminmax(out.advantages) if out.advantages.numel() else (torch.zeros(()), torch.zeros(()))
    metrics["pass/adv_abs_max"] = max(-float(low), float(high), 0.0)
    metrics["pass/tied_group_share"] = float((out.tied & comparable).sum()) / groups
    metrics["pass/floor_share"] = float(floored.sum()) / groups
    return metrics


def compute_pass_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl adapter for `pass_advantage` (registered as `algorithm.adv_estimator=pass`).

    Reads the reward streams `local` (process signal), `outcome` and `format` (one value per response,
    `verl_bot.credit.streams.response_value`) of `verl_bot.credit.streams` instead of `token_level_rewards`, the knobs
    `pass_*` of the `algorithm` config (`pass_settings`), and reports `pass_metrics` with the step's metrics.

    Args:
        token_level_rewards: (B, T), used only for its shape. response_mask: (B, T). index: (B,) uids.

    Returns:
        (advantages, returns): both the same (B, T) tensor.
    """
    settings = pass_settings(config)
    streams = active_streams("pass", STREAMS, response_mask)
    out = pass_advantage(
        streams["local"],
        response_value(streams["outcome"]),
        response_value(streams["format"]),
        response_mask,
        index,
        settings,
    )
    report_metrics(pass_metrics(out, response_mask, settings.std_floor))
    return out.advantages, out.advantages
