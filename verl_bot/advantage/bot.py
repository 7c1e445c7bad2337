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

Numerics: one (B, T) work buffer; all sums are over rewards shifted by one reward of the group
(exact when all rewards of a group are equal, so such a group gets exactly 0);
a group with zero variance gets 0, never NaN or inf; padding gets 0. Rows with
no valid token take no part in their group (they are not counted in K).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch
from verl.utils.groupwise import as_torch_index

from verl_bot.advantage.common import group_sum, last_token_index, raise_for_rows
from verl_bot.context import current, report_metrics
from verl_bot.errors import VerlBotConfigError

DEFAULT_EPSILON = 1e-6


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
    if batch_size == 0:
        return torch.zeros_like(rewards, dtype=out_dtype)

    group = as_torch_index(index, device=rewards.device)
    num_groups = int(group.max()) + 1
    lengths = response_mask.sum(dim=1).double()  # (B,) L_k
    has_tokens = lengths > 0
    inv_len = torch.where(has_tokens, 1.0 / lengths.clamp(min=1.0), 0.0)  # (B,) 1/L_k, 0 for empty rows
    k_per_group = group_sum(has_tokens.double(), group, num_groups).clamp(min=1.0)  # (G,) K
    groups = _Groups(
        group, num_groups, _group_shift(rewards, response_mask, group, num_groups, has_tokens), inv_len, k_per_group
    )

    advantages, sq_sum = _standardize(rewards, response_mask, groups, epsilon, norm_by_std, out_dtype, index)
    if not torch.isfinite(sq_sum).all():
        # |rewards| near the dtype's limit overflowed the shifted buffer: redo it in float64 (rare, exact)
        advantages, _ = _standardize(rewards, response_mask, groups, epsilon, norm_by_std, torch.float64, index)
        advantages = advantages.to(out_dtype)
    return advantages


class _Groups(NamedTuple):
    """Per-row group facts: `group` (B,) ids in [0, num_groups), `shift` (B,) the group's reference reward,
    `inv_len` (B,) 1/L_k (0 for empty rows), `k_per_group` (G,) rollouts with tokens per group."""

    group: torch.Tensor
    num_groups: int
    shift: torch.Tensor
    inv_len: torch.Tensor
    k_per_group: torch.Tensor


def _group_shift(rewards, response_mask, group, num_groups: int, has_tokens) -> torch.Tensor:
    """(B,) float64: one valid reward of each row's group (its first valid token in some row), 0 if none.

    Subtracting it first makes every sum exactly 0 in a group whose rewards are all equal.
    rewards, response_mask: (B, T); group, has_tokens: (B,).
    """
    rows = torch.arange(rewards.shape[0], device=rewards.device)
    if bool(((response_mask[:, 0] != 0) | ~has_tokens).all()):  # right-padded rows: token 0 is valid
        first_valid = torch.zeros_like(rows)
    else:
        first_valid = (response_mask != 0).to(torch.uint8).argmax(dim=1)
    row_first = torch.where(has_tokens, rewards[rows, first_valid].double(), -torch.inf)
    row_first = torch.where(torch.isfinite(row_first) | ~has_tokens, row_first, 0.0)  # NaN/inf: reported later
    shift_g = torch.full((num_groups,), -torch.inf, dtype=torch.float64, device=rewards.device)
    shift_g = shift_g.scatter_reduce(0, group, row_first, reduce="amax")
    return torch.where(torch.isfinite(shift_g), shift_g, 0.0)[group]


