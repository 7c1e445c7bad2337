"""Multi-output agent loops in the `bot` manager: one scorer call per session, token rewards per output.

verl scores a session's outputs (`{uid}_{session}`) in ONE `run_single` call, a batch with one row per output
(`pad_sequence` layout: each row's lengths are its `prompt_len` / `response_len` columns, not its attention mask),
and copies the last output's `reward_score` to the earlier ones. Here: the rows' ids, the request's `trajectories`
(`trajectories_request`), the reward form keyed by each output's fingerprint (`session_reward_score`) and the pick
of a row's own entry (`pick_trajectory`, used by `verl_bot.training.rows`), so an output never trains on another
output's rewards. The request and verdict: docs/REWARD_API.md, section Several outputs per sample.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

BY_TRAJECTORY = "by_trajectory"


def response_length(data: Any, row: int) -> int:
    """Valid response tokens of `row` of verl's reward batch: the agent loop's `response_len`, else (a batch
    built without it) the attention mask's count over the response columns."""
    lengths = data.non_tensor_batch.get("response_len")
    if lengths is not None:
        return int(lengths[row])
    width = data.batch["responses"].shape[-1]
    return int(data.batch["attention_mask"][row, -width:].sum())


def response_ids(data: Any, row: int) -> list[int]:
    """The valid response ids of `row` of verl's reward batch (`response_length`)."""
    return data.batch["responses"][row][: response_length(data, row)].tolist()


def trajectory_ids(data: Any, row: int) -> tuple[list[int], list[int]]:
    """(prompt ids, response ids) of `row` of a multi-output reward batch (`prompt_len` / `response_len`)."""
    prompt_len = int(data.non_tensor_batch["prompt_len"][row])
    return data.batch["prompts"][row][:prompt_len].tolist(), response_ids(data, row)


def fingerprint(prompt_ids: list[int], response_ids: list[int]) -> str:
    """A trajectory's key: blake2b of its prompt ids, -1, its response ids (int64 bytes)."""
    ids = np.asarray([*prompt_ids, -1, *response_ids], dtype=np.int64)
    return hashlib.blake2b(ids.tobytes(), digest_size=16).hexdigest()


def trajectories_request(texts: Sequence[str]) -> dict:
    """The request's `trajectories` item of a session's response texts (empty for a single-output sample)."""
    if len(texts) < 2:
        return {}
    return {"trajectories": [{"index": j, "response": text} for j, text in enumerate(texts)]}


def session_reward_score(forms: Sequence[Any], keys: Sequence[str | None]) -> Any:
    """The `reward_score` of a rollout from each output's own form (the last output last) and fingerprint.

    A single output's form is returned as it is. A session's is the last output's token rewards at the top (so
    verl's copy to the earlier outputs keeps the `verl_bot.credit.dense` form valid) plus `by_trajectory`: every
    output's form by its fingerprint.
    """
    if len(forms) < 2:
        return forms[-1]
    last = forms[-1]
    token_rewards = last["token_rewards"] if isinstance(last, dict) else last
    return {"token_rewards": token_rewards, BY_TRAJECTORY: dict(zip(keys, forms, strict=True))}


def pick_trajectory(reward_score: Any, prompt_ids: list[int], response_ids: list[int]) -> Any:
    """The `reward_score` form of the trajectory (prompt_ids, response_ids) in a session's reward_score, or the
    reward_score itself when it is not a session's. Raises KeyError when the session has no such trajectory."""
    if not isinstance(reward_score, dict) or BY_TRAJECTORY not in reward_score:
        return reward_score
    return reward_score[BY_TRAJECTORY][fingerprint(list(prompt_ids), list(response_ids))]
