"""Where a reasoning model's think block ends: the one place that splits a response into think block and answer.

Reasoning models (Phi-4-mini-reasoning, SmolLM3 in thinking mode, Qwen3, DeepSeek-R1) write
``<think> ... </think>`` before their answer. The reward servers score only the answer after it, and GRPO-VPS
(``verl_bot.vps.probing``) looks for the answer marker only there. Rules (exact, lower-case tags, as the models'
tokenizers write them):

- ``</think>`` anywhere: the think block is everything up to the end of its FIRST occurrence (as vLLM's
  reasoning parsers split), whether the response opened it (``<think>`` at its start) or the chat template did
  (the prompt ends with ``<think>``, so the response starts inside the block and holds only ``</think>``);
  state ``closed``;
- no ``</think>``, and the response starts with ``<think>`` (after whitespace) or the caller says the prompt
  opened the block (``opened``): the response was cut off inside its think block (the length cap); everything
  is think, there is no answer; state ``truncated``;
- otherwise there is no think block (``none``): the whole response is the answer, as before.

A response that starts inside a template-opened block and is cut off before ``</think>`` cannot be told from a
response without a think block by its text alone: that is what ``opened`` is for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from verl_bot_contract.verdict import Span

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
NONE, CLOSED, TRUNCATED = "none", "closed", "truncated"
_LEADING_OPEN = re.compile(r"\s*" + re.escape(THINK_OPEN))


@dataclass(frozen=True)
class ThinkSplit:
    """A response's think block ``[0, end)`` (its tags included) and the answer ``[end, len(response))``.

    ``state``: ``none`` (``end`` 0), ``closed`` (``end`` just after ``</think>``) or ``truncated`` (``end`` =
    the response's length: no answer).
    """

    end: int
    state: str

    @property
    def truncated(self) -> bool:
        """True when the response was cut off inside its think block."""
        return self.state == TRUNCATED

    @property
    def closed(self) -> bool:
        """True when a complete think block precedes the answer."""
        return self.state == CLOSED

    def info(self) -> dict:
        """The split as a verdict's ``info.think``: ``{"state": ..., "end": ...}``."""
        return {"state": self.state, "end": self.end}


def split_think(response: str, opened: bool = False) -> ThinkSplit:
    """Split ``response`` into think block and answer (rules: the module docstring).

    ``opened``: the prompt already opened the think block (a chat template that ends with ``<think>``).
    """
    close = response.find(THINK_CLOSE)
    if close >= 0:
        return ThinkSplit(close + len(THINK_CLOSE), CLOSED)
    if opened or _LEADING_OPEN.match(response):
        return ThinkSplit(len(response), TRUNCATED)
    return ThinkSplit(0, NONE)


def think_spans(split: ThinkSplit, value: float) -> list[Span]:
    """The think block's own local signal: ``value`` on each of its characters; none when ``value`` is 0."""
    return [Span(start=0, end=split.end, value=value)] if value and split.end else []
