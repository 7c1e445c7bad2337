"""Pluggable scorers: text in, REWARD_API verdict out, chosen per `data_source`.

A scorer has `async score(item) -> verdict` (a REWARD_API request item in, its response item out). `HttpScorer`: a
reward server at one or several base URLs, round-robin with retries and backoff, `REWARD_SERVER_TOKEN` as a bearer
token, a refused credential (HTTP 401/403) a configuration error (`ScorerRefused`) that stops the run.
`PythonScorer`: an in-process function, sync (in a thread) or async, given `turns=` when it takes that parameter.
A spec is `builtin:NAME` (`BUILTIN_SCORERS`, imported on first use), `python:module:function` or URL(s); an
in-process spec takes noise options after `?` (`verl_bot.rewards.noise`). Explained in docs/REWARD_API.md and
docs/knobs.md (`+reward.reward_kwargs.bot.scorers.<data_source>`).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import itertools
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from verl_bot.errors import VerlBotConfigError
from verl_bot.rewards.http import LoopSession, RetriesExhausted, retried
from verl_bot.rewards.noise import LocalNoise

# name -> "module:function" of each scorer shipped with verl-bot, one row each; its module is imported when a run
# first scores a row with it (a run that names none loads none, and toy_math's alone loads the math server)
BUILTIN_SCORERS: dict[str, str] = {
    "toy_lint": "verl_bot_demo.scorers:toy_lint",
    "toy_math": "verl_bot_demo.scorers:toy_math",
    "toy_calc": "verl_bot_demo.scorers:toy_calc",
    "toy_turns": "verl_bot_demo.scorers:toy_turns",
}
# data_source -> scorer spec used when the config names no scorer for it
DEFAULT_SCORERS: dict[str, str] = {name: f"builtin:{name}" for name in BUILTIN_SCORERS}
TOKEN_ENV = "REWARD_SERVER_TOKEN"  # the reward servers' bearer-token variable (reward_servers/common/service.py)


class ScorerError(RuntimeError):
    """A scorer could not produce a verdict (raised, timed out, server unreachable, bad answer)."""


class ScorerRefused(VerlBotConfigError):
    """A reward server refused our credentials (HTTP 401/403): no retry can fix it, the run must stop."""


class ScorerNotConfigured(VerlBotConfigError):
    """No scorer serves a row's `data_source`."""


OPTIONAL_ITEM_KEYS = ("turns", "trajectories")  # request keys a python: scorer gets as keywords if it takes them


class PythonScorer:
    """Runs an in-process scoring function (sync functions in a worker thread); `noise` makes its local signal
    noisy (`verl_bot.rewards.noise`). `fn` is the function, or its "module:function" path, imported on first use."""

    def __init__(self, fn: Callable[..., Any] | str, noise: LocalNoise | None = None):
        self._fn = fn
        self.noise = noise

    @functools.cached_property
    def function(self) -> tuple[Callable[..., Any], bool, list[str]]:
        """The function, whether it is async, and the optional item keys its signature takes (passed to it)."""
        fn = _load_function(self._fn) if isinstance(self._fn, str) else self._fn
        parameters = inspect.signature(fn).parameters
        return fn, inspect.iscoroutinefunction(fn), [key for key in OPTIONAL_ITEM_KEYS if key in parameters]

    async def score(self, item: dict) -> dict:
        fn, is_async, optional = self.function
        args = (item["prompt"], item["response"], item.get("ground_truth"), item.get("extra_info"))
        call = functools.partial(fn, *args, **{key: item.get(key) for key in optional})
        if is_async:
            verdict = await call()
        else:
            verdict = await asyncio.get_running_loop().run_in_executor(None, call)
        return self.noise.apply(verdict, item["response"]) if self.noise is not None else verdict


def _auth_headers() -> dict[str, str]:
    """The bearer token of `REWARD_SERVER_TOKEN` from the trainer's environment, if set."""
    token = os.environ.get(TOKEN_ENV)
    return {"Authorization": f"Bearer {token}"} if token else {}


def _refused(url: str, status: int) -> ScorerRefused:
    return ScorerRefused(
        f"reward server {url}/score answered HTTP {status} (credentials refused): set {TOKEN_ENV} in the "
        "trainer's environment to the server's --token"
    )


