"""`toy_lint`: the built-in in-process scorer used by the tests and the CPU demo.

It has the shape of the React reward's ESLint part (a global score plus
penalties on spans of the response) on a task a tiny model can learn on a CPU:
"write text without forbidden characters".

- forbidden characters: `ground_truth["forbidden"]` (or `extra_info["forbidden"]`),
  default `"aeiou"`;
- G = 1 - 2 * (forbidden characters / non-whitespace characters), in [-1, 1];
  an empty (or all-whitespace) response gets the sentinel G = -1 and flag `empty`;
- local: every maximal run of forbidden characters is a span with value -1;
- info: `forbidden_chars` (count) and `solved` (no forbidden character: the
  verifiable outcome PURE reads).
"""

from __future__ import annotations

import re
from typing import Any

DEFAULT_FORBIDDEN = "aeiou"
EMPTY_SCORE = -1.0


def _forbidden(ground_truth: Any, extra_info: Any) -> str:
    for source in (ground_truth, extra_info):
        if isinstance(source, dict) and source.get("forbidden"):
            return str(source["forbidden"])
    return DEFAULT_FORBIDDEN


def toy_lint(prompt: str, response: str, ground_truth: Any = None, extra_info: Any = None) -> dict:
    """Score `response`; returns a REWARD_API verdict (global score + parts, local spans)."""
    forbidden = _forbidden(ground_truth, extra_info)
    visible = sum(1 for ch in response if not ch.isspace())
    if visible == 0:
        return {
            "global": {"score": EMPTY_SCORE, "parts": {"clean": 0.0}},
            "local": [],
            "info": {"solved": False},
            "flags": ["empty"],
        }
    runs = [m.span() for m in re.finditer(f"[{re.escape(forbidden)}]+", response)]
    bad = sum(end - start for start, end in runs)
    clean = 1.0 - bad / visible
    return {
        "global": {"score": 2.0 * clean - 1.0, "parts": {"clean": clean}},
        "local": [{"start": start, "end": end, "value": -1.0} for start, end in runs],
        "info": {"forbidden_chars": bad, "solved": bad == 0},
        "flags": [],
    }
