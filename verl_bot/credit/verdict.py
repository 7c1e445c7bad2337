"""The verdict of a scorer for one response (docs/REWARD_API.md item) and its composition into token rewards.

A verdict is the plain dict a reward server returns per item:

    {"global": {"score": G, "parts": {...}}, "local": [{"start", "end", "value"}, ...],
     "info": {...}, "flags": [...], "error": None | "message"}

Token rewards (docs/ALGORITHMS.md, Eq. 4): `r_t = w_g * G + w_s * S_t`: G on every
response token, S_t the local signal of the characters token t produced.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from verl_bot.credit.spans import char_values, token_local_values


class InvalidVerdict(ValueError):
    """A scorer answered with something that is not a REWARD_API verdict (or holds NaN/inf)."""


def _finite(value: Any, what: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise InvalidVerdict(f"{what} is not a number: {value!r}") from exc
    if not math.isfinite(number):
        raise InvalidVerdict(f"{what} is not finite: {value!r}")
    return number


def _turns(verdict: dict, turn_count: int) -> list[dict]:
    """The verdict's `turns` (`[{"turn": k, "value": v}]`, each k in 0..turn_count-1), normalised."""
    turns = verdict.get("turns") or []
    if not isinstance(turns, list):
        raise InvalidVerdict("'turns' must be a list of {turn, value}")
    out = []
    for k, entry in enumerate(turns):
        if not isinstance(entry, dict) or isinstance(entry.get("turn"), bool) or not isinstance(entry.get("turn"), int):
            raise InvalidVerdict(f"turns[{k}] must be an object with an integer 'turn', got {entry!r}")
        if not 0 <= entry["turn"] < turn_count:
            raise InvalidVerdict(f"turns[{k}].turn={entry['turn']}; the response has turns 0..{turn_count - 1}")
        out.append({"turn": entry["turn"], "value": _finite(entry.get("value"), f"turns[{k}].value")})
    return out


def _spans(local: Any, what: str = "local") -> list[dict]:
    """REWARD_API local spans (`[{"start", "end", "value"}]`), normalised and sorted."""
    local = local or []
    if not isinstance(local, list):
        raise InvalidVerdict(f"'{what}' must be a list of spans")
    spans = []
    for span in local:
        if not isinstance(span, dict):
            raise InvalidVerdict(f"{what} span must be an object, got {span!r}")
        start, end = int(span.get("start", -1)), int(span.get("end", -1))
        if start < 0 or end < start:
            raise InvalidVerdict(f"{what} span has bad offsets: {span!r}")
        spans.append({"start": start, "end": end, "value": _finite(span.get("value"), f"{what} span value")})
    return sorted(spans, key=lambda s: (s["start"], s["end"]))


def _trajectories(verdict: dict, trajectory_count: int) -> list[dict]:
    """The verdict's `trajectories` (`[{"index": j, "local": [...], "value": v}]`, each j in 0..count-1)."""
    entries = verdict.get("trajectories") or []
    if not isinstance(entries, list):
        raise InvalidVerdict("'trajectories' must be a list of {index, local, value}")
    out = []
    for k, entry in enumerate(entries):
        index = entry.get("index") if isinstance(entry, dict) else None
        if isinstance(index, bool) or not isinstance(index, int):
            raise InvalidVerdict(f"trajectories[{k}] must be an object with an integer 'index', got {entry!r}")
        if not 0 <= index < trajectory_count:
            raise InvalidVerdict(f"trajectories[{k}].index={index}; the session has {trajectory_count}")
        value = _finite(entry.get("value", 0.0), f"trajectories[{k}].value")
        out.append({"index": index, "local": _spans(entry.get("local"), f"trajectories[{k}].local"), "value": value})
    return out


def validate_verdict(verdict: Any, turn_count: int = 1, trajectory_count: int = 1) -> dict:
    """Check a verdict's shape and numbers; returns it normalised (floats, sorted local spans, lists).

    `turn_count`: the assistant turns of the response (`verl_bot.credit.turns`; 1 for a single-turn response),
    the range of the verdict's `turns` entries. `trajectory_count`: the outputs of a multi-output agent loop's
    session (`verl_bot.credit.sessions`), the range of its `trajectories` entries."""
    if not isinstance(verdict, dict) or not isinstance(verdict.get("global"), dict):
        raise InvalidVerdict(f"expected a dict with a 'global' object, got {type(verdict).__name__}")
    parts = verdict["global"].get("parts") or {}
    if not isinstance(parts, dict):
        raise InvalidVerdict("'global.parts' must be an object")
    return {
        "global": {
            "score": _finite(verdict["global"].get("score"), "global.score"),
            "parts": {str(k): _finite(v, f"global.parts.{k}") for k, v in parts.items()},
        },
        "local": _spans(verdict.get("local")),
        "turns": _turns(verdict, turn_count),
        "trajectories": _trajectories(verdict, trajectory_count),
        "info": verdict.get("info") or {},
        "flags": [str(f) for f in verdict.get("flags") or []],
        "error": verdict.get("error"),
    }


def local_token_values(local: list[dict], token_spans: np.ndarray, text_length: int) -> np.ndarray:
    """S_t: the local signal of every response token.

    Args:
        local: REWARD_API local spans (character offsets into the response text).
        token_spans: (n, 2) `[start, end)` characters of each token (`spans.token_char_spans`).
        text_length: length of the response text.

    Returns:
        (n,) float64 (a token straddling a span edge gets the mean over its characters).
    """
    return token_local_values(token_spans, char_values(text_length, local))


def compose_token_rewards(global_score: float, local_values: np.ndarray, w_global: float, w_local: float) -> np.ndarray:
    """`r_t = w_g * G + w_s * S_t` for every response token.

    Args:
        global_score: G of the response.
        local_values: (n,) S_t (`local_token_values`).
        w_global, w_local: the weights w_g, w_s.

    Returns:
        (n,) float64 token rewards.
    """
    return w_global * global_score + w_local * np.asarray(local_values, dtype=np.float64)
