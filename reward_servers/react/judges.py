"""LLM code judge and VLM screenshot judge (two-turn local attribution) over OpenAI-compatible endpoints.

Prompts live in ``prompts/`` (override the folder with ``--prompts-dir``). Placeholders ``{prompt}``,
``{numbered_code}``, ``{fence_open}``, ``{fence_close}`` are filled in one pass, so text inside the code is
never re-interpreted as a placeholder. The code is wrapped in markers derived from its hash, which the code
cannot contain, and the system prompts tell the judge that the code is data.

Parsing is lenient (a JSON object anywhere in the reply, else ``score: 7`` / ``7/10`` / a bare number);
a reply without a score counts as unparseable (the part is 0, flag ``judge_unparseable``). A judge that is
down (connection errors, timeouts, 5xx after the client's retries) raises no error: status ``unavailable``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from reward_servers.common.judge import JudgeClient, JudgeConfig, JudgeError, message_text, user_message

from .extract import numbered

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
_PLACEHOLDER = re.compile(r"\{(prompt|numbered_code|fence_open|fence_close|code)\}")


def load_prompts(folder: str | Path | None = None) -> dict[str, str]:
    d = Path(folder) if folder else PROMPTS_DIR
    names = ["llm_code_judge", "llm_code_judge_user", "vlm_judge", "vlm_judge_user", "vlm_attribution_user"]
    return {n: (d / f"{n}.md").read_text(encoding="utf-8") for n in names}


def fill(template: str, **values: str) -> str:
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def fences(code: str) -> tuple[str, str]:
    h = hashlib.sha256(code.encode("utf-8", "replace")).hexdigest()[:16]
    return f"<<<CODE {h}>>>", f"<<<END CODE {h}>>>"


def prompt_text(prompt: Any) -> str:
    """The task text: a string, or the user turns of a chat list."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        parts = [message_text(m.get("content")) for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return "\n\n".join(p for p in parts if p)
    return "" if prompt is None else str(prompt)


def _json_objects(text: str):
    for m in re.finditer(r"\{[^{}]*\}", text):
        try:
            obj = json.loads(m.group(0))
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield obj


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f and abs(f) != float("inf") else None


def parse_score(text: str) -> float | None:
    """A 0-10 score from a judge reply (clipped), or None when there is none."""
    if not text:
        return None
    for obj in _json_objects(text):
        if "score" in obj and _num(obj["score"]) is not None:
            return min(10.0, max(0.0, _num(obj["score"])))
    m = re.search(r"score[\"'*\s]*[:=]?\s*\**\s*(-?\d+(?:\.\d+)?)", text, re.I)
    if m is None:
        m = re.search(r"(-?\d+(?:\.\d+)?)\s*/\s*10\b", text)
    if m is None:
        m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*\.?\s*", text)
    if m is None:
        return None
    return min(10.0, max(0.0, float(m.group(1))))


def parse_lines(text: str, keys: tuple[str, ...], n_lines: int, limit: int = 3) -> list[int] | None:
    """Line numbers (1..n_lines, deduplicated, in order, at most ``limit``); None when none can be read."""
    if not text:
        return None
    raw: list[Any] | None = None
    for obj in _json_objects(text.replace("\n", " ")):
        for k in keys:
            if isinstance(obj.get(k), list):
                raw = obj[k]
                break
        if raw is not None:
            break
    if raw is None:
        m = re.search(r"(?:lines?|worst_lines)[\"'*\s]*[:=]?\s*\[?\s*((?:\d+\s*(?:,|and)?\s*){1,10})", text, re.I)
        if m is None:
            return None
        raw = re.findall(r"\d+", m.group(1))
    out: list[int] = []
    for v in raw:
        f = _num(v)
        if f is None:
            continue
        ln = int(f)
        if 1 <= ln <= n_lines and ln not in out:
            out.append(ln)
        if len(out) >= limit:
            break
    return out


