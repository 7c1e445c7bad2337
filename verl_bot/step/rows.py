"""A dense `reward_score` (the `bot` manager's token rewards, `verl_bot.credit.dense`) as the rows a trainer stores.

Both trainers store one `rm_scores` row per trajectory (v1: `AgentLoopOutput.as_dict`, unpadded;
legacy: `AgentLoopWorker._postprocess`, right-padded) and each named stream as a field `bot_stream_<name>`.
"""

from __future__ import annotations

from typing import Any

import torch

from verl_bot.credit.dense import dense_row, split_reward_score
from verl_bot.credit.sessions import BY_TRAJECTORY, pick_trajectory
from verl_bot.credit.streams import stream_fields
from verl_bot.errors import FATAL_KEY, VerlBotConfigError

# on each row a trainer adapter stored from a dense `reward_score` (v1: in its extra fields; legacy: a column): the
# advantage step checks that the adapter's hook fired (`went_past_dense_rows`)
DENSE_MARK = "verl_bot_dense_row"
SCALAR_ROWS = "the bot manager's token rewards would reach the estimator as one scalar per response"  # past the hook


def went_past_dense_rows(dense_rewards: bool, rows: list[dict]) -> bool:
    """True when a step of the `bot` manager's dense rewards (`dense_rewards`) has rows and none carries
    `DENSE_MARK`: they went past the adapter's hook, with one scalar per response."""
    return dense_rewards and bool(rows) and not any(row.get(DENSE_MARK) for row in rows)


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
    """`rm_scores` (length,) and the `bot_stream_<name>` fields of a dense `reward_score`; `ids` (prompt ids,
    response ids) pick a multi-output session's entry (`own_reward_score`).

    On a length mismatch or a missing entry: zero rows instead, and `extra_fields` (a copy) whose
    `reward_extra_info` carries the fatal marker with the error's message.
    """
    token_rewards, streams = split_reward_score(reward_score)
    try:
        token_rewards, streams = split_reward_score(own_reward_score(reward_score, *ids))
        return {"rm_scores": dense_row(token_rewards, length), **stream_fields(streams, length)}
    except VerlBotConfigError as exc:
        zeros = [0.0] * length
        info = {**(extra_fields.get("reward_extra_info") or {}), FATAL_KEY: str(exc), "scorer_failed": 1.0}
        return {
            "rm_scores": torch.zeros(length, dtype=torch.float32),
            **stream_fields(dict.fromkeys(streams, zeros), length),
            "extra_fields": {**extra_fields, "reward_extra_info": info},
        }
