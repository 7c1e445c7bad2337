"""Turn-level BoT (`algorithm.adv_estimator=turn_bot`): credit for multi-turn rollouts whose number of turns the
policy chooses, with a baseline that does not depend on the rollout's own turns (docs/ALGORITHMS.md, turn-level
credit).

For rollout i of a group (verl's `uid`, K rollouts with a generated token) with turns k = 0..T_i-1 (runs of
response-mask-1 tokens; tool replies are mask 0), r_t its token rewards (w_g * G + w_s * S_t, the `bot` manager's)
and U_{i,k} each turn's reward (the `turn_reward` stream: w_s times the turn's mean S_t):

    q_t  = r_t + sum_{k' > k(t)} gamma^(k' - k(t)) * U_{i,k'}    each generated token's return   [ours]
    m_i  = (1/L_i) * sum_t q_t                                  its rollout's mean token return  [paper: BoT's 1/L_k]
    b_i  = (1/(K-1)) * sum_{j != i} m_j                         leave-one-out bag baseline       [ours]
    var  = (1/K) * sum_j (1/L_j) * sum_t (q_t - mu)^2,  mu = (1/K) * sum_j m_j   BoT's pooled variance  [paper]
    A_t  = (q_t - b_i) / (max(sqrt(var), floor) + eps),  0 on mask-0 tokens                      [ours]

G stays on every generated token (it is in r_t), a turn's credit includes the rewards of the turns it leads to,
tool tokens get nothing. b_i is a function of the other rollouts alone, so E[grad log pi(y_t) * b_i] = 0 for every
token of rollout i whatever it chose, including how many turns it took: the centred update's expectation is the
policy gradient of E[w_g G + sum_k U_k] exactly (gamma = 1; tests/unit/test_turn_exact_gradient.py). With
gamma = 0 the returns are `bot`'s token rewards. A group whose returns are all equal, and a group of one rollout
(no other rollout to compare with), get 0; never NaN or inf.
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
DEFAULT_EPSILON = 1e-6


@dataclass(frozen=True)
class TurnBotSettings(MethodSettings, prefix="turn_bot_", label="turn-level BoT"):
    """Turn-level BoT's knobs (`+algorithm.turn_bot_<name>`; module docstring)."""

    discount: float = knob(
        1.0, bounds="[0, 1]", source="ours",
        doc="gamma of the return over the following turns; 1: the undiscounted return, 0: bot's token rewards",
    )
    epsilon: float = knob(DEFAULT_EPSILON, bounds="[0, inf)", source="ours", doc="added to the (floored) group std")
    std_floor: float = knob(0.0, bounds="[0, inf)", source="ours", doc="the std used for scaling is max(std, floor)")


@torch.no_grad()
def turn_returns(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, turn_reward: torch.Tensor, discount: float
) -> torch.Tensor:
    """q_t = r_t + sum_{k' > k(t)} gamma^(k' - k(t)) U_{k'} on generated tokens, 0 on mask-0 tokens.

    Args:
        token_level_rewards: (B, T) r_t. response_mask: (B, T). turn_reward: (B, T) the `turn_reward` stream.
        discount: gamma in [0, 1].

    Returns:
        (B, T) float64.
    """
    turns = batch_turns(response_mask, turn_reward)
    later = token_values(discounted_suffix(turns.reward, discount, start=1), turns)
    return torch.where(response_mask != 0, token_level_rewards.double() + later, 0.0)


