"""BoT-GRPO: Bag-of-Tokens Group Relative Policy Optimization (arXiv 2610.09804, Eq. 2-3) [paper].

`bot_advantage` (and `bot_advantage_and_stats`, `bot_diagnostics`), its knobs (`BotSettings`,
`+algorithm.bot_*`), the scalar-reward layout (`scalar_layout`, `broadcast_row_sums`) and the verl adapter
`compute_bot_advantage` (`algorithm.adv_estimator=bot`). Each token of a group's bag weighs 1/(K L_k):

    mu = (1/K) sum_k (1/L_k) sum_t r_t^(k),  var = (1/K) sum_k (1/L_k) sum_t (r_t^(k) - mu)^2
    A_t^(k) = (r_t^(k) - mu) / (max(sqrt(var), floor) + eps)

The formula, knobs, properties, sessions (multi-output loops) and the two-pass numerics: docs/ALGORITHMS.md,
section 1 (BoT-GRPO, Implementation, Diagnostics, Multi-output agent loops).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from verl.utils.groupwise import as_torch_index

from verl_bot.advantage.groups import group_sum, last_token_index, raise_for_rows
from verl_bot.credit.context import current, report_metrics
from verl_bot.errors import VerlBotConfigError
from verl_bot.knobs import MethodSettings, knob

DEFAULT_EPSILON = 1e-6
DEFAULT_STD_FLOOR = 0.0
DEFAULT_TIE_TOLERANCE = 0.01

# V = E[(r - s)^2] - (m - s)^2 loses about log2(E[(r - s)^2] / V) bits to cancellation; a row losing more
# than 6 has its variance recomputed directly around its mean (rare: s is one of the row's own rewards).
_CANCELLATION_LIMIT = 64.0
_CHUNK_TOKENS = 1 << 20  # tokens per row chunk of a pass: 4 MiB of float32 per tensor, in the L3 cache


class BotStats(NamedTuple):
    """Statistics behind `bot_advantage`: per group, (G,) float64 each (G = number of distinct uids), and one
    of the batch's advantages.

    rollouts: K_g, rollouts (sessions, when given) of the group with at least one valid token.
    within: the part of var_g from token rewards around their own rollout's mean reward.
    between: the part of var_g from the rollouts' mean rewards around mu_g; var_g = within + between.
    abs_max: () max |A| over the batch's advantages (0 for a batch without valid tokens), taken in pass 2
        while each chunk is in cache.
    """

    rollouts: torch.Tensor
    within: torch.Tensor
    between: torch.Tensor
    abs_max: torch.Tensor


def _raise_if_not_finite(rewards: torch.Tensor, response_mask: torch.Tensor, index) -> None:
    """Raise ValueError naming the uids of rows with a NaN/inf reward on a valid token (slow path only).

    rewards, response_mask: (B, T).
    """
    raise_for_rows(
        "bot advantage: non-finite token rewards (NaN/inf)",
        (~torch.isfinite(rewards) & (response_mask != 0)).any(dim=1),
        index,
        "; check the reward manager / reward server output for these prompts",
    )


def bot_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | torch.Tensor | list,
    epsilon: float = DEFAULT_EPSILON,
    norm_by_std: bool = True,
    length_weighting: bool = True,
    std_floor: float = DEFAULT_STD_FLOOR,
    sessions: np.ndarray | list | None = None,
) -> torch.Tensor:
    """Per-token BoT-GRPO advantages, vectorized over groups (no Python loop over rows or groups).

    Args:
        token_level_rewards: (B, T) token rewards r_t^(k), any float dtype.
        response_mask: (B, T) 1 for response tokens, 0 for padding.
        index: (B,) group label of each row (verl's `uid`), any hashable labels.
        epsilon: added to the group std before dividing.
        norm_by_std: divide by (max(std, std_floor) + epsilon); False keeps only the centering.
        length_weighting: weigh each token by 1/(K L_k) (the paper); False: every token by 1/N.
        std_floor: lower bound on the std used for scaling (0 = the paper).
        sessions: (B,) rollout label of each row, or None (every row is a rollout). Rows of one session
            (the outputs of one multi-output agent loop run; all in one group) are one rollout.

    Returns:
        advantages: (B, T), float32 (float64 if the rewards are float64); 0 on padding
        and for every token of a group whose valid rewards are all equal.
    """
    return bot_advantage_and_stats(
        token_level_rewards, response_mask, index, epsilon, norm_by_std, length_weighting, std_floor, sessions
    )[0]


@torch.no_grad()
def bot_advantage_and_stats(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | torch.Tensor | list,
    epsilon: float = DEFAULT_EPSILON,
    norm_by_std: bool = True,
    length_weighting: bool = True,
    std_floor: float = DEFAULT_STD_FLOOR,
    sessions: np.ndarray | list | None = None,
) -> tuple[torch.Tensor, BotStats]:
    """`bot_advantage` (same arguments) and the group statistics it computed on the way (O(G) extra work).

    Returns:
        advantages: (B, T) as `bot_advantage`; stats: BotStats of (G,) tensors, G = number of distinct uids.
    """
    if token_level_rewards.shape != response_mask.shape or token_level_rewards.dim() != 2:
        raise ValueError(
            f"bot advantage: token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
            f"{tuple(response_mask.shape)} must be the same (B, T) shape"
        )
    if index is None:
        raise ValueError("bot advantage needs group ids: the batch has no 'uid' (non_tensor_batch['uid'])")
    if not (math.isfinite(std_floor) and std_floor >= 0):
        raise ValueError(f"bot advantage: std_floor must be a finite number >= 0, got {std_floor}")
    rewards = token_level_rewards
    batch_size = rewards.shape[0]
    if len(index) != batch_size:
        raise ValueError(f"bot advantage: {len(index)} uids for {batch_size} rows")
    work_dtype = torch.promote_types(rewards.dtype, torch.float32)
    if batch_size == 0:
        empty = rewards.new_zeros(0, dtype=torch.float64)
        return torch.zeros_like(rewards, dtype=work_dtype), BotStats(empty, empty, empty, empty.new_zeros(()))

    group = as_torch_index(index, device=rewards.device)
    num_groups = int(group.max()) + 1
    shift = _first_valid_reward(rewards, response_mask)  # (B,) s_k
    chunks = _MaskChunks(response_mask, work_dtype)
    buffer = torch.empty(rewards.shape, dtype=work_dtype, device=rewards.device)
    sums = _shifted_row_sums(rewards, response_mask, chunks, shift, buffer, index)
    if sums is None:  # |rewards| near the dtype's limit overflowed: redo it in float64 (rare, exact)
        chunks = _MaskChunks(response_mask, torch.float64)
        buffer = torch.empty(rewards.shape, dtype=torch.float64, device=rewards.device)
        sums = _shifted_row_sums(rewards, response_mask, chunks, shift, buffer, index)
    units = _Units.of_rows(shift, group) if sessions is None else _Units.of_sessions(sessions, shift, group, sums)
    groups = _group_statistics(rewards, response_mask, units, num_groups, units.sums or sums, length_weighting)
    var = groups.within + groups.between
    if norm_by_std:
        scale = torch.where(var > 0, 1.0 / (var.clamp(min=0.0).sqrt().clamp(min=std_floor) + epsilon), 0.0)
    else:
        scale = torch.where(var > 0, 1.0, 0.0)
    # pass 2: buffer holds r - s_k on valid tokens; subtract mu - s_k there, then scale; padding stays 0
    offset = units.row_offsets(groups.mean_minus_shift).to(buffer.dtype)[:, None]
    row_scale = scale[group].to(buffer.dtype)[:, None]
    extremes = buffer.new_zeros(2, len(chunks.bounds))  # each chunk's min and max advantage
    for i, (lo, hi, mask) in enumerate(chunks):
        part = buffer[lo:hi].addcmul_(mask, offset[lo:hi], value=-1).mul_(row_scale[lo:hi])
        torch.aminmax(part, out=(extremes[0, i], extremes[1, i]))
    abs_max = torch.maximum(-extremes[0].min(), extremes[1].max()).clamp(min=0).double()
    return buffer.to(work_dtype), BotStats(groups.rollouts, groups.within, groups.between, abs_max)


def _first_valid_reward(rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """(B,) each row's reward at its first valid token (the reward at token 0 for rows without any).

    rewards: (B, T); response_mask: (B, T), nonzero on valid tokens.
    """
    if bool((response_mask[:, 0] != 0).all()):  # right-padded rows: token 0 is valid
        return rewards[:, 0]
    first_valid = (response_mask != 0).to(torch.uint8).argmax(dim=1)  # the first valid token of each row
    return rewards.gather(1, first_valid[:, None]).squeeze(1)


class _MaskChunks:
    """The response mask as 0/1 of a float dtype, one chunk of rows at a time: `for lo, hi, mask in chunks`.

    A chunk holds about `_CHUNK_TOKENS` tokens, so that its rewards, mask and work buffer stay in the CPU's
    cache between the few operations of a pass over it. A float mask is read in place (copied once if of
    another float dtype); any other (verl's trainer passes int64, some callers bool) is made one byte per
    token once (nonzero -> 1) and each chunk widened into one reused (rows, T) buffer: the float copy of an
    int64 mask would cost a write and two reads of a (B, T) tensor. The yielded `mask` is valid until the
    next chunk.
    """

    def __init__(self, response_mask: torch.Tensor, dtype: torch.dtype):
        batch, width = response_mask.shape
        rows = max(1, _CHUNK_TOKENS // max(width, 1))
        self.bounds = [(lo, min(lo + rows, batch)) for lo in range(0, batch, rows)]
        if response_mask.dtype.is_floating_point:
            self.floats, self.bytes, self.scratch = response_mask.to(dtype), None, None
        else:
            self.floats = None
            self.bytes = response_mask.to(torch.bool).view(torch.uint8)  # (B, T) 0/1, no copy for a bool mask
            self.scratch = torch.empty(min(rows, batch), width, dtype=dtype, device=response_mask.device)

    def __iter__(self):
        for lo, hi in self.bounds:
            if self.floats is not None:
                yield lo, hi, self.floats[lo:hi]
            else:
                yield lo, hi, self.scratch[: hi - lo].copy_(self.bytes[lo:hi])


class _RowSums(NamedTuple):
    """(B,) float64 sums over each row's valid tokens: `shifted` of r - s_k, `squares` of (r - s_k)^2, `lengths` L_k."""

    shifted: torch.Tensor
    squares: torch.Tensor
    lengths: torch.Tensor


def _shifted_row_sums(rewards, response_mask, chunks, shift, buffer, index) -> _RowSums | None:
    """Pass 1: fill `buffer` (B, T) with r_t - s_k on valid tokens (0 on padding), chunk by chunk, and return
    its row sums; None if they overflow the buffer's dtype.

    rewards, response_mask: (B, T); chunks: `_MaskChunks` of the buffer's dtype; shift: (B,) s_k, each row's
    first valid reward. Raises ValueError naming the uids when a valid token's reward is NaN/inf.
    """
    sums = buffer.new_empty(3, buffer.shape[0])  # row sums, row norms, lengths
    shift = shift.to(buffer.dtype)[:, None]
    for lo, hi, mask in chunks:
        part = torch.sub(rewards[lo:hi], shift[lo:hi], out=buffer[lo:hi]).mul_(mask)
        torch.sum(part, dim=1, out=sums[0, lo:hi])
        torch.linalg.vector_norm(part, dim=1, out=sums[1, lo:hi])  # no (rows, T) temporary
        torch.sum(mask, dim=1, out=sums[2, lo:hi])
    if not bool(torch.isfinite(sums[:2]).all()):
        _raise_if_not_finite(rewards, response_mask, index)
        buffer.masked_fill_(response_mask == 0, 0.0)  # NaN/inf only on padding (or overflow): drop it
        torch.sum(buffer, dim=1, out=sums[0])
        torch.linalg.vector_norm(buffer, dim=1, out=sums[1])
        if not bool(torch.isfinite(sums[:2]).all()):
            return None
    shifted, norms, lengths = sums.double()
    return _RowSums(shifted, norms.square(), lengths)


class _Groups(NamedTuple):
    """BotStats' per-group fields, (G,) float64 each, and `mean_minus_shift` (U,) float64: mu_g - s_k per rollout."""

    rollouts: torch.Tensor
    within: torch.Tensor
    between: torch.Tensor
    mean_minus_shift: torch.Tensor


class _Units(NamedTuple):
    """The rollouts of a batch: its rows, or its sessions (several rows each). U = number of rollouts.

    unit: (B,) each row's rollout, None when every row is its own; shift: (U,) s_k of each rollout (one of
    its rows' first valid rewards); group: (U,) each rollout's group id; sums: the rollouts' `_RowSums`
    (None: the rows' own); delta: (B,) s_r - s_k of each row with tokens (0 for the others), None for rows.
    """

    unit: torch.Tensor | None
    shift: torch.Tensor
    group: torch.Tensor
    sums: _RowSums | None
    delta: torch.Tensor | None

    @classmethod
    def of_rows(cls, shift: torch.Tensor, group: torch.Tensor) -> _Units:
        return cls(None, shift, group, None, None)

    @classmethod
    def of_sessions(cls, sessions, shift: torch.Tensor, group: torch.Tensor, sums: _RowSums) -> _Units:
        """Each session's sums re-based from its rows' shifts to its own: with d = s_r - s_S,
        sum(r - s_S) = sum(r - s_r) + L_r d and sum((r - s_S)^2) = sum((r - s_r)^2) + 2 d sum(r - s_r) + L_r d^2.
        Raises ValueError when a session's rows are in different groups."""
        if len(sessions) != len(group):
            raise ValueError(f"bot advantage: {len(sessions)} sessions for {len(group)} rows")
        unit = as_torch_index(sessions, device=group.device)
        count = int(unit.max()) + 1
        first = torch.full((count,), len(group), dtype=torch.long, device=group.device)
        first = first.scatter_reduce(0, unit, torch.arange(len(group), device=group.device), reduce="amin")
        unit_group = group[first]  # (U,)
        if bool((unit_group[unit] != group).any()):
            raise ValueError("bot advantage: a session's rows have different uids (sessions must nest in groups)")
        has_tokens = sums.lengths > 0
        row_shift = torch.where(has_tokens, shift.double(), -torch.inf)
        unit_shift = torch.full((count,), -torch.inf, dtype=torch.float64, device=group.device)
        unit_shift = unit_shift.scatter_reduce(0, unit, row_shift, reduce="amax")  # (U,) one row's s_r
        unit_shift = torch.where(torch.isfinite(unit_shift), unit_shift, 0.0)
        delta = torch.where(has_tokens, row_shift - unit_shift[unit], 0.0)  # (B,) s_r - s_S
        shifted = sums.shifted + sums.lengths * delta
        squares = sums.squares + 2 * delta * sums.shifted + sums.lengths * delta.square()
        totals = [group_sum(values, unit, count) for values in (shifted, squares, sums.lengths)]
        return cls(unit, unit_shift, unit_group, _RowSums(*totals), delta)

    def rows_of(self, units: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows, their unit's position in `units`) of the rollouts `units` (R,)."""
        if self.unit is None:
            return units, torch.arange(len(units), device=units.device)
        position = torch.full_like(self.shift, -1, dtype=torch.long).index_put(
            (units,), torch.arange(len(units), device=units.device)
        )
        rows = (position[self.unit] >= 0).nonzero().flatten()
        return rows, position[self.unit[rows]]

    def row_offsets(self, mean_minus_shift: torch.Tensor) -> torch.Tensor:
        """(B,) mu_g - s_r of each row (pass 2 subtracts it from r - s_r), from (U,) mu_g - s_k of each rollout."""
        if self.unit is None:
            return mean_minus_shift
        return mean_minus_shift[self.unit] - self.delta


def _group_statistics(
    rewards, response_mask, units: _Units, num_groups: int, sums: _RowSums, length_weighting: bool
) -> _Groups:
    """Group mean and variance from each rollout's shifted sums, O(B) float64 work.

    var_g = sum_k W_k * (V_k + (m_k - mu_g)^2): V_k the variance of rollout k's rewards around their mean m_k,
    W_k the rollout's weight (1/K, or L_k/N without length weighting). Means are taken relative to one
    shift of the group (s_g, a rollout's shift), so a group whose rewards are all equal gets exactly 0.
    rewards, response_mask: (B, T); units: the rollouts (`_Units`, U of them); sums: their `_RowSums` (U,).
    Returns `_Groups` with `mean_minus_shift` (U,).
    """
    shift, group = units.shift, units.group
    row_sum, sq_sum, lengths = sums  # (U,) sums of r - s_k and (r - s_k)^2 over each rollout's valid tokens; L_k
    has_tokens = lengths > 0
    inv_len = torch.where(has_tokens, 1.0 / lengths.clamp(min=1.0), 0.0)  # (U,) 1/L_k, 0 for empty rollouts
    rollouts = group_sum(has_tokens.double(), group, num_groups)  # (G,) K
    if length_weighting:
        weight = has_tokens.double() / rollouts.clamp(min=1.0)[group]  # (U,) W_k = 1/K
    else:
        weight = lengths / group_sum(lengths, group, num_groups).clamp(min=1.0)[group]  # (U,) W_k = L_k/N
    row_shift = torch.where(has_tokens, shift.double(), -torch.inf)  # (U,) s_k (finite: NaN/inf raised before)
    group_shift = torch.full((num_groups,), -torch.inf, dtype=torch.float64, device=rewards.device)
    group_shift = group_shift.scatter_reduce(0, group, row_shift, reduce="amax")  # (G,) s_g, one of the s_k
    group_shift = torch.where(torch.isfinite(group_shift), group_shift, 0.0)[group]  # (U,)
    row_shift = torch.where(has_tokens, row_shift, group_shift)  # rollouts without tokens: any finite value

    row_mean = row_sum * inv_len  # (U,) m_k - s_k
    row_var = sq_sum * inv_len - row_mean.square()  # (U,) V_k, by the shifted-sum identity
    lossy = has_tokens & (sq_sum * inv_len > _CANCELLATION_LIMIT * row_var)  # also catches V_k < 0
    if bool(lossy.any()):
        lossy_units = lossy.nonzero().flatten()
        rows, position = units.rows_of(lossy_units)
        centered = rewards[rows].double() - (row_shift + row_mean)[lossy_units][position, None]
        centered = torch.where(response_mask[rows] != 0, centered, 0.0)
        squares = group_sum(centered.square().sum(dim=1), position, len(lossy_units))
        row_var = row_var.index_put((lossy_units,), squares * inv_len[lossy_units])

    offset = row_shift - group_shift + row_mean  # (U,) m_k - s_g
    mean = group_sum(weight * offset, group, num_groups)  # (G,) mu_g - s_g
    deviation = offset - mean[group]  # (U,) m_k - mu_g
    within = group_sum(weight * row_var, group, num_groups)
    between = group_sum(weight * deviation.square(), group, num_groups)
    mean_minus_shift = mean[group] - (row_shift - group_shift)  # (U,) mu_g - s_k
    return _Groups(rollouts, within, between, mean_minus_shift)


def bot_diagnostics(stats: BotStats, tie_tolerance: float = DEFAULT_TIE_TOLERANCE) -> dict[str, float]:
    """Health metrics of one batch's `bot` advantages, O(G) from their statistics.

    Args:
        stats: the BotStats `bot_advantage_and_stats` returned with the advantages.
        tie_tolerance: a group counts as tied when its between-rollout variance is at most this
            share of its variance.

    Returns:
        adv_abs_max: max |A| over valid tokens (0 for a batch without any).
        tied_group_share: among groups with >= 2 rollouts, the share that are tied: the rollouts' mean
            rewards (each over its own tokens) are equal up to `tie_tolerance`, i.e. what is left to
            standardize is (almost) only within-rollout variation, typically every rollout the same
            outcome G with different local signals. A group whose rewards are all equal is tied.
            0 when no group has 2 rollouts.
        rollouts_per_group: the mean K over groups with any valid token (rollout.n, unless rollouts
            failed or are empty; a multi-output loop's rows of one sample count once). 0 for no group.
    """
    comparable = stats.rollouts >= 2
    tied = comparable & (stats.between <= tie_tolerance * (stats.within + stats.between))
    share = float(tied.sum()) / float(comparable.sum()) if bool(comparable.any()) else 0.0
    present = stats.rollouts[stats.rollouts > 0]
    per_group = float(present.mean()) if len(present) else 0.0
    return {"adv_abs_max": float(stats.abs_max), "tied_group_share": share, "rollouts_per_group": per_group}


@dataclass(frozen=True)
class BotSettings(MethodSettings, prefix="bot_", label="BoT-GRPO"):
    """BoT-GRPO's knobs (`+algorithm.bot_<name>`; docs/ALGORITHMS.md, section 1)."""

    epsilon: float = knob(DEFAULT_EPSILON, bounds="[0, inf)", source="ours", doc="added to the (floored) group std")
    length_weighting: bool = knob(True, source="paper", doc="each token weighs 1/(K L_k); false: every token 1/N")
    std_floor: float = knob(
        DEFAULT_STD_FLOOR, bounds="[0, inf)", source="paper", doc="the std used for scaling is max(std, floor)"
    )
    broadcast_scalar: bool = knob(
        False, source="ours", doc="spread each response's summed reward over its tokens first (Eq. 4 with S = 0)"
    )


def bot_options(config: Any) -> dict[str, Any]:
    """The keyword arguments of `bot_advantage` from verl's `algorithm` config (None: the defaults).

    Keys: `bot_epsilon`, `bot_length_weighting`, `bot_std_floor` (`BotSettings`, set with `+algorithm.<key>=...`)
    and verl's own `norm_adv_by_std_in_grpo`. Raises VerlBotConfigError (a ValueError) naming the key for a value
    of the wrong kind (also at start-up: `verl_bot.launch.preflight`).
    """
    settings = BotSettings.from_config(config)
    return {
        "epsilon": settings.epsilon,
        "norm_by_std": bool((config or {}).get("norm_adv_by_std_in_grpo", True)),
        "length_weighting": settings.length_weighting,
        "std_floor": settings.std_floor,
    }


def scalar_layout(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> bool:
    """True when every non-zero reward of the batch sits on its row's last valid token (and one does).

    That is the layout of a scalar reward manager (verl's `naive`, `dapo`: one score per response on its
    last token), where BoT-GRPO would standardize each last token against a bag of zeros. Exact: a row's
    sum of squares equals its last reward squared iff its other rewards are all 0.

    Cost: O(B) for dense rewards. A non-zero reward on a row's valid token 0 while token 1 is valid too is
    not on the last token, which decides "False" from two columns; only a batch without such a row (scalar
    rewards, or a dense batch whose first tokens all get 0) takes the full (B, T) check.

    Args:
        token_level_rewards: (B, T). response_mask: (B, T).
    """
    if token_level_rewards.shape[1] >= 2:
        valid = (response_mask[:, 0] != 0) & (response_mask[:, 1] != 0)
        if bool(((token_level_rewards[:, 0] != 0) & valid).any()):
            return False
    rows = torch.arange(token_level_rewards.shape[0], device=token_level_rewards.device)
    last = token_level_rewards[rows, last_token_index(response_mask)].double()
    last = torch.where(response_mask.sum(dim=1) > 0, last, 0.0)
    squares = torch.linalg.vecdot(token_level_rewards, token_level_rewards).double()
    return bool((last != 0).any()) and bool((squares == last * last).all())


def broadcast_row_sums(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Each row's summed reward on every valid token ((B, T) -> (B, T), 0 on padding): Eq. 4 with S = 0."""
    return (token_level_rewards * response_mask).sum(dim=1, keepdim=True) * response_mask


def compute_bot_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl adapter for `bot_advantage` (registered as `algorithm.adv_estimator=bot`).

    Reads its options from the `algorithm` config with `bot_options` (`BotSettings`): `bot_epsilon` (1e-6),
    `bot_length_weighting` (true), `bot_std_floor` (0.0), verl's own `norm_adv_by_std_in_grpo`
    (true; false switches std scaling off) and `bot_broadcast_scalar` (false; true spreads each
    response's summed reward over its tokens first: for scalar reward managers, it makes `bot` GRPO
    with the population std). Without that knob, scalar rewards (`scalar_layout`) are refused with a
    clear error, unless verl-bot's own manager produced them (its G is on every token). Extra keyword
    arguments from verl are accepted and ignored.

    In verl's trainer it reports `bot/adv_abs_max`, `bot/tied_group_share` and `bot/rollouts_per_group`
    (`bot_diagnostics`) to the step's metrics (`verl_bot.credit.context`). There, the rows of a multi-output agent
    loop's sample (the context's `sessions`, set by `verl_bot.hooks.v1.multi_trajectory`) are one rollout.

    Args:
        token_level_rewards: (B, T). response_mask: (B, T). index: (B,) uids.

    Returns:
        (advantages, returns): both (B, T), the same tensor as in verl's GRPO.
    """
    rewards = token_level_rewards
    if BotSettings.from_config(config).broadcast_scalar:
        rewards = broadcast_row_sums(rewards, response_mask)
    elif not _from_bot_manager() and scalar_layout(rewards, response_mask):
        raise VerlBotConfigError(
            "adv_estimator=bot got one scalar reward per response (every non-zero reward sits on the last token, "
            "as verl's naive/dapo managers write it): use reward.reward_manager.name=bot (G on every token), or "
            "+algorithm.bot_broadcast_scalar=true to spread each scalar over its tokens (GRPO, population std)"
        )
    ctx = current()
    sessions = ctx.sessions if ctx is not None else None
    advantages, stats = bot_advantage_and_stats(
        rewards, response_mask, index, **bot_options(config), sessions=sessions
    )
    if ctx is not None:  # in verl's trainer: the step's diagnostics
        report_metrics({f"bot/{name}": value for name, value in bot_diagnostics(stats).items()})
    return advantages, advantages


def _from_bot_manager() -> bool:
    """True when the active batch's rewards come from verl-bot's manager with dense rewards."""
    ctx = current()
    return ctx is not None and ctx.dense_rewards
