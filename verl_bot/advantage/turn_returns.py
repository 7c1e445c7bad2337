"""The turns of a batch of multi-turn responses as tensors, and each token's return over the following turns.

Shared by the turn-level estimators (`verl_bot.advantage.turn_bot`, `verl_bot.advantage.turn_index`). A turn is a
maximal run of response-mask-1 tokens of a row (what the policy generated between two tool replies; the rule of
`verl_bot.credit.turns`), numbered from 0; mask-0 tokens (tool replies, role headers, padding) belong to no turn.
A turn's reward is the `turn_reward` stream's mean over the turn's tokens (`verl_bot.credit.streams`: w_s times
the turn's mean S_t, in r_t's units).
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Turns(NamedTuple):
    """The turns of a (B, T) batch; K = the largest number of turns of a row (at least 1).

    turn: (B, T) int64, each token's turn, -1 on mask-0 tokens.
    count: (B,) int64, each row's number of turns T_i.
    reward: (B, K) float64, each turn's reward U_{i,k} (0 past a row's last turn).
    """

    turn: torch.Tensor
    count: torch.Tensor
    reward: torch.Tensor

    @property
    def exists(self) -> torch.Tensor:
        """(B, K) bool: turn k of row i exists (k < T_i)."""
        return torch.arange(self.reward.shape[1], device=self.count.device)[None, :] < self.count[:, None]


def batch_turns(response_mask: torch.Tensor, turn_reward: torch.Tensor) -> Turns:
    """The turns of every row and their rewards.

    Args:
        response_mask: (B, T), nonzero on the tokens the policy generated.
        turn_reward: (B, T) the `turn_reward` stream (its value on each generated token).

    Returns:
        `Turns`.
    """
    generated = response_mask != 0
    previous = torch.zeros_like(generated)
    previous[:, 1:] = generated[:, :-1]
    starts = generated & ~previous
    turn = torch.where(generated, starts.long().cumsum(dim=1) - 1, -1)
    count = starts.long().sum(dim=1)
    width = max(int(count.max()) if count.numel() else 0, 1)
    slot = turn.clamp(min=0)
    weight = generated.double()
    sums = torch.zeros(turn.shape[0], width, dtype=torch.float64, device=turn.device)
    sums.scatter_add_(1, slot, torch.where(generated, turn_reward.double(), 0.0))
    tokens = torch.zeros_like(sums).scatter_add_(1, slot, weight)
    return Turns(turn, count, torch.where(tokens > 0, sums / tokens.clamp(min=1.0), 0.0))


def discounted_suffix(values: torch.Tensor, discount: float, start: int) -> torch.Tensor:
    """sum_{k' >= k + start} discount^(k' - k) * values[:, k'] for every k: the return over turns.

    Args:
        values: (B, K) a value per turn (0 past a row's last turn).
        discount: gamma in [0, 1]; 0 ** 0 is 1 (a turn's own value keeps weight 1 when `start` is 0).
        start: 0 (from turn k on) or 1 (the turns after k).

    Returns:
        (B, K) float64.
    """
    out = torch.zeros_like(values, dtype=torch.float64)
    running = torch.zeros(values.shape[0], dtype=torch.float64, device=values.device)  # sum over k' > k
    for k in range(values.shape[1] - 1, -1, -1):
        out[:, k] = running if start == 1 else values[:, k].double() + running
        running = discount * (values[:, k].double() + running)
    return out


def token_values(per_turn: torch.Tensor, turns: Turns) -> torch.Tensor:
    """Each generated token's value of its turn: (B, K) per-turn values -> (B, T) float64, 0 on mask-0 tokens."""
    gathered = per_turn.double().gather(1, turns.turn.clamp(min=0))
    return torch.where(turns.turn >= 0, gathered, 0.0)