@torch.no_grad()
def turn_bot_advantage(
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | list,
    epsilon: float = DEFAULT_EPSILON,
    norm_by_std: bool = True,
    std_floor: float = 0.0,
) -> torch.Tensor:
    """Per-token advantages from the returns q (`turn_returns`): leave-one-out bag baseline, BoT's pooled std.

    Args:
        returns: (B, T) q_t. response_mask: (B, T), nonzero on generated tokens. index: (B,) group ids (uids).
        epsilon: added to the floored std. norm_by_std: False keeps only q - b. std_floor: lower bound of the std.

    Returns:
        (B, T) float32 (float64 for float64 returns); 0 on mask-0 tokens, in a group whose valid returns are all
        equal and in a group of one rollout.
    """
    if returns.shape != response_mask.shape or returns.dim() != 2:
        raise ValueError(f"turn_bot advantage: returns {tuple(returns.shape)} and response_mask "
                         f"{tuple(response_mask.shape)} must be the same (B, T) shape")
    if index is None or len(index) != returns.shape[0]:
        raise ValueError("turn_bot advantage needs one group id (uid) per row")
    out_dtype = torch.promote_types(returns.dtype, torch.float32)
    if returns.shape[0] == 0:
        return torch.zeros_like(returns, dtype=out_dtype)
    valid = response_mask != 0
    raise_for_rows("turn_bot advantage: non-finite token rewards (NaN/inf)",
                   (~torch.isfinite(returns) & valid).any(dim=1), index)
    group = as_torch_index(index, device=returns.device)
    num_groups = int(group.max()) + 1
    lengths = valid.sum(dim=1).double()  # (B,) L_i
    has_tokens = lengths > 0
    # every sum relative to one return of the group, so that a group of equal returns gives exactly 0
    first = torch.where(has_tokens, returns.double().gather(1, valid.long().argmax(dim=1, keepdim=True))[:, 0],
                        -torch.inf)
    shift = torch.full((num_groups,), -torch.inf, dtype=torch.float64, device=returns.device)
    shift = shift.scatter_reduce(0, group, first, reduce="amax")
    shift = torch.where(torch.isfinite(shift), shift, 0.0)[group]  # (B,)
    centred = torch.where(valid, returns.double() - shift[:, None], 0.0)
    mean = centred.sum(dim=1) / lengths.clamp(min=1.0)  # (B,) m_i - shift
    within = torch.where(valid, centred - mean[:, None], 0.0).square().sum(dim=1) / lengths.clamp(min=1.0)
    rollouts = group_sum(has_tokens.double(), group, num_groups)  # (G,) K
    total = group_sum(torch.where(has_tokens, mean, 0.0), group, num_groups)  # (G,) sum_j m_j
    mu = total / rollouts.clamp(min=1.0)
    spread = torch.where(has_tokens, within + (mean - mu[group]).square(), 0.0)
    var = group_sum(spread, group, num_groups) / rollouts.clamp(min=1.0)  # (G,)
    others = (rollouts[group] - 1).clamp(min=1.0)
    baseline = (total[group] - torch.where(has_tokens, mean, 0.0)) / others  # (B,) b_i - shift
    if norm_by_std:
        scale = 1.0 / (var.sqrt().clamp(min=std_floor) + epsilon)
    else:
        scale = torch.ones_like(var)
    scale = torch.where((var > 0) & (rollouts >= 2), scale, 0.0)[group]
    advantages = (centred - baseline[:, None]) * scale[:, None]
    return torch.where(valid, advantages, 0.0).to(out_dtype)


def turn_metrics(turns_count: torch.Tensor) -> dict[str, float]:
    """`turns_per_rollout` (mean T_i over rows with a turn) and `multi_turn_share` (rows with >= 2 turns) of a
    (B,) tensor of turn counts."""
    present = turns_count[turns_count > 0].double()
    if present.numel() == 0:
        return {"turns_per_rollout": 0.0, "multi_turn_share": 0.0}
    return {"turns_per_rollout": float(present.mean()), "multi_turn_share": float((present >= 2).double().mean())}


def compute_turn_bot_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl adapter (registered as `algorithm.adv_estimator=turn_bot`): the `turn_reward` stream from the batch
    context, `TurnBotSettings` and verl's `norm_adv_by_std_in_grpo` from the `algorithm` config. Reports
    `turn_bot/turns_per_rollout`, `turn_bot/multi_turn_share` and `turn_bot/adv_abs_max`.

    Args:
        token_level_rewards: (B, T) r_t. response_mask: (B, T). index: (B,) uids.

    Returns:
        (advantages, returns): (B, T) each; returns are the q_t.
    """
    settings = TurnBotSettings.from_config(config)
    (turn_reward,) = active_streams("turn_bot", STREAMS, response_mask).values()
    returns = turn_returns(token_level_rewards, response_mask, turn_reward, settings.discount)
    advantages = turn_bot_advantage(
        returns, response_mask, index, epsilon=settings.epsilon,
        norm_by_std=bool((config or {}).get("norm_adv_by_std_in_grpo", True)), std_floor=settings.std_floor,
    ).to(token_level_rewards.dtype)
    counts = batch_turns(response_mask, turn_reward).count
    report_metrics({f"turn_bot/{k}": v for k, v in turn_metrics(counts).items()}
                   | {"turn_bot/adv_abs_max": float(advantages.abs().max()) if advantages.numel() else 0.0})
    return advantages, returns.to(token_level_rewards.dtype)


def startup_problem(config: Any, train_files: list[str]) -> str | None:
    """Why `adv_estimator=turn_bot` cannot run with verl's composed `config` (one line), or None: fewer than 2
    rollouts per prompt (`actor_rollout_ref.rollout.n`), where the leave-one-out baseline has no other rollout and
    every advantage would be 0. `train_files` is not needed."""
    n = int(((config.get("actor_rollout_ref") or {}).get("rollout") or {}).get("n", 1) or 1)
    if n >= 2:
        return None
    return (f"adv_estimator=turn_bot with actor_rollout_ref.rollout.n={n}: its leave-one-out baseline needs at "
            "least 2 rollouts per prompt (a group of one gets advantage 0); set actor_rollout_ref.rollout.n >= 2")
