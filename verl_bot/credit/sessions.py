"""Multi-output agent loops in the `bot` manager: one scorer call per session, token rewards per trajectory.

A verl agent loop may return several `AgentLoopOutput`s for one sample (a *session*, `{uid}_{session}`);
verl scores them in ONE `run_single` call, a batch with one row per output (`pad_sequence` layout:
each row's lengths are the `prompt_len` / `response_len` columns, not its attention mask), and copies the
last output's `reward_score` to the earlier outputs. The manager therefore:

- asks the scorer once, with `trajectories: [{"index": j, "response": text_j}, ...]` (`response` stays the
  last text, so a scorer that ignores the list still scores the session; earlier outputs then get G only);
- accepts `trajectories: [{"index": j, "local": [spans on text_j], "value": v}]` in the verdict
  (`verl_bot.credit.verdict`): S_t of trajectory j = its spans' values + v on each of its tokens;
- returns `{"token_rewards": last, "by_trajectory": {fingerprint_j: reward_score_j}}`, each trajectory's
  rewards keyed by a fingerprint of its (prompt ids, response ids); `verl_bot.hooks.v1.agent_loop_output`
  picks a row's entry by its own ids, so an output never trains on another output's rewards.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from verl_bot.credit.spans import token_char_spans
from verl_bot.credit.verdict import local_token_values

BY_TRAJECTORY = "by_trajectory"


def response_length(data: Any, row: int) -> int:
    """Valid response tokens of `row` of verl's reward batch: the agent loop's `response_len`, else (a batch
    built without it) the attention mask's count over the response columns."""
    lengths = data.non_tensor_batch.get("response_len")
    if lengths is not None:
        return int(lengths[row])
    width = data.batch["responses"].shape[-1]
    return int(data.batch["attention_mask"][row, -width:].sum())


def trajectory_ids(data: Any, row: int) -> tuple[list[int], list[int]]:
    """(prompt ids, response ids) of `row` of a multi-output reward batch (`prompt_len` / `response_len`)."""
    prompt_len = int(data.non_tensor_batch["prompt_len"][row])
    prompts, responses = data.batch["prompts"][row], data.batch["responses"][row]
    return prompts[:prompt_len].tolist(), responses[: response_length(data, row)].tolist()


def fingerprint(prompt_ids: list[int], response_ids: list[int]) -> str:
    """A trajectory's key: blake2b of its prompt ids, -1, its response ids (int64 bytes)."""
    ids = np.asarray([*prompt_ids, -1, *response_ids], dtype=np.int64)
    return hashlib.blake2b(ids.tobytes(), digest_size=16).hexdigest()


def trajectory_local(verdict: dict, index: int, token_spans: np.ndarray, text_length: int) -> np.ndarray:
    """(n,) S_t that the verdict's `trajectories` entries for trajectory `index` give its n tokens."""
    local = np.zeros(len(token_spans))
    for entry in verdict.get("trajectories") or ():
        if entry["index"] == index:
            local = local + local_token_values(entry["local"], token_spans, text_length) + entry["value"]
    return local


class Trajectory(NamedTuple):
    """One output of a session: its decoded response `text`, `token_spans` (n, 2) and fingerprint `key`."""

    text: str
    token_spans: np.ndarray
    key: str


async def session_trajectories(data: Any, tokenizer: Any) -> list[Trajectory]:
    """Every row of a multi-output reward batch as a `Trajectory` (decoded in the event loop's executor)."""
    loop = asyncio.get_running_loop()
    out = []
    for row in range(len(data)):
        prompt_ids, response_ids = trajectory_ids(data, row)
        text, spans = await loop.run_in_executor(None, token_char_spans, tokenizer, response_ids)
        out.append(Trajectory(text, spans, fingerprint(prompt_ids, response_ids)))
    return out


def trajectories_request(trajectories: list[Trajectory]) -> dict:
    """The request's `trajectories` item (empty for a single-output sample)."""
    if len(trajectories) < 2:
        return {}
    return {"trajectories": [{"index": j, "response": t.text} for j, t in enumerate(trajectories)]}


def session_reward_score(
    last: Any, trajectories: list[Trajectory], verdict: dict, form: Callable[[np.ndarray, Trajectory], Any]
) -> Any:
    """The `reward_score` of a session: the last trajectory's form `last` (its token rewards stay at the top, so
    verl's copy to earlier outputs keeps the `verl_bot.credit.dense` form valid) plus `by_trajectory`: every
    trajectory's form by fingerprint, `form(S_t of its tokens, trajectory)` for the earlier ones. A
    single-output sample's `last` is returned as it is."""
    if len(trajectories) < 2:
        return last
    by_trajectory = {
        t.key: form(trajectory_local(verdict, j, t.token_spans, len(t.text)), t)
        for j, t in enumerate(trajectories[:-1])
    }
    by_trajectory[trajectories[-1].key] = last
    token_rewards = last["token_rewards"] if isinstance(last, dict) else last
    return {"token_rewards": token_rewards, BY_TRAJECTORY: by_trajectory}


def pick_trajectory(reward_score: Any, prompt_ids: list[int], response_ids: list[int]) -> Any:
    """The `reward_score` form of the trajectory (prompt_ids, response_ids) in a session's reward_score, or the
    reward_score itself when it is not a session's. Raises KeyError when the session has no such trajectory."""
    if not isinstance(reward_score, dict) or BY_TRAJECTORY not in reward_score:
        return reward_score
    return reward_score[BY_TRAJECTORY][fingerprint(list(prompt_ids), list(response_ids))]
