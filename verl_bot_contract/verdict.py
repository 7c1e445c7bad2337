"""The verdict a scorer answers for one rollout (docs/REWARD_API.md item) and its one validator.

    {"global": {"score": G, "parts": {...}}, "local": [{"start", "end", "value"}, ...],
     "turns": [{"turn", "value"}, ...], "trajectories": [{"index", "local", "value"}, ...],
     "info": {...}, "flags": [...], "error": None | "message"}

The reward servers check what they answer with `validate_verdict` before it leaves them; the `bot` manager parses
what it receives with it (`verl_bot.credit.verdict`). Numbers are finite (`finite`), spans are `Span` dicts.
"""

from __future__ import annotations

import math
from typing import Any, TypedDict


class Span(TypedDict):
    """A local signal: `value` on every character of `[start, end)` of a response text (Python str indices).

    Built as `Span(start=..., end=..., value=...)`: a plain dict, the wire form."""

    start: int
    end: int
    value: float


class TurnValue(TypedDict):
    """`value` on every generated token of assistant turn `turn` (0-based) of a multi-turn response."""

    turn: int
    value: float


class TrajectoryCredit(TypedDict):
    """The spans (on its own text) and the per-token `value` of output `index` of a multi-output session."""

    index: int
    local: list[Span]
    value: float


class GlobalScore(TypedDict):
    """G and its named parts."""

    score: float
    parts: dict[str, float]


Verdict = TypedDict(  # "global" is a Python keyword: the functional form
    "Verdict",
    {
        "global": GlobalScore,
        "local": list[Span],
        "turns": list[TurnValue],
        "trajectories": list[TrajectoryCredit],
        "info": dict,
        "flags": list[str],
        "error": Any,
    },
)


class InvalidVerdict(ValueError):
    """A scorer answered with something that is not a REWARD_API verdict (or holds NaN/inf)."""


def finite(value: Any, what: str) -> float:
    """`value` as a finite float; `InvalidVerdict` naming `what` for anything else (NaN, inf, not a number)."""
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise InvalidVerdict(f"{what} is not a number: {value!r}") from exc
    if not math.isfinite(number):
        raise InvalidVerdict(f"{what} is not finite: {value!r}")
    return number


def _offset(span: dict, key: str, what: str) -> int:
    try:
        return int(span.get(key, -1))
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidVerdict(f"{what} span has bad offsets: {span!r}") from exc


def _spans(local: Any, what: str = "local") -> list[Span]:
    """REWARD_API local spans (`[{"start", "end", "value"}]`), normalised and sorted."""
    local = local or []
    if not isinstance(local, list):
        raise InvalidVerdict(f"'{what}' must be a list of spans")
    spans = []
    for span in local:
        if not isinstance(span, dict):
            raise InvalidVerdict(f"{what} span must be an object, got {span!r}")
        start, end = _offset(span, "start", what), _offset(span, "end", what)
        if start < 0 or end < start:
            raise InvalidVerdict(f"{what} span has bad offsets: {span!r}")
        spans.append(Span(start=start, end=end, value=finite(span.get("value"), f"{what} span value")))
    return sorted(spans, key=lambda s: (s["start"], s["end"]))


def _turns(verdict: dict, turn_count: int) -> list[TurnValue]:
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
        out.append(TurnValue(turn=entry["turn"], value=finite(entry.get("value"), f"turns[{k}].value")))
    return out


def _trajectories(verdict: dict, trajectory_count: int) -> list[TrajectoryCredit]:
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
        value = finite(entry.get("value", 0.0), f"trajectories[{k}].value")
        out.append(TrajectoryCredit(index=index, local=_spans(entry.get("local"), f"trajectories[{k}].local"),
                                    value=value))
    return out


def validate_verdict(verdict: Any, turn_count: int = 1, trajectory_count: int = 1) -> Verdict:
    """Check a verdict's shape and numbers; returns it as a `Verdict` (floats, sorted local spans, lists);
    `InvalidVerdict` for anything that is not one.

    `turn_count`: the assistant turns of the response (1 for a single-turn response), the range of the verdict's
    `turns` entries. `trajectory_count`: the outputs of a multi-output agent loop's session, the range of its
    `trajectories` entries."""
    if not isinstance(verdict, dict) or not isinstance(verdict.get("global"), dict):
        raise InvalidVerdict(f"expected a dict with a 'global' object, got {type(verdict).__name__}")
    parts = verdict["global"].get("parts") or {}
    if not isinstance(parts, dict):
        raise InvalidVerdict("'global.parts' must be an object")
    return {
        "global": {
            "score": finite(verdict["global"].get("score"), "global.score"),
            "parts": {str(k): finite(v, f"global.parts.{k}") for k, v in parts.items()},
        },
        "local": _spans(verdict.get("local")),
        "turns": _turns(verdict, turn_count),
        "trajectories": _trajectories(verdict, trajectory_count),
        "info": verdict.get("info") or {},
        "flags": [str(f) for f in verdict.get("flags") or []],
        "error": verdict.get("error"),
    }
