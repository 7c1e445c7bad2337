"""The plugin's side of a scorer's verdict for one rollout: the schema and its validator are the contract's
(`verl_bot_contract.verdict`, which the reward servers check their answers with too); here what the manager has
instead of a verdict when the scorer failed (`ScorerFailure`) and what the reward streams read from one (its
outcome, its format part). How either becomes token rewards: `verl_bot.credit.token_credit`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from verl_bot_contract.verdict import InvalidVerdict, Verdict, validate_verdict

__all__ = ["InvalidVerdict", "ScorerFailure", "Verdict", "validate_verdict", "verdict_format", "verdict_outcome"]


@dataclass(frozen=True)
class ScorerFailure:
    """A scorer that failed for one rollout (raised, timed out, answered something that is not a verdict)."""

    message: str


OUTCOME_KEYS = ("solved", "correct", "compiled")
FORMAT_PART = "format"


def verdict_outcome(verdict: Mapping[str, Any]) -> float:
    """1.0 / 0.0 for a solved / unsolved response: the first of `info.solved`, `info.correct` (math),
    `info.compiled` (React) present; 0.0 for an item with an `error`; NaN when `info` has none of them."""
    if verdict.get("error") is not None:
        return 0.0
    info = verdict.get("info") or {}
    for key in OUTCOME_KEYS:
        if key in info:
            return float(bool(info[key]))
    return math.nan


def verdict_format(verdict: Mapping[str, Any]) -> float:
    """The verdict's format part (`global.parts["format"]`), 0.0 when absent or the item has an `error`."""
    if verdict.get("error") is not None:
        return 0.0
    parts = (verdict.get("global") or {}).get("parts") or {}
    return float(parts.get(FORMAT_PART, 0.0))
