"""A tiny deterministic OpenAI-compatible server for tests and CPU demos (no model weights).

``GET /v1/models`` and ``POST /v1/chat/completions``, whose content comes from the first :class:`Rule` whose regex
matches the LAST user message's text (text parts joined); a rule can also answer with an HTTP status, a raw non-JSON
body, or sleep first, and ``times`` limits how often it fires ("fail twice, then answer"). Every request body is kept
in :attr:`FakeJudge.requests` (image parts included) for assertions.

    with FakeJudge([Rule(r"WRONG", "incorrect"), Rule("", "correct")]) as fj:
        cfg = JudgeConfig(base_url=fj.base_url)

CLI (demo): ``python -m reward_servers.common.fake_judge --port 8000 --rules rules.json`` with a JSON list of
``{"pattern", "reply", "status", "delay_s", "times", "raw_body"}`` objects.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from reward_servers.common.judge import message_text


@dataclass
class Rule:
    """``pattern``: regex searched (DOTALL) in the last user message; "" matches everything.

    ``reply``: the completion text, or ``callable(messages) -> str``. ``status`` != 200 answers that status with a
    JSON error. ``raw_body``: sent verbatim (status 200) instead of a completion. ``delay_s``: sleep before
    answering. ``times``: fire at most this many times (None: always).
    """

    pattern: str = ""
    reply: str | Callable[[list[dict]], str] = ""
    status: int = 200
    delay_s: float = 0.0
    times: int | None = None
    raw_body: str | None = None
    fired: int = field(default=0, compare=False)

    def matches(self, text: str) -> bool:
        if self.times is not None and self.fired >= self.times:
            return False
        return re.search(self.pattern, text, re.S) is not None


def last_user_text(messages: Sequence[dict]) -> str:
    """Text of the last message with role "user" ("" if none)."""
    for m in reversed(list(messages)):
        if isinstance(m, dict) and m.get("role") == "user":
            return message_text(m.get("content"))
    return ""


class FakeJudge:
    """Runs in a daemon thread with its own event loop on a free loopback port. Thread-safe counters."""

    def __init__(
        self,
        rules: Sequence[Rule] = (),
        *,
        model: str = "fake-judge",
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ):
        self.rules = list(rules)
        self.model = model
        self.api_key = api_key
        self.host, self.port = host, port
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.in_flight = 0
        self.max_in_flight = 0  # highest number of chat requests being answered at once

    # -- inspection
    @property
    def count(self) -> int:
        """Number of chat completion requests received."""
        with self._lock:
            return len(self.requests)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def set_rules(self, rules: Sequence[Rule]) -> None:
        with self._lock:
            self.rules = list(rules)

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.max_in_flight = 0

    # -- server
    def _pick(self, text: str) -> Rule | None:
        with self._lock:
            for r in self.rules:
                if r.matches(text):
                    r.fired += 1
                    return r
        return None

    async def _models(self, request):
        from aiohttp import web

        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _chat(self, request):
        from aiohttp import web

        if self.api_key is not None and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return web.json_response({"error": {"message": "bad api key"}}, status=401)
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": {"message": "bad json"}}, status=400)
        with self._lock:
            self.requests.append(body)
        messages = body.get("messages") or []
        rule = self._pick(last_user_text(messages))
        if rule is None:
            rule = Rule(reply="")
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if rule.delay_s:
                await asyncio.sleep(rule.delay_s)
        finally:
            with self._lock:
                self.in_flight -= 1
        if rule.status != 200:
            return web.json_response({"error": {"message": f"scripted {rule.status}"}}, status=rule.status)
        if rule.raw_body is not None:
            return web.Response(text=rule.raw_body, content_type="application/json")
        content = rule.reply(messages) if callable(rule.reply) else rule.reply
        return web.json_response(
            {
                "id": f"chatcmpl-fake-{self.count}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", self.model),
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            }
        )

    async def _start_async(self) -> None:
        from aiohttp import web

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # resolved free port

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._start_async())
        except BaseException as e:  # noqa: BLE001
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    def start(self) -> FakeJudge:
        self._thread = threading.Thread(target=self._run, daemon=True, name="fake-judge")
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise RuntimeError(f"fake judge failed to start: {self._error}")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def __enter__(self) -> FakeJudge:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def rules_from_json(data: list[dict[str, Any]]) -> list[Rule]:
    """Build rules from JSON objects with Rule's field names."""
    keys = {"pattern", "reply", "status", "delay_s", "times", "raw_body"}
    return [Rule(**{k: v for k, v in d.items() if k in keys}) for d in data]


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model", default="fake-judge")
    p.add_argument("--rules", help="JSON file: a list of rule objects")
    args = p.parse_args(argv)
    rules = rules_from_json(json.load(open(args.rules))) if args.rules else [Rule(reply="")]
    fj = FakeJudge(rules, model=args.model, host=args.host, port=args.port).start()
    print(f"fake judge on {fj.base_url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        fj.stop()


if __name__ == "__main__":
    main()
