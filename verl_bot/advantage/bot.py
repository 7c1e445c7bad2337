"""BoT-GRPO: Bag-of-Tokens Group Relative Policy Optimization (arXiv 2610.09804, Eq. 2-3).

Every valid token reward of a group (the K rollouts of one prompt, verl's
`uid`) goes into one bag; each token is weighted by 1/L_k, the inverse length
of its rollout, so every rollout weighs the same however long it is:

    mu    = (1/K) * sum_k (1/L_k) * sum_t r_t^(k)
    var   = (1/K) * sum_k (1/L_k) * sum_t (r_t^(k) - mu)^2        (population form)
    A_t^(k) = (r_t^(k) - mu) / (sqrt(var) + eps)          ("no std scaling": r_t^(k) - mu)

When every token of a rollout carries the same reward R_k this is GRPO with
the population std on every token; duplicating every token of a rollout
leaves mu and var unchanged (length invariance).

Numerics: reductions accumulate in float64, on rewards shifted by one reward of the group
(exact when all rewards of a group are equal, so such a group gets exactly 0);
a group with zero variance gets 0, never NaN or inf; padding gets 0. Rows with
no valid token take no part in their group (they are not counted in K).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch
from verl.utils.groupwise import as_torch_index

DEFAULT_EPSILON = 1e-6


def _group_sum(values: torch.Tensor, group: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Sum `values` (N,) into `num_groups` buckets given `group` (N,) ids; returns (num_groups,)."""
    return values.new_zeros(num_groups).index_add_(0, group, values)


def _check_finite(rewards: torch.Tensor, mask: torch.Tensor, index: np.ndarray | None) -> None:
    """Raise ValueError naming the uids of rows with a NaN/inf reward on a valid token.

    rewards: (B, T); mask: (B, T) bool.
    """
    bad_rows = (~torch.isfinite(rewards) & mask).any(dim=1)
    if bad_rows.any():
        rows = bad_rows.nonzero().flatten().tolist()
        uids = sorted({str(index[r]) for r in rows}) if index is not None else []
        raise ValueError(
            f"bot advantage: non-finite token rewards (NaN/inf) in {len(rows)} response(s), rows {rows[:8]}, "
            f"uid(s) {uids[:8]}; check the reward manager / reward server output for these prompts"
        )


@torch.no_grad()
def bot_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | torch.Tensor | list,
    epsilon: float = DEFAULT_EPSILON,
    norm_by_std: bool = True,
) -> torch.Tensor:
    """Per-token BoT-GRPO advantages, vectorized over groups (no Python loop over rows or groups).

    Args:
        token_level_rewards: (B, T) token rewards r_t^(k), any float dtype.
        response_mask: (B, T) 1 for response tokens, 0 for padding.
        index: (B,) group label of each row (verl's `uid`), any hashable labels.
        epsilon: added to the group std before dividing.
        norm_by_std: divide by (std + epsilon); False keeps only the centering.

    Returns:
        advantages: (B, T), float32 (float64 if the rewards are float64); 0 on padding
        and for every token of a group whose valid rewards are all equal.
    """
    if token_level_rewards.shape != response_mask.shape or token_level_rewards.dim() != 2:
        raise ValueError(
            f"bot advantage: token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
            f"{tuple(response_mask.shape)} must be the same (B, T) shape"
        )
    if index is None:
        raise ValueError("bot advantage needs group ids: the batch has no 'uid' (non_tensor_batch['uid'])")
    rewards = token_level_rewards
    batch_size = rewards.shape[0]
    if len(index) != batch_size:
        raise ValueError(f"bot advantage: {len(index)} uids for {batch_size} rows")
    out_dtype = torch.promote_types(rewards.dtype, torch.float32)
    mask = response_mask.bool()
    _check_finite(rewards, mask, np.asarray(index, dtype=object))
    if batch_size == 0:
        return torch.zeros_like(rewards, dtype=out_dtype)

    group = as_torch_index(index, device=rewards.device)
    num_groups = int(group.max()) + 1
    lengths = mask.sum(dim=1)  # (B,) L_k
    has_tokens = lengths > 0
    inv_len = torch.where(has_tokens, 1.0 / lengths.clamp(min=1).double(), 0.0)  # (B,) 1/L_k, 0 if empty
    k_per_group = _group_sum(has_tokens.double(), group, num_groups).clamp(min=1.0)  # (G,) K

    # Shift by one valid reward of the group (the first valid token of some row): exact zeros when all equal.
    first_valid = mask.to(torch.uint8).argmax(dim=1)  # (B,)
    row_first = rewards[torch.arange(batch_size, device=rewards.device), first_valid].double()
    row_first = torch.where(has_tokens, row_first, -torch.inf)
    shift_g = torch.full((num_groups,), -torch.inf, dtype=torch.float64, device=rewards.device)
    shift_g = shift_g.scatter_reduce(0, group, row_first, reduce="amax")
    shift_g = torch.where(torch.isfinite(shift_g), shift_g, 0.0)  # groups with no valid token
    shift = shift_g[group]  # (B,)

    groups = _Groups(group, num_groups, shift, inv_len, k_per_group)
    advantages = _standardize(rewards, mask, groups, epsilon, norm_by_std, out_dtype)
    if out_dtype != torch.float64 and not torch.isfinite(advantages).all():
        # |rewards| near the dtype's limit overflowed the shifted buffer: redo it in float64 (rare, exact)
        advantages = _standardize(rewards, mask, groups, epsilon, norm_by_std, torch.float64).to(out_dtype)
    return advantages


