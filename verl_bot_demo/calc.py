"""The `toy_calc` task's text rules: the calculator, its hermes tool call, and what a scorer reads back.

Pure string functions shared by the task (`verl_bot_demo.toy_calc`, the tool `verl_bot_demo/calc_tool.py`) and its
scorer (`verl_bot_demo.scorers.toy_calc`).
"""

from __future__ import annotations

import json
import re

TOOL_NAME = "calc"
EXPRESSION = re.compile(r"^\s*\d+(?:\s*[+-]\s*\d+)*\s*$")
TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
FINAL = re.compile(r"<final>(.*?)</final>", re.DOTALL)
MAX_EXPRESSION_CHARS = 64


def evaluate(expression: str) -> str:
    """The calculator: an integer chain of `+` and `-` evaluated left to right, as text; `error: ...` for anything
    else (the tool never raises on what a model writes)."""
    if not isinstance(expression, str) or len(expression) > MAX_EXPRESSION_CHARS or not EXPRESSION.match(expression):
        return "error: expected digits joined by + and -"
    tokens = re.findall(r"\d+|[+-]", expression)
    value = int(tokens[0])
    for op, number in zip(tokens[1::2], tokens[2::2], strict=True):
        value = value + int(number) if op == "+" else value - int(number)
    return str(value)


def tool_call(expression: str) -> str:
    """The hermes tool call of `calc(expression)` (verl's `HermesToolParser` reads it)."""
    return "<tool_call>" + json.dumps({"name": TOOL_NAME, "arguments": {"expression": expression}}) + "</tool_call>"


def called_expression(text: str) -> str | None:
    """The `expression` argument of the first well-formed `calc` call in `text`, else None."""
    match = TOOL_CALL.search(text)
    if match is None:
        return None
    try:
        call = json.loads(match.group(1))
        if call.get("name") != TOOL_NAME:
            return None
        expression = call["arguments"]["expression"]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return expression if isinstance(expression, str) else None


def final_answer(text: str) -> str | None:
    """The stripped text of the last `<final>...</final>` in `text`, else None."""
    answers = FINAL.findall(text)
    return answers[-1].strip() if answers else None
