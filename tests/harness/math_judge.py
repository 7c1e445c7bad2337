"""The math server's deterministic fake step judge (its rules: a step with WRONG is incorrect, UNSURE uncertain,
GARBAGE unparseable, HANG slow, FAIL500 an HTTP 500) and responses written in the server's step format."""

import re

from reward_servers.common.fake_judge import Rule, last_user_text


def review_block(messages) -> str:
    """The step under review in the judge prompt (between <<< and >>>)."""
    m = re.search(r"<<<\n(.*)\n>>>", last_user_text(messages), re.S)
    return m.group(1) if m else ""


def step_reply(messages) -> str:
    """The judge's reply to the step under review, by the marker it holds (module docstring)."""
    step = review_block(messages)
    if "WRONG" in step:
        return "The arithmetic is off.\nVERDICT: incorrect"
    if "UNSURE" in step:
        return "Cannot tell.\nVERDICT: uncertain"
    if "GARBAGE" in step:
        return "lorem ipsum dolor"
    return "Fine.\nVERDICT: correct"


RULES = [
    Rule(pattern=r"<<<\n[^<]*HANG", delay_s=3.0, reply="VERDICT: correct"),
    Rule(pattern=r"<<<\n[^<]*FAIL500", status=500),
    Rule(reply=step_reply),
]


def steps(*texts, final="33") -> str:
    """`texts` as the numbered steps of a response, then `final` as its answer (none when None)."""
    body = "\n".join(f"<step {i}>{t}</step {i}>" for i, t in enumerate(texts, 1))
    return f"{body}\n<final>{final}</final>" if final is not None else body