class _Groups(NamedTuple):
    """Per-row group facts: `group` (B,) ids in [0, num_groups), `shift` (B,) the group's reference reward,
    `inv_len` (B,) 1/L_k (0 for empty rows), `k_per_group` (G,) rollouts with tokens per group."""

    group: torch.Tensor
    num_groups: int
    shift: torch.Tensor
    inv_len: torch.Tensor
    k_per_group: torch.Tensor


def _standardize(rewards, mask, groups: _Groups, epsilon: float, norm_by_std: bool, work_dtype) -> torch.Tensor:
    """(r - mu_g) [/ (std_g + eps)] on valid tokens, in one (B, T) buffer of `work_dtype`; reductions in float64.

    rewards, mask: (B, T). Returns (B, T) of `work_dtype`, 0 on padding and in zero-variance groups.
    """
    group, num_groups, shift, inv_len, k_per_group = groups
    centered = rewards.to(work_dtype, copy=True)
    centered.sub_(shift.to(work_dtype)[:, None]).masked_fill_(~mask, 0.0)
    row_sum = centered.sum(dim=1, dtype=torch.float64)  # (B,) sum_t (r_t - shift)
    mu_g = _group_sum(row_sum * inv_len, group, num_groups) / k_per_group  # (G,) mean minus shift
    centered.sub_(mu_g.to(work_dtype)[group][:, None]).masked_fill_(~mask, 0.0)
    sq_sum = torch.einsum("bt,bt->b", centered, centered).double()  # (B,) sum_t (r_t - mu)^2
    var_g = _group_sum(sq_sum * inv_len, group, num_groups) / k_per_group  # (G,)

    if norm_by_std:
        scale_g = torch.where(var_g > 0, 1.0 / (var_g.sqrt() + epsilon), 0.0)
    else:
        scale_g = torch.where(var_g > 0, 1.0, 0.0)
    return centered.mul_(scale_g.to(work_dtype)[group][:, None])


def compute_bot_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl adapter for `bot_advantage` (registered as `algorithm.adv_estimator=bot`).

    Reads from the `algorithm` config: `bot_epsilon` (default 1e-6; set with
    `+algorithm.bot_epsilon=...`) and verl's own `norm_adv_by_std_in_grpo`
    (default True; False switches std scaling off). Extra keyword arguments
    from verl are accepted and ignored.

    Args:
        token_level_rewards: (B, T). response_mask: (B, T). index: (B,) uids.

    Returns:
        (advantages, returns): both (B, T), the same tensor as in verl's GRPO.
    """
    get = config.get if config is not None else (lambda key, default=None: default)
    epsilon = float(get("bot_epsilon", DEFAULT_EPSILON))
    norm_by_std = bool(get("norm_adv_by_std_in_grpo", True))
    advantages = bot_advantage(token_level_rewards, response_mask, index, epsilon=epsilon, norm_by_std=norm_by_std)
    return advantages, advantages
