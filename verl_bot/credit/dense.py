"""Dense per-token rewards: the `reward_score` forms of the `bot` manager and how they become `rm_scores` rows.

verl's reward loop keeps ONE scalar per response and writes it on the last response token; the `bot` manager returns
`reward_score` as a list of floats, one per response token, or `{"token_rewards": [...], "streams": {...}}`
(`verl_bot.credit.streams`). Here: telling the forms apart (`is_dense`, `split_reward_score`) and one response's
checked row (`dense_row`: a length that does not match the response is a `VerlBotConfigError`, which stops the run),
which the trainer adapters store (`verl_bot.training.rows`). The data flow: docs/architecture.md, section Dense
plumbing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from verl_bot.errors import VerlBotConfigError


def dense_row(reward_score: Sequence[float], length: int) -> torch.Tensor:
    """Validate one response's token rewards and return them as a (length,) float32 tensor."""
    row = torch.as_tensor(list(reward_score), dtype=torch.float32)
    if row.dim() != 1 or row.numel() != length:
        raise VerlBotConfigError(
            f"verl-bot dense reward: got {row.numel()} token rewards (shape {tuple(row.shape)}) for a response of "
            f"{length} tokens (a reward manager's vector for another response, or cut or padded)"
        )
    return row


def is_dense(reward_score: Any) -> bool:
    """True when a reward manager returned per-token rewards instead of a scalar: a list/tuple/1-D array, or
    `{"token_rewards": [...], "streams": {...}}` (the form with named streams, see `verl_bot.credit.streams`)."""
    if isinstance(reward_score, dict):
        return "token_rewards" in reward_score
    return isinstance(reward_score, list | tuple | np.ndarray | torch.Tensor) and np.ndim(reward_score) == 1


def split_reward_score(reward_score: Any) -> tuple[Sequence[float], dict[str, Sequence[float]]]:
    """(token rewards, named streams) of a dense `reward_score`; streams are {} for the plain list form."""
    if isinstance(reward_score, dict):
        return reward_score["token_rewards"], dict(reward_score.get("streams") or {})
    return reward_score, {}
