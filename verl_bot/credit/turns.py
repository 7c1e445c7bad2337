"""The turns of a multi-turn response (verl's `ToolAgentLoop`): where they lie, and a scorer's value per turn.

A multi-turn response interleaves what the policy generated (response mask 1: each assistant turn, its EOS included)
with context it did not (mask 0: tool replies, role headers); a new turn starts at each 0 -> 1 edge of the mask.
Pure functions (numpy, no verl): each token's turn, the request's `turns` layout, a verdict's turn values on tokens,
turn means (the `turn_reward` stream), the mask and verl's multi-turn fields out of what the reward worker gets
(carried there by `verl_bot.hooks.response_mask`). The request and verdict: docs/REWARD_API.md, section
Multi-turn responses (`turns`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from verl_bot.errors import VerlBotConfigError

ASSISTANT, CONTEXT = "assistant", "context"
MASK_KEY = "verl_bot_response_mask"  # where verl_bot.hooks.response_mask puts the mask in an output's extra_fields
VERL_TURN_FIELDS = ("turn_scores", "tool_rewards")  # what verl's ToolAgentLoop adds to every output's extra_fields


def turn_ids(mask: Sequence[int]) -> np.ndarray:
    """The turn of every token.

    Args:
        mask: (n,) response mask, 1 on generated tokens, 0 on context tokens.

    Returns:
        (n,) int64: turn k for the tokens of the k-th run of 1s and for the 0s after it (0s before the first 1:
        turn 0).
    """
    return np.maximum(np.cumsum(_turn_starts(mask)) - 1, 0).astype(np.int64)


def _turn_starts(mask: Sequence[int]) -> np.ndarray:
    """(n,) bool: True on the first token of each run of 1s of the (n,) response mask."""
    m = np.asarray(mask, dtype=np.int64) != 0
    return m & ~np.concatenate([[False], m[:-1]])


def turn_count(mask: Sequence[int]) -> int:
    """Number of assistant turns (runs of 1s) in `mask` ((n,) response mask)."""
    return int(_turn_starts(mask).sum())


def has_context(mask: Sequence[int]) -> bool:
    """True when the (n,) response mask has a 0: the response holds text the policy did not generate."""
    return bool(len(mask)) and not bool(np.all(np.asarray(mask) != 0))


def turn_layout(mask: Sequence[int], token_spans: np.ndarray) -> list[dict]:
    """The request's `turns`: maximal runs of tokens of one turn and role, as characters of the response text.

    Args:
        mask: (n,) response mask.
        token_spans: (n, 2) `[start, end)` characters of each token (`spans.token_char_spans`), starting at 0.

    Returns:
        `[{"turn", "role", "start", "end"}, ...]` in order; consecutive runs share their edge (run r starts where
        run r-1 ends), so the runs cover the text from 0 to the last token's end. A run of tokens that produce no
        text (an EOS alone) has start == end.
    """
    m = np.asarray(mask, dtype=np.int64) != 0
    turns = turn_ids(mask)
    ends = [i + 1 for i in range(len(m)) if i + 1 == len(m) or m[i + 1] != m[i] or turns[i + 1] != turns[i]]
    layout, first, start = [], 0, 0
    for stop in ends:
        end = max(start, int(token_spans[first:stop, 1].max()))
        layout.append({"turn": int(turns[first]), "role": ASSISTANT if m[first] else CONTEXT, "start": start,
                       "end": end})
        first, start = stop, end
    return layout


def turn_token_values(turns: Sequence[dict], mask: Sequence[int]) -> np.ndarray:
    """S^turn_t: each verdict turn value on every mask-1 token of its turn (values of one turn add up).

    Args:
        turns: the verdict's `[{"turn": k, "value": v}, ...]`, each k a turn of `mask` (`verdict.validate_verdict`).
        mask: (n,) response mask.

    Returns:
        (n,) float64; 0 on mask-0 tokens.
    """
    ids = turn_ids(mask)
    per_turn = np.zeros(int(ids.max()) + 1 if len(ids) else 0, dtype=np.float64)
    for entry in turns:
        per_turn[int(entry["turn"])] += float(entry["value"])
    values = per_turn[ids] if len(ids) else np.zeros(0, dtype=np.float64)
    return np.where(np.asarray(mask) != 0, values, 0.0)


def turn_means(values: Sequence[float], mask: Sequence[int] | None) -> np.ndarray:
    """Each generated token's turn mean of `values`: the mean of `values` over the mask-1 tokens of its turn.

    Args:
        values: (n,) a value per token (e.g. S_t).
        mask: (n,) response mask, or None: every token generated (one turn).

    Returns:
        (n,) float64; 0 on mask-0 tokens.
    """
    values = np.asarray(values, dtype=np.float64)
    generated = np.ones(len(values), dtype=bool) if mask is None else np.asarray(mask) != 0
    if not generated.any():
        return np.zeros(len(values), dtype=np.float64)
    ids = turn_ids(generated.astype(np.int64))
    sums = np.bincount(ids[generated], weights=values[generated], minlength=int(ids.max()) + 1)
    counts = np.bincount(ids[generated], minlength=int(ids.max()) + 1)
    return np.where(generated, sums[ids] / np.maximum(counts[ids], 1), 0.0)


def rollout_mask(fields: dict | None, num_turns: int | None, length: int) -> np.ndarray | None:
    """The response mask the hook carried in `fields` (an output's `extra_fields` as the reward worker gets them,
    `tool_extra_fields`), as (length,) int64; None for a single-turn rollout that has none.

    `VerlBotConfigError` (the run must stop: `verl_bot.errors`) for a multi-turn rollout (verl's `num_turns` > 2,
    or ToolAgentLoop's fields) without one, or a mask whose length is not the response's."""
    fields = fields if isinstance(fields, dict) else {}
    mask = fields.get(MASK_KEY)
    if mask is None:
        if (num_turns is not None and int(num_turns) > 2) or any(key in fields for key in VERL_TURN_FIELDS):
            raise VerlBotConfigError(
                "verl-bot: multi-turn rollout reached the bot manager without its response_mask "
                "(AgentLoopWorker._compute_score hook missing)"
            )
        return None
    if len(mask) != length:
        raise VerlBotConfigError(f"verl-bot: the response mask has {len(mask)} tokens, the response {length}")
    return np.asarray(mask, dtype=np.int64)


def multi_turn_info(fields: dict | None, num_turns: int | None) -> dict:
    """verl's multi-turn `extra_info` of a ToolAgentLoop rollout, as verl's naive manager passes it: `num_turns`,
    `turn_scores`, `tool_rewards` (plain ints/floats); {} for any other rollout."""
    fields = fields if isinstance(fields, dict) else {}
    if not any(key in fields for key in VERL_TURN_FIELDS):
        return {}
    info = {key: [float(v) for v in fields.get(key) or []] for key in VERL_TURN_FIELDS}
    return {"num_turns": int(num_turns) if num_turns is not None else None, **info}


def multi_turn_enabled(config) -> bool:
    """True for a multi-turn run (`actor_rollout_ref.rollout.multi_turn.enable=true`: responses hold tool replies)."""
    rollout = (config.get("actor_rollout_ref") or {}).get("rollout") or {}
    return bool((rollout.get("multi_turn") or {}).get("enable", False))


def turn_request(mask: np.ndarray | None, token_spans: np.ndarray) -> dict:
    """The request's `{"turns": turn_layout(...)}` for a response with context tokens; {} for any other."""
    return {"turns": turn_layout(mask, token_spans)} if mask is not None and has_context(mask) else {}
