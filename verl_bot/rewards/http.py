"""The HTTP plumbing the `bot` manager's clients share (`scorers.HttpScorer`, `prm.PrmClient`).

- `LoopSession`: one aiohttp session per event loop: a session belongs to the loop it was made in, so a new
  loop (a caller's new `asyncio.run`) gets its own;
- `retried`: an attempt, retried with exponential backoff (`backoff_s * 2**attempt`) on any exception but the
  fatal ones; when every attempt failed, `RetriesExhausted` carries one line per attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


class RetriesExhausted(Exception):
    """Every attempt failed; `errors`: one `<label><Type>: <message>` line per attempt."""

    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


class LoopSession:
    """An aiohttp `ClientSession` (total timeout `timeout_s`, default headers from `headers()`, read when a session
    is made) for the running event loop."""

    def __init__(self, timeout_s: float, headers: Callable[[], dict[str, str]] | None = None):
        self.timeout_s = timeout_s
        self.headers = headers
        self._session: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> Any:
        """The running loop's session, made on first use (or when the loop changed or it was closed)."""
        import aiohttp

        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s), headers=self.headers() if self.headers else None
            )
            self._loop = loop
        return self._session


async def retried(
    attempt: Callable[[int], Awaitable[T]],
    retries: int,
    backoff_s: float,
    fatal: type[BaseException] | tuple[type[BaseException], ...] = (),
    label: Callable[[int], str] = lambda _: "",
) -> T:
    """`await attempt(k)` for k = 0..retries until one returns; a `fatal` exception is raised at once, any other
    is recorded as `label(k) + "<Type>: <message>"` and retried after `backoff_s * 2**k` seconds. Raises
    `RetriesExhausted` with the records when no attempt succeeded."""
    errors = []
    for k in range(retries + 1):
        try:
            return await attempt(k)
        except fatal:
            raise
        except Exception as exc:  # noqa: BLE001 - every other failure is retried, then reported
            errors.append(f"{label(k)}{type(exc).__name__}: {exc}")
        if k < retries:
            await asyncio.sleep(backoff_s * 2**k)
    raise RetriesExhausted(errors)
