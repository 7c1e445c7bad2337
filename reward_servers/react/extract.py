"""Find the React component in a policy response.

Fenced blocks (``` or ~~~) with a JavaScript/TypeScript/React label or none are candidates (an unclosed fence runs
to the end); among those that look like a component (JSX or createElement, and a default export or a capitalised
declaration) the longest wins, ties the last; without a fence, the raw response from its first line that starts like
code. Otherwise the item gets the not-a-component sentinel. Only the answer is searched: ``extract(response, start)``
reads ``response[start:]`` (after a reasoning model's think block, ``verl_bot_contract.think``); offsets stay offsets
into ``response``. The rules in full: reward_servers/react/README.md (Extraction).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

CODE_LANGS = {"", "jsx", "tsx", "js", "ts", "javascript", "typescript", "react", "mjs", "cjs", "es6"}

_OPEN = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)[^\n]*$", re.M)
_RAW_START = re.compile(
    r"^[ \t]*(?:import[\s{*'\"]|export\s|(?:async\s+)?function[\s*]|const\s|let\s|var\s|class\s|['\"]use client['\"])",
    re.M,
)
_JSX = re.compile(r"<(?:[A-Za-z][\w.:-]*(?:\s[^<>]*)?/?|/[A-Za-z][\w.:-]*\s*|)>|\bcreateElement\s*\(")
_COMPONENT = re.compile(
    r"\bexport\s+default\b"
    r"|^[ \t]*(?:export\s+)?(?:(?:async\s+)?function\s*\*?\s*[A-Z]\w*"
    r"|(?:const|let|var)\s+[A-Z]\w*\s*(?::[^=\n]+)?=|class\s+[A-Z]\w*)",
    re.M,
)


@dataclass
class Extraction:
    code: str = ""
    start: int = 0
    end: int = 0
    is_component: bool = False
    source: str = "none"  # "fence", "raw" or "none"
    lang: str = ""
    blocks: int = 0  # fenced code-language blocks seen
    reason: str = ""
    notes: list[str] = field(default_factory=list)


def looks_like_component(code: str) -> bool:
    return bool(code.strip()) and _JSX.search(code) is not None and _COMPONENT.search(code) is not None


def _fenced_blocks(text: str) -> list[tuple[str, int, int]]:
    """(lang, code_start, code_end) of every fenced block, in order."""
    out = []
    pos = 0
    n = len(text)
    while pos < n:
        m = _OPEN.search(text, pos)
        if m is None:
            break
        fence = m.group(1)
        lang = re.match(r"[a-z0-9]*", m.group(2).lower()).group()
        body_start = m.end() + 1 if m.end() < n else n
        close = re.compile(r"^[ \t]{0,3}" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$", re.M)
        c = close.search(text, body_start)
        if c is None:
            body_end = n
            pos = n
        else:
            body_end = c.start()
            pos = c.end()
        if body_end > body_start and text[body_end - 1] == "\n":
            body_end -= 1  # the newline before the closing fence is not code
        out.append((lang, body_start, max(body_start, body_end)))
    return out


def extract(response: str, start: int = 0) -> Extraction:
    """The component of ``response[start:]`` (rules: reward_servers/react/README.md), offsets into ``response``."""
    ex = _extract(response[start:])
    ex.start += start
    ex.end += start
    return ex


def _extract(response: str) -> Extraction:
    """The component of ``response`` (rules: reward_servers/react/README.md)."""
    if not response or not response.strip():
        return Extraction(reason="empty response")
    blocks = [b for b in _fenced_blocks(response) if b[0] in CODE_LANGS]
    if blocks:
        comps = [b for b in blocks if looks_like_component(response[b[1] : b[2]])]
        pool = comps or blocks
        best = max(enumerate(pool), key=lambda ib: (ib[1][2] - ib[1][1], ib[0]))[1]
        lang, s, e = best
        ex = Extraction(code=response[s:e], start=s, end=e, source="fence", lang=lang, blocks=len(blocks))
        ex.is_component = bool(comps)
        if not comps:
            ex.reason = "no fenced block looks like a React component"
        if len(blocks) > 1:
            ex.notes.append(f"{len(blocks)} code blocks; used the longest component-like one")
        return ex
    m = _RAW_START.search(response)
    if m is None:
        return Extraction(reason="no code found")
    s = m.start()
    e = len(response.rstrip())
    code = response[s:e]
    ex = Extraction(code=code, start=s, end=e, source="raw", blocks=0)
    ex.is_component = looks_like_component(code)
    if not ex.is_component:
        ex.reason = "code does not look like a React component"
    return ex


def line_starts(code: str) -> list[int]:
    """Offsets (into ``code``) where each 1-based line starts; index 0 is line 1."""
    starts = [0]
    idx = code.find("\n")
    while idx != -1:
        starts.append(idx + 1)
        idx = code.find("\n", idx + 1)
    return starts


def numbered(code: str) -> str:
    lines = code.split("\n")
    width = len(str(len(lines)))
    return "\n".join(f"{i:>{width}} | {line}" for i, line in enumerate(lines, 1))