class HttpScorer:
    """Client of a REWARD_API reward server; several base URLs are used round-robin."""

    def __init__(self, urls: list[str], timeout_s: float = 120.0, retries: int = 2, backoff_s: float = 0.5):
        if not urls:
            raise ValueError("HttpScorer needs at least one URL")
        self.urls = [u.rstrip("/") for u in urls]
        self._starts = itertools.count()
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self._session = LoopSession(timeout_s, headers=_auth_headers)

    def _url(self, start: int, attempt: int) -> str:
        """Round-robin over items, and each retry of an item on the next URL: with two URLs and a retry, an item
        tries both (a server that is down costs no rollout while another one answers)."""
        return self.urls[(start + attempt) % len(self.urls)]

    async def _post(self, url: str, payload: dict) -> dict:
        async with self._session.get().post(f"{url}/score", json=payload) as resp:
            if resp.status in (401, 403):
                raise _refused(url, resp.status)
            if resp.status != 200:
                body = (await resp.text())[:200]
                raise ScorerError(f"{url}/score answered HTTP {resp.status}: {body}")
            return await resp.json()

    async def check_credentials(self, timeout_s: float = 5.0) -> None:
        """Raise `ScorerRefused` if a server refuses our token (an empty batch, `{"items": []}`, to each URL).

        Any other outcome (a server not up yet, a timeout, an answer) passes: the run's own calls retry those
        and flag what fails; only refused credentials are a misconfiguration no retry can fix."""
        import aiohttp

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s), headers=_auth_headers()) as s:
            for url in self.urls:
                try:
                    async with s.post(f"{url}/score", json={"items": []}) as resp:
                        status = resp.status
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                    continue
                if status in (401, 403):
                    raise _refused(url, status)

    async def score(self, item: dict) -> dict:
        start = next(self._starts)

        async def attempt(k: int) -> dict:
            url = self._url(start, k)
            answer = await self._post(url, {"items": [item]})
            items = answer.get("items") if isinstance(answer, dict) else None
            if not isinstance(items, list) or len(items) != 1:
                raise ScorerError(f"{url}/score returned {str(answer)[:200]!r}, expected one item")
            return items[0]

        try:  # every failure but refused credentials is retried, then reported as ScorerError
            return await retried(attempt, self.retries, self.backoff_s, fatal=ScorerRefused,
                                 label=lambda k: f"{self._url(start, k)}: ")
        except RetriesExhausted as exc:
            raise ScorerError(str(exc)) from None


def _load_function(path: str) -> Callable[..., Any]:
    module_name, _, attr = path.partition(":")
    if not attr:
        raise ValueError(f"python scorer spec must be 'python:module:function', got 'python:{path}'")
    return getattr(importlib.import_module(module_name), attr)


NOISE_OPTIONS = {"flip": float, "jitter": float, "seed": int}


def _noise_option(spec: str) -> tuple[str, LocalNoise | None]:
    """Split `builtin:NAME?flip=..&jitter=..&seed=..` into the spec and its noise (None without options)."""
    base, sep, query = spec.partition("?")
    if not sep:
        return spec, None
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
        if not pairs:
            raise ValueError("no option after '?'")
        unknown = sorted({key for key, _ in pairs} - set(NOISE_OPTIONS))
        if unknown:
            raise ValueError(f"unknown option(s) {unknown}")
        return base, LocalNoise(**{key: NOISE_OPTIONS[key](value) for key, value in pairs})
    except ValueError as exc:
        raise ValueError(
            f"scorer spec {spec!r}: {exc}; options are {'&'.join(f'{k}=..' for k in NOISE_OPTIONS)}"
        ) from exc


def build_scorer(spec: Any, timeout_s: float = 120.0, retries: int = 2) -> PythonScorer | HttpScorer:
    """Build one scorer from its spec (see the module docstring)."""
    if isinstance(spec, list | tuple) or (hasattr(spec, "__iter__") and not isinstance(spec, str)):
        urls = [str(u) for u in spec]
        return HttpScorer(urls, timeout_s=timeout_s, retries=retries)
    spec = str(spec).strip()
    if spec.startswith("builtin:"):
        spec, noise = _noise_option(spec)
        name = spec.removeprefix("builtin:")
        if name not in BUILTIN_SCORERS:
            raise ValueError(f"unknown builtin scorer {name!r}; built-in: {sorted(BUILTIN_SCORERS)}")
        return PythonScorer(BUILTIN_SCORERS[name], noise)
    if spec.startswith("python:"):
        spec, noise = _noise_option(spec)
        return PythonScorer(_load_function(spec.removeprefix("python:")), noise)
    if spec.startswith(("http://", "https://")):
        return HttpScorer([u.strip() for u in spec.split(",") if u.strip()], timeout_s=timeout_s, retries=retries)
    raise ValueError(f"scorer spec {spec!r} is none of builtin:NAME, python:MODULE:FN, http(s)://URL[,URL...]")


def build_scorers(specs: dict[str, Any], timeout_s: float = 120.0, retries: int = 2) -> dict[str, Any]:
    """data_source -> scorer, from the built-in defaults overridden by `specs`."""
    merged = {**DEFAULT_SCORERS, **dict(specs or {})}
    return {source: build_scorer(spec, timeout_s=timeout_s, retries=retries) for source, spec in merged.items()}

