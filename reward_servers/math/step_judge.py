"""Step judge: one verdict e_s in {+1, 0, -1} per tagged step, through an OpenAI-compatible chat endpoint.

When the judge scores step s its prompt shows the problem, the W steps immediately before s (the window: this
project's definition; the paper leaves it open) and step s, never a later step. The strategies (``run_strategy``):
``error_propagation`` (default: after the first incorrect step every later one gets 0 without a call),
``context_aware``, ``independent``. A reply without a recognisable verdict counts as 0; a transport failure raises
:class:`~reward_servers.common.judge.JudgeError` to the caller, which drops the local signal and flags the item.
Explained in reward_servers/math/README.md (the step judge, window W) and docs/ALGORITHMS.md, section 4.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from reward_servers.common.judge import JudgeClient

STRATEGIES = ("error_propagation", "context_aware", "independent")
PROMPT_DIR = Path(__file__).parent / "prompts"

_VERDICT = re.compile(r"verdict\s*[:=]\s*[*_`\"']*\s*(incorrect|correct|uncertain|wrong|right|[+-]?1|0)\b", re.I)
_BARE = {"correct": 1, "right": 1, "+1": 1, "1": 1, "uncertain": 0, "0": 0, "incorrect": -1, "wrong": -1, "-1": -1}
_NAMES = {1: "correct", 0: "uncertain", -1: "incorrect"}


def parse_verdict(reply: str) -> int | None:
    """e_s from a judge reply: the LAST ``VERDICT: <word>`` wins; a reply that is only the word also counts.

    Returns +1 / 0 / -1, or None when no verdict can be read.
    """
    matches = _VERDICT.findall(reply[-4000:])
    if matches:
        return _BARE[matches[-1].lower()]
    bare = reply.strip().strip(".*`'\"").lower()
    return _BARE.get(bare)


def load_prompts(prompt_dir: Path | str = PROMPT_DIR) -> dict[str, str]:
    """The prompt files: system, user template, context-aware note."""
    d = Path(prompt_dir)
    return {
        "system": (d / "step_judge_system.txt").read_text(),
        "user": (d / "step_judge_user.txt").read_text(),
        "context_aware_note": (d / "context_aware_note.txt").read_text(),
    }


def fill(template: str, values: dict[str, str]) -> str:
    """Replace ``{{name}}`` placeholders in one pass (values containing ``{{...}}`` are not expanded again)."""
    return re.sub(r"\{\{(\w+)\}\}", lambda m: values.get(m.group(1), m.group(0)), template)


def clip_text(text: str, max_chars: int) -> str:
    """Keep head and tail of an over-long text with a marker in between."""
    if len(text) <= max_chars:
        return text
    half = max_chars // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters omitted ...]\n{text[-half:]}"


def window_indices(s: int, window: int) -> range:
    """0-based indices of the context steps of 0-based step ``s`` under window W (reward_servers/math/README.md)."""
    if window < 0:
        return range(0, s)
    return range(max(0, s - window), s)


def build_messages(
    prompts: dict[str, str],
    problem: str,
    steps: list[str],
    s: int,
    window: int,
    verdicts: list[int | None] | None = None,
    max_chars: int = 4000,
) -> list[dict]:
    """Chat messages asking for the verdict of 0-based step ``s``. ``verdicts`` given: context-aware annotations."""
    ctx = []
    for j in window_indices(s, window):
        line = f"Step {j + 1}:\n{clip_text(steps[j], max_chars)}"
        if verdicts is not None:
            v = verdicts[j]
            line += f"\n(your verdict: {_NAMES.get(v, 'none') if v is not None else 'none'})"
        ctx.append(line)
    previous = "\n\n".join(ctx) if ctx else "(none)"
    system = prompts["system"]
    if verdicts is not None:
        system = system.rstrip() + "\n\n" + prompts["context_aware_note"]
    user = fill(
        prompts["user"],
        {
            "problem": clip_text(problem, 2 * max_chars),
            "previous": previous,
            "window": "all" if window < 0 else str(window),
            "index": str(s + 1),
            "total": str(len(steps)),
            "step": clip_text(steps[s], max_chars),
        },
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


@dataclass
class StepVerdict:
    """``score`` = e_s in {+1, 0, -1}; ``verdict``: correct | uncertain | incorrect | unparseable | skipped."""

    score: int
    verdict: str


Ask = Callable[[int, list[int | None] | None], Awaitable[StepVerdict]]


async def run_strategy(ask: Ask, n: int, strategy: str = "error_propagation", max_steps: int = 64) -> list[StepVerdict]:
    """Verdicts for ``n`` steps under ``strategy``; ``ask(s, verdicts)`` judges 0-based step ``s``.

    ``verdicts`` is the list of earlier scores (None where unparseable or skipped) for ``context_aware``, else
    None. Steps past ``max_steps`` get 0 ("skipped"). Every step judge (the LLM one, the rule-based one of the CPU
    ``toy_math`` task) goes through this one function, so the strategies mean the same for all of them.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; one of {STRATEGIES}")
    judged = min(n, max_steps)
    out: list[StepVerdict] = []
    if strategy == "independent":
        out = list(await asyncio.gather(*(ask(s, None) for s in range(judged))))
    else:
        scores: list[int | None] = []
        stopped = False
        for s in range(judged):
            if stopped:
                out.append(StepVerdict(0, "skipped"))
                scores.append(None)
                continue
            v = await ask(s, scores if strategy == "context_aware" else None)
            out.append(v)
            scores.append(v.score if v.verdict != "unparseable" else None)
            stopped = strategy == "error_propagation" and v.score == -1
    out.extend(StepVerdict(0, "skipped") for _ in range(n - judged))
    return out


async def judge_steps(
    client: JudgeClient,
    prompts: dict[str, str],
    problem: str,
    steps: list[str],
    strategy: str = "error_propagation",
    window: int = 3,
    max_chars: int = 4000,
    max_steps: int = 64,
) -> list[StepVerdict]:
    """LLM verdicts for ``steps`` (inner texts, in order) under ``strategy`` (:func:`run_strategy`).

    Raises ``JudgeError`` when the endpoint fails (after the client's retries).
    """

    async def ask(s: int, verdicts: list[int | None] | None) -> StepVerdict:
        reply = await client.chat(build_messages(prompts, problem, steps, s, window, verdicts, max_chars))
        e = parse_verdict(reply)
        return StepVerdict(0, "unparseable") if e is None else StepVerdict(e, _NAMES[e])

    return await run_strategy(ask, len(steps), strategy, max_steps)
