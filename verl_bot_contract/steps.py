"""The steps of a response: one `Step` and one splitter for the reward servers and verl-bot.

A step ends at a run of a separator. The default separator is a blank line (`BLANK_LINE`, written "\\n\\n"): any
run of line breaks with nothing but spaces, tabs or carriage returns between them ("\\n\\n", "\\n\\n\\n",
"\\r\\n \\r\\n"). Who splits with it:

- the math server: the paragraphs of an answer without step tags (`reward_servers.math.parsing.paragraph_steps`),
  whose tagged steps are `Step`s too;
- the served PRM: the steps it scores (`verl_bot.rewards.prm.answer_steps`, `prm.step_separator`);
- the reward streams: the `step_end` stream of PURE (`verl_bot.credit.streams.step_end_mask`).

Pure `re`, nothing of verl: the math server runs without it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

BLANK_LINE = "\n\n"
_BLANK_LINES = re.compile(r"\n(?:[ \t\r]*\n)+")


@dataclass(frozen=True)
class Step:
    """One step of a response; offsets are Python string indices into the response, spans half-open.

    index: 1-based (a tagged step: the number its tag gives).
    start, end: the step's block: a split step's runs from the end of the previous separator to the end of its own
        (separator included, so the token that ends the step holds it); a tagged step's from its opening tag to its
        closing tag, both included.
    text_start, text_end, text: what a judge reads: a split step's text stripped of surrounding whitespace, a tagged
        step's text between its tags.
    closed: False for a tagged step whose closing tag is missing.
    """

    index: int
    start: int
    end: int
    text_start: int
    text_end: int
    text: str
    closed: bool = True


def separator_pattern(separator: str) -> re.Pattern:
    """A run of `separator`: for `BLANK_LINE` a run of blank lines (whitespace-only lines count); for another
    separator of one repeated character (`"##"`) any longer run of that character too; else repeats of it."""
    if separator == BLANK_LINE:
        return _BLANK_LINES
    if len(set(separator)) == 1:
        return re.compile(re.escape(separator) + re.escape(separator[0]) + "*")
    return re.compile(f"(?:{re.escape(separator)})+")


def split_steps(text: str, separator: str = BLANK_LINE, start: int = 0, end: int | None = None) -> list[Step]:
    """The steps of `text[start:end]`, split at runs of `separator` (`separator_pattern`), offsets into `text`.

    Step k's block runs from the end of the previous separator run (`start` for the first) to the end of its own
    (`end` for the last). A piece with no visible text (leading separators, a whitespace-only piece) joins the next
    step's block, a trailing one the last step's. Steps are numbered 1..n.
    """
    end = len(text) if end is None else end
    pieces, begin = [], start
    for match in separator_pattern(separator).finditer(text, start, end):
        pieces.append((begin, match.start(), match.end()))
        begin = match.end()
    pieces.append((begin, end, end))
    steps: list[Step] = []
    pending = None  # the start of the pieces without visible text waiting for the next step
    for block_start, content_end, block_end in pieces:
        content = text[block_start:content_end]
        stripped = content.strip()
        if not stripped:
            pending = block_start if pending is None else pending
            continue
        text_start = block_start + len(content) - len(content.lstrip())
        steps.append(Step(len(steps) + 1, block_start if pending is None else pending, block_end, text_start,
                          text_start + len(stripped), stripped))
        pending = None
    if pending is not None and steps:
        steps[-1] = replace(steps[-1], end=end)
    return steps
