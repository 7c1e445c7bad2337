"""Pure text functions of the math reward: step/final tags, format verdict, strict answer extraction.

Response format (the paper's): ``<step 1> ... </step 1> <step 2> ... </step 2> ... <final> ... </final>``.
Closing step tags may omit the number (``</step>``). All offsets are Python ``str`` indices into the response;
spans are half-open ``[start, end)`` and cover a block from its opening tag to its closing tag inclusive.
The scans take a ``start`` offset: a reasoning model's think block (``verl_bot_contract.think``) is skipped
by starting them after it, with offsets still into the whole response.

Every scan here is a linear regex pass or a linear brace walk: a 1 MB response costs milliseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from verl_bot_contract.steps import BLANK_LINE, Step, separator_pattern, split_steps
from verl_bot_contract.think import ThinkSplit

# <step 3>, < step3 >, </step 3>, </step>, <final>, </final>; case-insensitive
_TAG = re.compile(r"<\s*(/?)\s*(step|final)\s*(\d{0,6})\s*>", re.I)
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")

FORMAT_OK, FORMAT_MISMATCHED, FORMAT_MISSING = "ok", "mismatched", "missing"
FORMAT_NATIVE = "native"  # a closed think block, then a \boxed{} answer and no tag at all (a reasoning model's own)


@dataclass
class Parsed:
    """Result of :func:`parse_response`.

    ``format``: "ok" (steps 1..n in order, every tag closed, no nesting, exactly one <final> after the last step),
    "missing" (no step or final tag at all) or "mismatched" (anything else); ``problems`` says why.
    ``final``: inner span of the last complete ``<final>...</final>``, or None.
    """

    steps: list[Step] = field(default_factory=list)
    final: tuple[int, int] | None = None
    format: str = FORMAT_MISSING
    problems: list[str] = field(default_factory=list)


def parse_response(text: str, start: int = 0) -> Parsed:
    """Scan the tags of ``text[start:]`` once and build steps, the final span and the format verdict."""
    out = Parsed()
    tags = list(_TAG.finditer(text, start))
    if not tags:
        out.problems.append("no tags")
        return out
    problems = out.problems
    open_step: tuple[int, re.Match] | None = None  # (index, match)
    open_final: re.Match | None = None
    finals: list[tuple[int, int]] = []
    expected = 1

    def close_step(end: int, text_end: int, closed: bool) -> None:
        idx, m = open_step
        out.steps.append(Step(idx, m.start(), end, m.end(), text_end, text[m.end() : text_end], closed))

    for m in tags:
        closing, kind, num = m.group(1) == "/", m.group(2).lower(), m.group(3)
        if kind == "step" and not closing:
            if open_final is not None:
                problems.append(f"step opened inside <final> at {m.start()}")
            if open_step is not None:
                problems.append(f"step {open_step[0]} not closed before {m.start()}")
                close_step(m.start(), m.start(), False)
            if not num:
                problems.append(f"step tag without a number at {m.start()}")
                idx = expected
            else:
                idx = int(num)
            if finals:
                problems.append(f"step {idx} after <final>")
            if idx != expected:
                problems.append(f"step {idx} where step {expected} was expected")
            expected = idx + 1
            open_step = (idx, m)
        elif kind == "step":
            if open_step is None:
                problems.append(f"stray </step> at {m.start()}")
                continue
            if num and int(num) != open_step[0]:
                problems.append(f"</step {num}> closes step {open_step[0]}")
            close_step(m.end(), m.start(), True)
            open_step = None
        elif not closing:
            if open_step is not None:
                problems.append(f"<final> inside step {open_step[0]}")
                close_step(m.start(), m.start(), False)
                open_step = None
            if open_final is not None:
                problems.append(f"<final> opened twice at {m.start()}")
            if num:
                problems.append("<final> with a number")
            open_final = m
        else:
            if open_final is None:
                problems.append(f"stray </final> at {m.start()}")
                continue
            finals.append((open_final.end(), m.start()))
            open_final = None
    if open_step is not None:
        problems.append(f"step {open_step[0]} not closed")
        close_step(len(text), len(text), False)
    if open_final is not None:
        problems.append("<final> not closed")
    if not out.steps:
        problems.append("no steps")
    if not finals:
        problems.append("no <final>")
    elif len(finals) > 1:
        problems.append(f"{len(finals)} <final> blocks")
    out.final = finals[-1] if finals else None
    out.format = FORMAT_MISMATCHED if problems else FORMAT_OK
    return out


def boxed_contents(text: str, max_depth: int = 64, start: int = 0) -> list[tuple[int, int]]:
    """Inner spans of every balanced ``\\boxed{...}`` / ``\\fbox{...}`` in ``text[start:]``, in order (outermost
    only).

    Unbalanced boxes and boxes nested deeper than ``max_depth`` braces are skipped. Linear in ``len(text)``
    for non-overlapping boxes.
    """
    spans: list[tuple[int, int]] = []
    pos = start
    while True:
        m = _BOXED.search(text, pos)
        if m is None:
            return spans
        depth, i, inner = 1, m.end(), m.end()
        too_deep = False
        while i < len(text) and depth:
            c = text[i]
            if c == "\\" and i + 1 < len(text) and text[i + 1] in "{}":
                i += 2
                continue
            if c == "{":
                depth += 1
                too_deep = too_deep or depth > max_depth
            elif c == "}":
                depth -= 1
            i += 1
        if depth:  # unbalanced: nothing after can close it either
            return spans
        if not too_deep:
            spans.append((inner, i - 1))
        pos = i


_STRIP = re.compile(r"^(?:\s|\$|\\\(|\\\[)+|(?:\s|\$|\\\)|\\\]|\.)+$")


def clean_answer(ans: str) -> str:
    """Strip surrounding whitespace, ``$``, ``\\( \\)``, ``\\[ \\]`` and a trailing period."""
    return _STRIP.sub("", ans)


@dataclass
class Answer:
    """The extracted answer: ``text`` (cleaned), where it came from ("final" | "boxed") and its span."""

    text: str
    source: str
    start: int
    end: int
    n_boxed: int = 0


def extract_answer(text: str, parsed: Parsed, start: int = 0) -> Answer | None:
    """Strict extraction: the ``<final>`` block (its last ``\\boxed{}`` if it has one, else its whole text),
    else the last ``\\boxed{}`` of ``text[start:]``; never a bare number from free text. None when neither exists.
    """
    if parsed.final is not None:
        a, b = parsed.final
        inner = text[a:b]
        boxes = boxed_contents(inner)
        if boxes:
            s, e = boxes[-1]
            return Answer(clean_answer(inner[s:e]), "final", a + s, a + e, len(boxes))
        return Answer(clean_answer(inner), "final", a, b, 0)
    boxes = boxed_contents(text, start=start)
    if boxes:
        s, e = boxes[-1]
        return Answer(clean_answer(text[s:e]), "boxed", s, e, len(boxes))
    return None


def format_verdict(parsed: Parsed, think: ThinkSplit, ans: Answer | None) -> str:
    """The format of the answer after the think block: ``parsed.format``, but ``native`` for a reasoning model's
    own output (a closed think block, then an answer in ``\\boxed{}`` and no step or final tag at all)."""
    if parsed.format == FORMAT_MISSING and think.closed and ans is not None:
        return FORMAT_NATIVE
    return parsed.format


def paragraph_steps(text: str, start: int = 0, answer_at: int | None = None) -> list[Step]:
    """The paragraphs of ``text[start:]`` (the blank-line steps of ``verl_bot_contract.steps.split_steps``)
    before the one that holds the answer (its first step/final tag, else the answer at offset ``answer_at``), as
    steps 1..n. A paragraph step's block is its text, stripped: no blank line, as a tagged step's block holds nothing
    outside its tags. Without tag and answer, every paragraph is a step."""
    first_tag = _TAG.search(text, start)
    end = min(first_tag.start() if first_tag else len(text), len(text) if answer_at is None else answer_at)
    paragraphs = split_steps(text, BLANK_LINE, start, end)
    if end < len(text) and paragraphs and not separator_pattern(BLANK_LINE).search(text, paragraphs[-1].text_end, end):
        paragraphs.pop()  # no blank line between it and the answer: it is the answer's paragraph
    return [replace(p, start=p.text_start, end=p.text_end) for p in paragraphs]


def find_steps(
    text: str, parsed: Parsed, think: ThinkSplit, ans: Answer | None, untagged: str
) -> tuple[list[Step], str]:
    """(steps, where they come from): the tagged steps (``tags``); without any, after a closed think block and
    with ``untagged == "paragraphs"``, the answer's paragraphs before the answer (``paragraphs``); else none
    (``none``)."""
    if parsed.steps:
        return parsed.steps, "tags"
    if untagged == "paragraphs" and think.closed:
        steps = paragraph_steps(text, think.end, ans.start if ans else None)
        return steps, "paragraphs" if steps else "none"
    return [], "none"


_LATEX_CMD = re.compile(r"\\[A-Za-z]+")
_WORD = re.compile(r"[A-Za-z]{3,}")


def is_prose(ans: str) -> bool:
    """True when an answer holds words (3+ letters outside LaTeX commands), e.g. "33 unless it is 34".

    Used for AIME answers, which are a single integer: prose there is a hedge math-verify may read as a number.
    """
    return _WORD.search(_LATEX_CMD.sub(" ", ans)) is not None


def brace_depth(s: str) -> int:
    """Maximum ``{`` nesting depth of ``s`` (unbalanced closers ignored)."""
    depth = best = 0
    for c in s:
        if c == "{":
            depth += 1
            best = max(best, depth)
        elif c == "}":
            depth = max(0, depth - 1)
    return best


_INT = re.compile(r"^[+-]?\d{1,12}$")


def as_int_literal(s: str) -> int | None:
    """``int(s)`` when ``s`` is a plain integer literal (``033``, ``-5``, ``+7``), else None."""
    s = s.replace(" ", "").replace("{,}", "").replace(",", "") if len(s) < 64 else s
    return int(s) if _INT.match(s) else None


def aime_ground_truth(gt: object) -> int | None:
    """The AIME integer of a ground truth (``33``, ``"033"``, ``"33.0"``, ``"\\boxed{33}"``), else None.

    Range is NOT checked here (see :func:`in_aime_range`).
    """
    if isinstance(gt, bool):
        return None
    if isinstance(gt, int):
        return gt
    if isinstance(gt, float):
        return int(gt) if gt.is_integer() else None
    if isinstance(gt, str):
        s = gt.strip()
        boxes = boxed_contents(s)
        if boxes:
            s = s[boxes[-1][0] : boxes[-1][1]]
        s = clean_answer(s)
        if s.endswith(".0"):
            s = s[:-2]
        return as_int_literal(s)
    return None


def in_aime_range(v: int) -> bool:
    return 0 <= v <= 999


def problem_text(prompt: object) -> str:
    """The task text from a request's ``prompt``: a str, or the last user message of a chat list."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        for m in reversed(prompt):
            if isinstance(m, dict) and m.get("role") == "user":
                c = m.get("content")
                if isinstance(c, str):
                    return c
                if isinstance(c, list):
                    return "\n".join(p.get("text", "") for p in c if isinstance(p, dict))
    return ""