def _standardize(rewards, response_mask, groups: _Groups, epsilon, norm_by_std, work_dtype, index):
    """(r - mu_g) [/ (std_g + eps)] on valid tokens, in ONE (B, T) buffer of `work_dtype`.

    rewards, response_mask: (B, T). Returns the advantages (B, T) of `work_dtype` (0 on padding and in
    zero-variance groups) and the (B,) float64 sums of squared deviations (non-finite if the buffer overflowed).
    """
    group, num_groups, shift, inv_len, k_per_group = groups
    centered = rewards.to(work_dtype, copy=True)
    centered.sub_(shift.to(work_dtype)[:, None]).mul_(response_mask)
    row_sum = centered.sum(dim=1).double()  # (B,) sum_t (r_t - shift)
    if not torch.isfinite(row_sum).all():
        _raise_if_not_finite(rewards, response_mask, index)
        centered = torch.where(response_mask != 0, centered, 0.0)  # NaN/inf only on padding: drop it
        row_sum = centered.sum(dim=1).double()
    mu_g = group_sum(row_sum * inv_len, group, num_groups) / k_per_group  # (G,) mean minus shift
    centered.sub_(mu_g.to(work_dtype)[group][:, None]).mul_(response_mask)
    sq_sum = torch.linalg.vecdot(centered, centered).double()  # (B,) sum_t (r_t - mu)^2
    var_g = group_sum(sq_sum * inv_len, group, num_groups) / k_per_group  # (G,)

    if norm_by_std:
        scale_g = torch.where(var_g > 0, 1.0 / (var_g.sqrt() + epsilon), 0.0)
    else:
        scale_g = torch.where(var_g > 0, 1.0, 0.0)
    return centered.mul_(scale_g.to(work_dtype)[group][:, None]), sq_sum


def scalar_layout(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> bool:
    """True when every non-zero reward of the batch sits on its row's last valid token (and one does).

    That is the layout of a scalar reward manager (verl's `naive`, `dapo`: one score per response on its
    last token), where BoT-GRPO would standardize each last token against a bag of zeros. Exact: a row's
    sum of squares equals its last reward squared iff its other rewards are all 0.

    Args:
        token_level_rewards: (B, T). response_mask: (B, T).
    """
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

    Reads from the `algorithm` config: `bot_epsilon` (default 1e-6; set with
    `+algorithm.bot_epsilon=...`), verl's own `norm_adv_by_std_in_grpo`
    (default True; False switches std scaling off) and `bot_broadcast_scalar`
    (default False; True spreads each response's summed reward over its tokens
    first: for scalar reward managers, it makes `bot` GRPO with the population std).
    Without that knob, scalar rewards (`scalar_layout`) are refused with a clear
    error, unless verl-bot's own manager produced them (its G is on every token).
    Extra keyword arguments from verl are accepted and ignored.

    Reports `bot/adv_abs_max` to the step's metrics (`verl_bot.context`).

    Args:
        token_level_rewards: (B, T). response_mask: (B, T). index: (B,) uids.

    Returns:
        (advantages, returns): both (B, T), the same tensor as in verl's GRPO.
    """
    get = config.get if config is not None else (lambda key, default=None: default)
    epsilon = float(get("bot_epsilon", DEFAULT_EPSILON))
    norm_by_std = bool(get("norm_adv_by_std_in_grpo", True))
    rewards = token_level_rewards
    if get("bot_broadcast_scalar", False):
        rewards = broadcast_row_sums(rewards, response_mask)
    elif not _from_bot_manager() and scalar_layout(rewards, response_mask):
        raise VerlBotConfigError(
            "adv_estimator=bot got one scalar reward per response (every non-zero reward sits on the last token, "
            "as verl's naive/dapo managers write it): use reward.reward_manager.name=bot (G on every token), or "
            "+algorithm.bot_broadcast_scalar=true to spread each scalar over its tokens (GRPO, population std)"
        )
    advantages = bot_advantage(rewards, response_mask, index, epsilon=epsilon, norm_by_std=norm_by_std)
    if current() is not None:  # in verl's trainer: the step's diagnostics (padding is 0)
        report_metrics({"bot/adv_abs_max": float(torch.linalg.vector_norm(advantages, float("inf")))})
    return advantages, advantages


def _from_bot_manager() -> bool:
    """True when the active batch's rewards come from verl-bot's manager with dense rewards."""
    ctx = current()
    return ctx is not None and ctx.dense_rewards
