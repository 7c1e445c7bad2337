"""The per-turn-index baseline, kept as the BIASED REFERENCE (`algorithm.adv_estimator=turn_index_biased`).

MT-GRPO's turn-level normalisation (Zeng et al., arXiv 2505.11821: normalise the turn reward among the group's
turns of the same index, the outcome among the group's outcomes) carried to T turns with a return over the
following turns, as verl's RFC #7244 describes it. For rollout i with turns k = 0..T_i-1, turn rewards U_{i,k}
(the `turn_reward` stream) and outcome part O_i (the mean over its generated tokens of r_t - turn_reward: w_g * G):

    Z_k(U)_i = (U_{i,k} - mean_{j: T_j > k} U_{j,k}) / (std_{j: T_j > k} U_{j,k} + eps)   per turn index  [paper]
    Z(O)_i   = (O_i - mean_j O_j) / (std_j O_j + eps)                                                  [paper]
    A_t      = Z(O)_i + sum_{k'=k(t)}^{T_i - 1} gamma^(k' - k(t)) * Z_k'(U)_i, 0 on mask-0 tokens   [ours: T turns]

as verl's `grpo` standardises (sample std; a set of one has mean 0 and std 1; `norm_adv_by_std_in_grpo=false`
centres only). Its baseline for the tokens of turn k is sum_{k'=k}^{T_i-1} gamma^(k'-k) * mean U_{.,k'}: a sum
whose number of terms is the rollout's OWN stopping turn, so it depends on the actions it is a baseline for.
Whenever the policy controls termination the update is biased, in expectation by
-sum_k mean_k * grad P(T > k) (gamma = 1, population means): a hidden penalty (or bonus) of the mean intermediate
reward on every "take another turn" (tests/unit/test_turn_exact_gradient.py computes it exactly). It is here to
measure that bias against `turn_bot` through verl's trainer, not to train with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from verl.utils.groupwise import as_torch_index

from verl_bot.advantage.groups import group_sum, raise_for_rows
from verl_bot.advantage.turn_returns import batch_turns, discounted_suffix, token_values
from verl_bot.credit.context import report_metrics
from verl_bot.credit.streams import active_streams
from verl_bot.knobs import MethodSettings, knob

STREAMS = ("turn_reward",)


@dataclass(frozen=True)
class TurnIndexSettings(MethodSettings, prefix="turn_index_biased_", label="per-turn-index reference"):
    """The per-turn-index reference's knobs (`+algorithm.turn_index_biased_<name>`; module docstring)."""

    discount: float = knob(1.0, bounds="[0, 1]", source="ours", doc="gamma of the sum over the following turns")
    epsilon: float = knob(1e-6, bounds="[0, inf)", source="ours", doc="added to each std, as verl's grpo")


def standardise(values: torch.Tensor, member: torch.Tensor, group: torch.Tensor, num_groups: int, epsilon: float,
                norm_by_std: bool) -> torch.Tensor:
    """verl's GRPO standardisation of `values` within groups, over the members only.

    Args:
        values: (N,) float64. member: (N,) bool, the values that take part. group: (N,) group ids.
        num_groups: number of groups. epsilon: added to the sample std. norm_by_std: False centres only.

    Returns:
        (N,) float64 (x - mean) / (std + eps) on members (a group of one member: mean 0, std 1), 0 elsewhere.
    """
    weight = member.double()
    count = group_sum(weight, group, num_groups)
    mean = group_sum(values * weight, group, num_groups) / count.clamp(min=1.0)
    square = group_sum((values - mean[group]).square() * weight, group, num_groups)
    std = (square / (count - 1).clamp(min=1.0)).sqrt()
    mean, std = torch.where(count > 1, mean, 0.0), torch.where(count > 1, std, 1.0)
    z = values - mean[group]
    if norm_by_std:
        z = z / (std + epsilon)[group]
    return torch.where(member, z, 0.0)


@torch.no_grad()
def turn_index_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    turn_reward: torch.Tensor,
    index: np.ndarray | list,
    discount: float = 1.0,
    epsilon: float = 1e-6,
    norm_by_std: bool = True,
) -> torch.Tensor:
    """The per-turn-index reference's advantages (module docstring).

    Args:
        token_level_rewards: (B, T) r_t. response_mask: (B, T). turn_reward: (B, T) the `turn_reward` stream.
        index: (B,) group ids (uids). discount: gamma. epsilon: added to each std. norm_by_std: False centres only.

    Returns:
        (B, T) float32; 0 on mask-0 tokens.
    """
    if not (token_level_rewards.shape == response_mask.shape == turn_reward.shape) or response_mask.dim() != 2:
        raise ValueError("turn_index_biased advantage: rewards, response_mask and turn_reward must be one (B, T) shape")
    if index is None or len(index) != response_mask.shape[0]:
        raise ValueError("turn_index_biased advantage needs one group id (uid) per row")
    if response_mask.shape[0] == 0:
        return torch.zeros_like(token_level_rewards, dtype=torch.float32)
    valid = response_mask != 0
    raise_for_rows("turn_index_biased advantage: non-finite rewards (NaN/inf)",
                   ((~torch.isfinite(token_level_rewards) | ~torch.isfinite(turn_reward)) & valid).any(dim=1), index)
    turns = batch_turns(response_mask, turn_reward)
    lengths = valid.sum(dim=1).double()
    outcome = torch.where(valid, token_level_rewards.double() - turn_reward.double(), 0.0).sum(dim=1)
    outcome = outcome / lengths.clamp(min=1.0)  # (B,) O_i
    group = as_torch_index(index, device=response_mask.device)
    num_groups = int(group.max()) + 1
    z_outcome = standardise(outcome, lengths > 0, group, num_groups, epsilon, norm_by_std)
    batch, width = turns.reward.shape
    flat_group = (group[:, None] * width + torch.arange(width, device=group.device)[None, :]).flatten()
    z_turns = standardise(turns.reward.flatten(), turns.exists.flatten(), flat_group, num_groups * width, epsilon,
                          norm_by_std).view(batch, width)
    per_turn = z_outcome[:, None] + discounted_suffix(z_turns, discount, start=0)
    return token_values(per_turn, turns).to(torch.float32)


def compute_turn_index_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl adapter (registered as `algorithm.adv_estimator=turn_index_biased`): the `turn_reward` stream from the
    batch context, `TurnIndexSettings` and verl's `norm_adv_by_std_in_grpo`. Reports
    `turn_index_biased/adv_abs_max`.

    Returns:
        (advantages, returns): the same (B, T) tensor, as verl's grpo.
    """
    settings = TurnIndexSettings.from_config(config)
    (turn_reward,) = active_streams("turn_index_biased", STREAMS, response_mask).values()
    advantages = turn_index_advantage(
        token_level_rewards, response_mask, turn_reward, index, discount=settings.discount, epsilon=settings.epsilon,
        norm_by_std=bool((config or {}).get("norm_adv_by_std_in_grpo", True)),
    ).to(token_level_rewards.dtype)
    report_metrics({"turn_index_biased/adv_abs_max": float(advantages.abs().max()) if advantages.numel() else 0.0})
    return advantages, advantages
