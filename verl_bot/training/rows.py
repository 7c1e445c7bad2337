"""A dense `reward_score` (the `bot` manager's token rewards, `verl_bot.credit.dense`) as the rows a trainer stores,
and the check that they reach the advantage step as stored.

Both trainers store one `rm_scores` row per trajectory (v1: `AgentLoopOutput.as_dict`, unpadded; legacy:
`AgentLoopWorker._postprocess`, right-padded) and each named stream as a field `bot_stream_<name>`. Each dense row
carries `DENSE_MARK` (v1: in its extra fields; legacy: a column): the checksum of its token rewards as the reward
loop produced them. The advantage step (`dense_row_problem`) stops a run none of whose rows carries it (the
adapter's hook never fired: one scalar per response) or one in which a row's token rewards no longer match it (a
data plane that dropped or mangled them: a batch class that hands out copies and loses an in-place write).
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import torch

from verl_bot.credit.dense import dense_row, split_reward_score
from verl_bot.credit.sessions import BY_TRAJECTORY, pick_trajectory
from verl_bot.credit.streams import stream_fields
from verl_bot.errors import FATAL_KEY, VerlBotConfigError

DENSE_MARK = "verl_bot_dense_row"
SCALAR_ROWS = "the bot manager's token rewards would reach the estimator as one scalar per response"  # past the hook


def row_checksum(rewards: torch.Tensor) -> str:
    """The checksum of one row's token rewards (n,): its length and the CRC-32 of their float32 bytes, e.g.
    "18:9c2f1a07" (it catches a row dropped, cut, shifted or changed on the way; no guard against an adversary)."""
    array = np.ascontiguousarray(rewards.detach().cpu().numpy(), dtype=np.float32)
    return f"{array.size:x}:{zlib.crc32(array):08x}"


def went_past_dense_rows(dense_rewards: bool, rows: list[dict]) -> bool:
    """True when a step of the `bot` manager's dense rewards (`dense_rewards`) has rows and none carries
    `DENSE_MARK`: they went past the adapter's hook, with one scalar per response."""
    return dense_rewards and bool(rows) and not any(row.get(DENSE_MARK) for row in rows)


def changed_rows(rows: list[dict], rewards: list[torch.Tensor]) -> list[int]:
    """The indexes of the rows carrying `DENSE_MARK` whose token rewards `rewards[i]` (n_i,) no longer match it."""
    return [i for i, (row, values) in enumerate(zip(rows, rewards, strict=True))
            if isinstance(row.get(DENSE_MARK), str) and row[DENSE_MARK] != row_checksum(values)]


def changed_message(row: dict, index: int, values: torch.Tensor) -> str:
    """The one line that stops a run whose row `index` reached the advantage step with other token rewards."""
    return (
        f"verl-bot: the token rewards of row {index} (uid {row.get('uid', '?')}, data_source "
        f"{row.get('data_source', '?')}, {values.numel()} tokens) changed between the reward loop and the advantage "
        f"step (checksum {row_checksum(values)}, stored {row[DENSE_MARK]}): the trainer's batch dropped or "
        "mangled them (a write into a copy of the field?); the advantages would not be the estimator's"
    )


def own_reward_score(reward_score: Any, prompt_ids: list[int], response_ids: list[int]) -> Any:
    """This trajectory's entry of a session's `reward_score` (the reward_score itself otherwise).

    Raises VerlBotConfigError when the session has no rewards for these ids."""
    try:
        return pick_trajectory(reward_score, prompt_ids, response_ids)
    except KeyError:
        raise VerlBotConfigError(
            f"verl-bot: no token rewards for a trajectory of {len(response_ids)} response tokens in its "
            f"multi-output session (ids changed after scoring; {len(reward_score[BY_TRAJECTORY])} scored)"
        ) from None


def dense_fields(
    reward_score: Any, length: int, extra_fields: dict, ids: tuple[list[int], list[int]] = ((), ())
) -> dict[str, Any]:
    """`rm_scores` (length,), the `bot_stream_<name>` fields of a dense `reward_score` and the row's `DENSE_MARK`
    (its checksum); `ids` (prompt ids, response ids) pick a multi-output session's entry (`own_reward_score`).

    On a length mismatch or a missing entry: zero rows instead, and `extra_fields` (a copy) whose
    `reward_extra_info` carries the fatal marker with the error's message.
    """
    token_rewards, streams = split_reward_score(reward_score)
    try:
        token_rewards, streams = split_reward_score(own_reward_score(reward_score, *ids))
        row = dense_row(token_rewards, length)
        return {"rm_scores": row, **stream_fields(streams, length), DENSE_MARK: row_checksum(row)}
    except VerlBotConfigError as exc:
        zeros = [0.0] * length
        info = {**(extra_fields.get("reward_extra_info") or {}), FATAL_KEY: str(exc), "scorer_failed": 1.0}
        return {
            "rm_scores": torch.zeros(length, dtype=torch.float32),
            **stream_fields(dict.fromkeys(streams, zeros), length),
            "extra_fields": {**extra_fields, "reward_extra_info": info},
        }
