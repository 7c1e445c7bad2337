"""Dense per-token rewards: the `reward_score` forms of the `bot` manager and how they become `rm_scores` rows.

verl's reward loop keeps ONE scalar per response: a reward manager's
`run_single` returns `{"reward_score": float, ...}` and verl writes that float
on the last response token. The `bot` reward manager instead returns
`reward_score` as a list of floats, one per response token (or, with named
streams, `{"token_rewards": [...], "streams": {...}}`, see `verl_bot.credit.streams`),
and these pieces turn it into the `rm_scores` row -> `token_level_scores` ->
`token_level_rewards` on the two paths verl 0.9.1 has:

1. reward computed inside the agent loop (the default): the wrapper of
   `AgentLoopOutput.as_dict` in `verl_bot.hooks.v1.agent_loop_output` stores the
   vector as the trajectory's `rm_scores` (`dense_row`);
2. reward computed by a colocated reward model: verl calls the manager class's
   `assemble_rm_scores`, a classmethod made to be overridden, which writes the
   vectors with `assemble_dense_rm_scores` (no patch). verl-bot refuses that
   path at start-up (`verl_bot.hooks.validate_config`): it bypasses the scorers.

A length that does not match the response is a configuration error
(`VerlBotConfigError`): it stops the run (see `verl_bot.errors`).
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


def assemble_dense_rm_scores(data: Any, scores: list) -> torch.Tensor:
    """Write per-response token rewards into a right-padded `rm_scores`.

    Args:
        data: verl DataProto with `prompts` (B, P), `responses` (B, T), `attention_mask` (B, P+T).
        scores: B entries, each a sequence of token rewards of that response's valid length.

    Returns:
        rm_scores: (B, T) float32, 0 on padding.
    """
    prompt_length = data.batch["prompts"].size(1)
    valid_lengths = data.batch["attention_mask"][:, prompt_length:].sum(dim=1).tolist()
    rm_scores = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
    for i, (score, length) in enumerate(zip(scores, valid_lengths, strict=True)):
        rm_scores[i, :length] = dense_row(split_reward_score(score)[0], length)
    return rm_scores
