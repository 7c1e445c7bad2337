"""The math verdict of one response, a pure function of the facts the server gathered (`math_verdict`).

    G   = answer_weight * 1[correct] + b_format (+ think_truncated)     parts {"answer", "format"[, "think_truncated"]}
    S_t = local_weight * e_s / |S|   on every character of step s's block (its tags included); + think_local on
          every character of the think block

b_format (`format_score`) per format case; a judge that failed drops the local spans (flag ``judge_unavailable``) and
keeps G. The facts (`Reading`, `read_response`; `AnswerCheck`; the step judge's verdicts, `MathFacts.judged`) are
gathered concurrently by `reward_servers.math.server.MathScorer`. Eq. 8 and its constants: docs/ALGORITHMS.md,
section 4 (AIME rewards); reward_servers/math/README.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from reward_servers.common.service import ItemResult
from reward_servers.math.config import MathConfig
from reward_servers.math.parsing import (
    FORMAT_MISSING,
    FORMAT_NATIVE,
    FORMAT_OK,
    Answer,
    Parsed,
    extract_answer,
    find_steps,
    format_verdict,
    parse_response,
)
from reward_servers.math.step_judge import StepVerdict
from verl_bot_contract.steps import Step
from verl_bot_contract.think import ThinkSplit, split_think, think_spans
from verl_bot_contract.verdict import Span


@dataclass(frozen=True)
class Reading:
    """What the response's text alone gives: its think block, tags, answer, steps (and where they come from:
    ``tags`` | ``paragraphs`` | ``none``) and format verdict."""

    think: ThinkSplit
    parsed: Parsed
    answer: Answer | None
    steps: list[Step]
    step_source: str
    format: str


def read_response(text: str, cfg: MathConfig) -> Reading:
    """Read ``text`` after its think block (``cfg.think_opened``; untagged steps: ``cfg.untagged_steps``)."""
    think = split_think(text, cfg.think_opened)
    parsed = parse_response(text, think.end)
    answer = extract_answer(text, parsed, think.end)
    steps, step_source = find_steps(text, parsed, think, answer, cfg.untagged_steps)
    return Reading(think, parsed, answer, steps, step_source, format_verdict(parsed, think, answer))


@dataclass(frozen=True)
class AnswerCheck:
    """The answer check: correct or not, the normalised answer (None when it was not read) and its flags."""

    correct: bool
    value: str | None = None
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Judging:
    """How this request judges the steps: not at all (``enabled`` False), or by a ``kind`` of judge (``llm`` |
    ``rule``) under ``strategy``, an LLM judge with ``window`` earlier steps in view."""

    enabled: bool
    kind: str = "llm"
    strategy: str = "error_propagation"
    window: int = 3

    def info(self) -> dict:
        """The verdict's ``info.judge``: the settings that applied."""
        if not self.enabled:
            return {"enabled": False}
        if self.kind == "rule":
            return {"kind": "rule", "strategy": self.strategy}
        return {"strategy": self.strategy, "window": self.window}


@dataclass(frozen=True)
class MathFacts:
    """Everything the verdict of one response depends on.

    mode: ``aime`` | ``math`` (the ground truth's kind). judged: one verdict per step (None: not judged: judging
    off, no step, or the judge failed). judge_error: why the judge failed (None when it did not)."""

    reading: Reading
    mode: str
    check: AnswerCheck
    judging: Judging
    judged: list[StepVerdict] | None = None
    judge_error: str | None = None


def format_score(fmt: str, cfg: MathConfig) -> float:
    """b_format of a format verdict."""
    if fmt == FORMAT_OK:
        return cfg.format_bonus
    if fmt == FORMAT_MISSING:
        return cfg.format_missing
    if fmt == FORMAT_NATIVE:
        return cfg.format_native
    return cfg.format_penalty


def step_spans(steps: list[Step], scores: list[int], local_weight: float) -> list[Span]:
    """Eq. 8 local signal: value local_weight * e_s / |S| over each step's block span (|S| = len(steps))."""
    n = len(steps)
    return [Span(start=st.start, end=st.end, value=local_weight * e / n)
            for st, e in zip(steps, scores, strict=True) if e and n]


def judge_flags(facts: MathFacts, max_steps_judged: int) -> list[str]:
    """``judge_unavailable`` (the judge failed), ``judge_unparseable`` (a verdict could not be read),
    ``steps_truncated`` (more steps than were judged)."""
    if facts.judge_error is not None:
        return ["judge_unavailable"]
    if facts.judged is None:
        return []
    unparseable = ["judge_unparseable"] if any(v.verdict == "unparseable" for v in facts.judged) else []
    return unparseable + (["steps_truncated"] if len(facts.reading.steps) > max_steps_judged else [])


def math_verdict(facts: MathFacts, cfg: MathConfig) -> ItemResult:
    """The Eq. 8 verdict of one response's ``facts`` under ``cfg``'s weights (module docstring)."""
    reading, judged = facts.reading, facts.judged
    think, answer = reading.think, reading.answer
    parts = {"answer": cfg.answer_weight * float(facts.check.correct), "format": format_score(reading.format, cfg)}
    if think.truncated:
        parts["think_truncated"] = cfg.think_truncated_penalty
    flags = list(facts.check.flags)
    flags += ["multiple_boxed"] if answer is not None and answer.n_boxed > 1 else []
    flags += ["think_truncated"] if think.truncated else []
    flags += judge_flags(facts, cfg.max_steps_judged)
    judge_info = facts.judging.info()
    if facts.judge_error is not None:
        judge_info["error"] = facts.judge_error[:300]
    steps_info = [
        {"index": st.index, "start": st.start, "end": st.end, "score": judged[k].score if judged is not None else None,
         **({"verdict": judged[k].verdict} if judged is not None else {})}
        for k, st in enumerate(reading.steps)
    ]
    info = {
        "answer": facts.check.value,
        "answer_text": answer.text[:200] if answer else None,
        "answer_source": answer.source if answer else None,
        "answer_type": facts.mode,
        "correct": bool(facts.check.correct),
        "format": reading.format,
        "format_problems": reading.parsed.problems[:20],
        "steps": steps_info,
        "step_source": reading.step_source,
        "think": think.info(),
        "judge": judge_info,
    }
    local = step_spans(reading.steps, [v.score for v in judged], cfg.local_weight) if judged is not None else []
    local += think_spans(think, cfg.think_local)
    return ItemResult(score=sum(parts.values()), parts=parts, local=local, info=info, flags=flags)