class ReactJudges:
    """Holds one client per enabled judge (create it in the server's loop)."""

    def __init__(self, llm: JudgeConfig | None, vlm: JudgeConfig | None, prompts_dir: str | None = None):
        self.llm_cfg, self.vlm_cfg = llm, vlm
        self.prompts = load_prompts(prompts_dir)
        self.llm_client: JudgeClient | None = None
        self.vlm_client: JudgeClient | None = None
        self.stats: Counter = Counter()

    async def start(self) -> None:
        if self.llm_cfg is not None:
            self.llm_client = JudgeClient(self.llm_cfg)
        if self.vlm_cfg is not None:
            self.vlm_client = JudgeClient(self.vlm_cfg)

    async def close(self) -> None:
        for c in (self.llm_client, self.vlm_client):
            if c is not None:
                await c.close()

    async def health(self) -> dict:
        out = {}
        for name, c in (("llm", self.llm_client), ("vlm", self.vlm_client)):
            out[name] = "disabled" if c is None else ("up" if await c.ping() else "down")
        return out

    async def llm(self, prompt: Any, code: str) -> dict:
        assert self.llm_client is not None
        fo, fc = fences(code)
        n_lines = code.count("\n") + 1
        user = fill(self.prompts["llm_code_judge_user"], prompt=prompt_text(prompt), numbered_code=numbered(code),
                    fence_open=fo, fence_close=fc)
        messages = [{"role": "system", "content": self.prompts["llm_code_judge"]}, {"role": "user", "content": user}]
        try:
            text = await self.llm_client.chat(messages)
        except JudgeError as e:
            self.stats["llm_unavailable"] += 1
            return {"status": "unavailable", "score": None, "worst_lines": [], "error": str(e)[:300]}
        score = parse_score(text)
        lines = parse_lines(text, ("worst_lines", "lines"), n_lines) or []
        if score is None:
            self.stats["llm_unparseable"] += 1
            return {"status": "unparseable", "score": None, "worst_lines": lines, "raw": text[:300]}
        self.stats["llm_ok"] += 1
        return {"status": "ok", "score": score, "worst_lines": lines}

    async def vlm(self, prompt: Any, png: bytes, code: str, attribution: bool, mime: str = "image/png") -> dict:
        """Turn 1: prompt + screenshot -> score (locked). Turn 2 (``attribution``): that exchange plus the
        numbered code -> line attributions only; any score in turn 2 is ignored."""
        assert self.vlm_client is not None
        user1 = fill(self.prompts["vlm_judge_user"], prompt=prompt_text(prompt))
        messages = [{"role": "system", "content": self.prompts["vlm_judge"]}, user_message(user1, png)]
        if mime != "image/png":
            messages[1]["content"] = [p if p.get("type") != "image_url" else
                                      {**p, "image_url": {"url": p["image_url"]["url"].replace("image/png", mime)}}
                                      for p in messages[1]["content"]]
        try:
            text = await self.vlm_client.chat(messages)
        except JudgeError as e:
            self.stats["vlm_unavailable"] += 1
            return {"status": "unavailable", "score": None, "lines": [], "error": str(e)[:300]}
        score = parse_score(text)
        out: dict[str, Any] = {"status": "ok", "score": score, "lines": []}
        if score is None:
            self.stats["vlm_unparseable"] += 1
            out["status"] = "unparseable"
            out["raw"] = text[:300]
            return out
        self.stats["vlm_ok"] += 1
        if not attribution:
            return out
        fo, fc = fences(code)
        user2 = fill(self.prompts["vlm_attribution_user"], numbered_code=numbered(code), fence_open=fo,
                     fence_close=fc)
        messages2 = messages + [{"role": "assistant", "content": text}, {"role": "user", "content": user2}]
        try:
            text2 = await self.vlm_client.chat(messages2)
        except JudgeError as e:
            self.stats["vlm_attribution_unavailable"] += 1
            out["attribution"] = "unavailable"
            out["attribution_error"] = str(e)[:300]
            return out
        lines = parse_lines(text2, ("lines", "worst_lines"), code.count("\n") + 1)
        if lines is None:
            self.stats["vlm_attribution_unparseable"] += 1
            out["attribution"] = "unparseable"
        else:
            out["attribution"] = "ok"
            out["lines"] = lines
        return out
