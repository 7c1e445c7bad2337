"""Async client for an OpenAI-compatible chat endpoint (``vllm serve``, OpenAI, the fake judge in tests).

    cfg = JudgeConfig.from_env("MATH_JUDGE_", model="Qwen/Qwen2.5-7B-Instruct")
    async with JudgeClient(cfg) as judge:
        text = await judge.chat([{"role": "user", "content": "..."}])          # -> str
        text = await judge.chat([user_message("Rate this page", png_bytes)])   # text + image part

Errors are typed so callers can flag an item instead of failing it:
- :class:`JudgeUnavailable`: connection refused, timeout, HTTP 429/5xx after all retries (flag ``judge_unavailable``);
- :class:`JudgeBadResponse`: HTTP 4xx other than 429, or a body without ``choices[0].message.content``.
Both derive from :class:`JudgeError`. Retries use exponential backoff ``backoff_s * 2**attempt`` (capped) and the
number of requests in flight is capped by a semaphore (``max_concurrency``) per client.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any


class JudgeError(Exception):
    """Base class of judge failures."""


class JudgeUnavailable(JudgeError):
    """The endpoint could not answer (network error, timeout, 429/5xx) after all retries."""


class JudgeBadResponse(JudgeError):
    """The endpoint answered, but not with a usable chat completion (4xx, malformed body)."""


@dataclass(frozen=True)
class JudgeConfig:
    """Connection settings. ``base_url`` includes the ``/v1`` prefix. ``model`` None: the first id of GET /models.

    Times are seconds. ``max_retries`` counts extra attempts after the first one.
    """

    base_url: str = "http://127.0.0.1:8000/v1"
    model: str | None = None
    api_key: str | None = None
    timeout_s: float = 60.0
    connect_timeout_s: float = 5.0
    max_retries: int = 2
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0
    max_concurrency: int = 16
    temperature: float = 0.0
    max_tokens: int = 512
    extra_body: dict = field(default_factory=dict)  # merged into every request body (e.g. {"seed": 0})

    @classmethod
    def from_env(cls, prefix: str = "JUDGE_", **overrides: Any) -> JudgeConfig:
        """Read ``{prefix}BASE_URL``, ``MODEL``, ``API_KEY`` (fallback ``OPENAI_API_KEY``), ``TIMEOUT_S``,
        ``MAX_RETRIES``, ``MAX_CONCURRENCY``, ``MAX_TOKENS``, ``TEMPERATURE``. ``overrides`` that are not None win
        over the environment, which wins over the defaults."""
        env = os.environ
        vals: dict[str, Any] = {}
        casts = {
            "base_url": str,
            "model": str,
            "api_key": str,
            "timeout_s": float,
            "max_retries": int,
            "max_concurrency": int,
            "max_tokens": int,
            "temperature": float,
            "backoff_s": float,
        }
        for name, cast in casts.items():
            raw = env.get(prefix + name.upper())
            if raw not in (None, ""):
                vals[name] = cast(raw)
        if "api_key" not in vals and env.get("OPENAI_API_KEY"):
            vals["api_key"] = env["OPENAI_API_KEY"]
        vals.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**vals)

    def replace(self, **changes: Any) -> JudgeConfig:
        return dataclasses.replace(self, **changes)


def image_part(png: bytes, mime: str = "image/png") -> dict:
    """An ``image_url`` content part carrying ``png`` as a base64 data URL (vLLM and OpenAI accept it)."""
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{base64.b64encode(png).decode('ascii')}"}}


def text_part(text: str) -> dict:
    return {"type": "text", "text": text}


def user_message(text: str, *images: bytes) -> dict:
    """A user message: plain string content without images, else a list of one text part and image parts."""
    if not images:
        return {"role": "user", "content": text}
    return {"role": "user", "content": [text_part(text), *(image_part(im) for im in images)]}


def message_text(content: Any) -> str:
    """The text of a message's ``content`` (str, or a list of parts: text parts joined by newlines)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


class JudgeClient:
    """One aiohttp session + one semaphore per event loop. Use as ``async with`` or call :meth:`close`."""

    def __init__(self, config: JudgeConfig):
        self.config = config
        self._session = None
        self._sem: asyncio.Semaphore | None = None
        self._loop = None
        self._model: str | None = config.model
        self.requests_sent = 0  # attempts, retries included (metrics / tests)

    async def __aenter__(self) -> JudgeClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    def _headers(self) -> dict:
        h = {"Content-Type": "application/json"}
        if self.config.api_key:
            h["Authorization"] = f"Bearer {self.config.api_key}"
        return h

    def _ensure(self):
        import aiohttp

        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            timeout = aiohttp.ClientTimeout(total=self.config.timeout_s, connect=self.config.connect_timeout_s)
            self._session = aiohttp.ClientSession(timeout=timeout, headers=self._headers())
            self._sem = asyncio.Semaphore(self.config.max_concurrency)
            self._loop = loop
        return self._session

    def _url(self, path: str) -> str:
        return self.config.base_url.rstrip("/") + path

    async def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        """One call with retries; returns the decoded JSON body."""
        import aiohttp

        session = self._ensure()
        cfg = self.config
        last: str = ""
        for attempt in range(cfg.max_retries + 1):
            if attempt:
                await asyncio.sleep(min(cfg.backoff_max_s, cfg.backoff_s * 2 ** (attempt - 1)))
            assert self._sem is not None
            async with self._sem:
                self.requests_sent += 1
                try:
                    async with session.request(method, self._url(path), json=body) as resp:
                        text = await resp.text(errors="replace")
                        status = resp.status
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
                    last = f"{type(e).__name__}: {e}"
                    continue
            if status == 429 or status >= 500:
                last = f"HTTP {status}: {text[:200]}"
                continue
            if status >= 400:
                raise JudgeBadResponse(f"HTTP {status}: {text[:200]}")
            try:
                return json.loads(text)
            except ValueError as e:
                raise JudgeBadResponse(f"body is not JSON: {text[:200]!r}") from e
        raise JudgeUnavailable(f"{method} {path} failed after {cfg.max_retries + 1} attempts: {last}")

    async def model(self) -> str:
        """The model name: the configured one, else the first id listed by GET /models (cached)."""
        if self._model is None:
            data = await self._request("GET", "/models")
            try:
                self._model = str(data["data"][0]["id"])
            except (KeyError, IndexError, TypeError) as e:
                raise JudgeBadResponse(f"no model listed: {str(data)[:200]}") from e
        return self._model

    async def ping(self) -> bool:
        """True when GET /models answers (for /health); never raises."""
        try:
            await self._request("GET", "/models")
            return True
        except JudgeError:
            return False

    async def chat(
        self,
        messages: list[dict],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        **extra: Any,
    ) -> str:
        """POST /chat/completions; returns ``choices[0].message.content`` (str). Raises :class:`JudgeError`."""
        cfg = self.config
        body = {
            "model": await self.model(),
            "messages": messages,
            "max_tokens": cfg.max_tokens if max_tokens is None else max_tokens,
            "temperature": cfg.temperature if temperature is None else temperature,
            **cfg.extra_body,
            **extra,
        }
        data = await self._request("POST", "/chat/completions", body)
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as e:
            raise JudgeBadResponse(f"no choices[0].message.content in {str(data)[:200]}") from e
        if not isinstance(content, str):
            raise JudgeBadResponse(f"content is not a string: {content!r:.200}")
        return content
