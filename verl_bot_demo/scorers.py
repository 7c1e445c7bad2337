"""The built-in in-process scorers of the CPU tasks: `toy_lint`, `toy_math`, `toy_calc` and `toy_turns`.

- `toy_lint`: the shape of the React reward's ESLint part (G plus penalties on spans): docs/ALGORITHMS.md, section 5;
- `toy_math`: the math reward server's own scorer (`reward_servers.math.server.MathScorer`, the rule step judge,
  integer answers), run in-process and imported on its first call;
- `toy_calc`, `toy_turns`: a value per assistant turn from the request's `turns` (`TURN_VALUE`, centred: a turn
  earns for doing its part right, not for existing).
The tasks and their rewards: docs/cpu_demo.md, sections `toy_math`, `toy_calc` and `toy_turns`.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from verl_bot_demo.calc import called_expression, evaluate, final_answer

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


@functools.cache
def _toy_math_scorer():
    """The math scorer as `python -m reward_servers.math --judge rule --no-math-verify` configures it
    (tests/component/test_toy_math.py): no worker pool and no endpoint, nothing to start."""
    from reward_servers.math.server import MathConfig, MathScorer

    return MathScorer(MathConfig(math_verify=False, judge_enabled=True, judge_kind="rule"))


async def toy_math(prompt: Any, response: str, ground_truth: Any = None, extra_info: Any = None) -> dict:
    """Score `response` with the math scorer and the rule-based step judge; returns its REWARD_API verdict."""
    from reward_servers.common.service import score_batch

    item = {"prompt": prompt, "response": response, "ground_truth": ground_truth, "extra_info": extra_info or {}}
    (verdict,) = await score_batch(_toy_math_scorer(), [item], {})
    return verdict


TURN_VALUE = 0.5
PROBLEM = re.compile(r"Compute\s+([0-9+\-\s]+?)\s*\.")


def assistant_turns(response: str, turns: list[dict] | None) -> list[str]:
    """The text of each assistant turn of `response`, from the request's turn layout (None: one turn, the
    whole response)."""
    if not turns:
        return [response]
    texts: dict[int, str] = {}
    for run in turns:
        if run["role"] == "assistant":
            texts[run["turn"]] = texts.get(run["turn"], "") + response[run["start"] : run["end"]]
    return [texts.get(k, "") for k in range(1 + max(run["turn"] for run in turns))]


def _expression(prompt: Any, extra_info: Any) -> str | None:
    if isinstance(extra_info, dict) and extra_info.get("expression"):
        return str(extra_info["expression"])
    match = PROBLEM.search(str(prompt))
    return match.group(1).replace(" ", "") if match else None


def toy_calc(prompt: Any, response: str, ground_truth: Any = None, extra_info: Any = None,
             turns: list[dict] | None = None) -> dict:
    """Score a `toy_calc` rollout per turn (docs/cpu_demo.md, `toy_calc`); returns a REWARD_API verdict with `turns`."""
    texts = assistant_turns(response, turns)
    called = called_expression(texts[0])
    expected = _expression(prompt, extra_info)
    answer = final_answer(texts[-1])
    correct = answer is not None and answer == str(ground_truth).strip()
    right_call = called is not None and expected is not None and called.replace(" ", "") == expected
    turns_out = [{"turn": 0, "value": TURN_VALUE if right_call else -TURN_VALUE}]
    if len(texts) > 1:
        used_tool = called is not None and answer is not None and answer == evaluate(called)
        turns_out.append({"turn": len(texts) - 1, "value": TURN_VALUE if used_tool else -TURN_VALUE})
    return {
        "global": {"score": float(correct), "parts": {"correct": float(correct)}},
        "local": [],
        "turns": turns_out,
        "info": {"correct": correct, "solved": correct, "tool_called": called is not None},
        "flags": [] if called is not None else ["no_tool_call"],
    }


def _compact(expression: str) -> str:
    return expression.replace(" ", "")


def toy_turns(prompt: Any, response: str, ground_truth: Any = None, extra_info: Any = None,
              turns: list[dict] | None = None) -> dict:
    """Score a `toy_turns` rollout per turn (docs/cpu_demo.md, `toy_turns`); returns a REWARD_API verdict with
    `turns`."""
    texts = assistant_turns(response, turns)
    expected = _expression(prompt, extra_info)
    answer = final_answer(texts[-1])
    calls = texts if answer is None else texts[:-1]
    values, sent, last_call = [], False, None
    for text in calls:
        called = called_expression(text)
        first_right = called is not None and not sent and _compact(called) == expected
        sent, last_call = sent or first_right, called if called is not None else last_call
        values.append(TURN_VALUE if first_right else -TURN_VALUE)
    if answer is not None:
        used_tool = last_call is not None and answer == evaluate(last_call)
        values.append(0.0 if not calls else TURN_VALUE if used_tool else -TURN_VALUE)
    correct = answer is not None and answer == str(ground_truth).strip()
    flags = [name for name, hit in (("direct", answer is not None and not calls),
                                    ("wasted_call", -TURN_VALUE in values[: len(calls)]),
                                    ("no_final", answer is None)) if hit]
    return {
        "global": {"score": float(correct), "parts": {"correct": float(correct)}},
        "local": [],
        "turns": [{"turn": k, "value": v} for k, v in enumerate(values)],
        "info": {"correct": correct, "solved": correct, "calls": len(calls)},
        "flags": flags,
    }
