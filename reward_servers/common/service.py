"""HTTP service factory shared by every reward server (contract: docs/REWARD_API.md).

A task plugs in a :class:`Scorer` (one coroutine scoring ONE item); :func:`create_app` wraps it into a FastAPI app
with ``GET /health`` and ``POST /score``: items scored concurrently and independently (a malformed item, an exception
or a per-item timeout is an error result for that item only, ``global.score`` = the scorer's sentinel), request
limits answered 413, 401 or 400 and never a 5xx (which the manager retries as a transient fault), strings sanitised
before the scorer sees them (lone surrogates become U+FFFD one-for-one, so character offsets stay valid; flag
``invalid_utf8``). The endpoints, status codes and limits: docs/REWARD_API.md, section Endpoints.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import logging
import math
import os
import re
import socket
import threading
import time
from collections.abc import Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from verl_bot_contract.loopback import listens_beyond_loopback
from verl_bot_contract.verdict import Span, validate_verdict

log = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_ITEMS = 4096
DEFAULT_ITEM_TIMEOUT_S = 300.0
MAX_JSON_DEPTH = 64  # a body nested deeper is refused (400); a request of the contract nests about 6 levels deep
TOKEN_ENV = "REWARD_SERVER_TOKEN"

_SURROGATES = re.compile("[\ud800-\udfff]")


# ----------------------------------------------------------------------------------------------------------- data


@dataclass
class ScoreItem:
    """One validated request item. ``response``/``prompt`` are sanitised str; offsets index ``response``."""

    id: Any
    response: str
    prompt: Any = ""  # str, or a chat list as sent by the client (passed through)
    ground_truth: Any = None
    extra_info: dict = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)  # set by validation (e.g. "invalid_utf8"); copy into results


@dataclass
class ItemResult:
    """Per-item result in docs/REWARD_API.md's shape. ``score`` is G; by convention ``sum(parts.values())``."""

    id: Any = None
    score: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)
    local: list[Span] = field(default_factory=list)
    info: dict = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "global": {"score": float(self.score), "parts": {k: float(v) for k, v in self.parts.items()}},
            "local": [dict(s) for s in self.local],
            "info": self.info,
            "flags": list(dict.fromkeys(self.flags)),  # dedupe, keep order
            "error": self.error,
        }


def error_result(item_id: Any, message: str, sentinel: float, flags: Iterable[str] = ()) -> ItemResult:
    """The result of an item that could not be scored: G = ``sentinel``, no parts, no local spans."""
    return ItemResult(id=item_id, score=sentinel, error=message, flags=list(flags))


def combine_spans(spans: Iterable[Span], length: int | None = None) -> list[Span]:
    """Turn possibly overlapping spans into sorted, disjoint spans whose values add up where they overlap.

    ``length`` (if given) clamps spans to ``[0, length)``. Empty spans and zero-valued segments are dropped;
    adjacent segments with equal values are merged. O(n log n) in the number of spans.
    """
    events: dict[int, float] = {}
    for s in spans:
        start, end, value = int(s["start"]), int(s["end"]), s["value"]
        if length is not None:
            start, end = max(0, start), min(int(length), end)
        if end <= start or value == 0:
            continue
        events[start] = events.get(start, 0.0) + float(value)
        events[end] = events.get(end, 0.0) - float(value)
    out: list[Span] = []
    level = 0.0
    points = sorted(events)
    for a, b in zip(points, points[1:], strict=False):
        level += events[a]
        if abs(level) < 1e-12:
            continue
        if out and out[-1]["end"] == a and out[-1]["value"] == level:
            out[-1]["end"] = b
        else:
            out.append(Span(start=a, end=b, value=level))
    return out


def sanitize_text(text: str) -> tuple[str, bool]:
    """Replace lone surrogates with U+FFFD (same length). Returns ``(clean, had_invalid)``."""
    if _SURROGATES.search(text) is None:
        return text, False
    return _SURROGATES.sub("\ufffd", text), True


def _sanitize_obj(obj: Any) -> tuple[Any, bool]:
    """Recursive :func:`sanitize_text` over JSON values."""
    if isinstance(obj, str):
        return sanitize_text(obj)
    if isinstance(obj, list):
        pairs = [_sanitize_obj(v) for v in obj]
        return [p[0] for p in pairs], any(p[1] for p in pairs)
    if isinstance(obj, dict):
        bad = False
        out = {}
        for k, v in obj.items():
            k2, b1 = _sanitize_obj(k)
            v2, b2 = _sanitize_obj(v)
            out[k2] = v2
            bad = bad or b1 or b2
        return out, bad
    return obj, False


def parse_item(raw: Any, index: int) -> ScoreItem:
    """Validate one raw request item. Raises ``ValueError`` with a message for the error result."""
    if not isinstance(raw, dict):
        raise ValueError(f"item {index} is not a JSON object")
    clean, bad = _sanitize_obj(raw)
    response = clean.get("response")
    if not isinstance(response, str):
        raise ValueError("'response' must be a string")
    prompt = clean.get("prompt", "")
    if prompt is None:
        prompt = ""
    if not isinstance(prompt, str | list):
        raise ValueError("'prompt' must be a string or a list of chat messages")
    extra = clean.get("extra_info") or {}
    if not isinstance(extra, dict):
        raise ValueError("'extra_info' must be an object")
    return ScoreItem(
        id=clean.get("id"),
        response=response,
        prompt=prompt,
        ground_truth=clean.get("ground_truth"),
        extra_info=extra,
        flags=["invalid_utf8"] if bad else [],
    )


def json_depth(value: Any) -> int:
    """The nesting depth of a parsed JSON value (a scalar 0, ``[]`` 1), walked without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict | list):
            deepest = max(deepest, level + 1)
            stack.extend((v, level + 1) for v in (value.values() if isinstance(value, dict) else value))
    return deepest


def dumps(obj: Any) -> bytes:
    """JSON encoding for responses: ASCII-only (no surrogate can break it); a non-finite float, which only an
    ``info`` or a health detail can hold (a verdict's numbers are checked), becomes null."""
    return json.dumps(_nulls_for_non_finite(obj), ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode(
        "ascii")


def _nulls_for_non_finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _nulls_for_non_finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_nulls_for_non_finite(v) for v in obj]
    return obj


# -------------------------------------------------------------------------------------------------------- scorer


class Scorer:
    """Base class of a task scorer. Override :meth:`score`; the others are optional.

    ``error_score`` is the sentinel G of an item that could not be scored (documented per server).
    """

    name: str = "scorer"
    version: str = "0"
    error_score: float = 0.0

    async def start(self) -> None:
        """Called once in the server's event loop before the first request (start pools, sessions)."""

    async def stop(self) -> None:
        """Called once at shutdown."""

    async def health(self) -> dict:
        """``{"ok": bool, ...details}``; ``ok`` False turns /health into 503."""
        return {"ok": True}

    async def score(self, item: ScoreItem, options: dict) -> ItemResult:
        """Score one item. Exceptions become an error result for this item only."""
        raise NotImplementedError


def _check_result(res: ItemResult, item: ScoreItem) -> dict:
    """A scorer's result as the verdict it answers: id echoed, flags merged, spans clamped and disjoint, checked
    against the contract (``validate_verdict``: finite G, parts and span values; ``InvalidVerdict`` otherwise)."""
    res.id = item.id
    res.flags = list(item.flags) + [f for f in res.flags if f not in item.flags]
    res.local = combine_spans(res.local, len(item.response))
    verdict = res.to_dict()
    validate_verdict(verdict)
    return verdict


async def score_batch(
    scorer: Scorer, raw_items: Sequence[Any], options: dict, item_timeout_s: float | None = DEFAULT_ITEM_TIMEOUT_S
) -> list[dict]:
    """Score raw request items concurrently; returns result dicts in request order. Never raises per item."""

    async def one(i: int, raw: Any) -> dict:
        item_id = raw.get("id") if isinstance(raw, dict) else None
        try:
            item = parse_item(raw, i)
        except ValueError as e:
            return error_result(item_id, f"bad item: {e}", scorer.error_score, ["bad_item"]).to_dict()
        try:
            res = await asyncio.wait_for(scorer.score(item, options), item_timeout_s)
            return _check_result(res, item)
        except asyncio.TimeoutError:
            return error_result(item.id, "timeout", scorer.error_score, item.flags + ["timeout"]).to_dict()
        except ValueError as e:  # an expected refusal (bad ground truth, bad option): no traceback in the log
            log.info("item %r refused: %s", item.id, e)
            return error_result(item.id, f"ValueError: {e}", scorer.error_score, item.flags).to_dict()
        except Exception as e:  # noqa: BLE001 - isolation is the contract
            log.exception("item %r failed", item.id)
            return error_result(item.id, f"{type(e).__name__}: {e}", scorer.error_score, item.flags).to_dict()

    return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(raw_items))))


# ----------------------------------------------------------------------------------------------------------- app


def create_app(
    scorer: Scorer,
    *,
    token: str | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    max_items: int = DEFAULT_MAX_ITEMS,
    item_timeout_s: float | None = DEFAULT_ITEM_TIMEOUT_S,
):
    """Build the FastAPI app for ``scorer``. ``token``: require ``Authorization: Bearer <token>`` on /score."""

    @asynccontextmanager
    async def lifespan(app):
        await scorer.start()
        try:
            yield
        finally:
            await scorer.stop()

    app = FastAPI(title=f"{scorer.name} reward server", version=str(scorer.version), lifespan=lifespan)
    app.state.scorer = scorer

    too_deep = f"body nested deeper than {MAX_JSON_DEPTH} levels"

    def reply(status: int, obj: Any) -> Response:
        return Response(content=dumps(obj), status_code=status, media_type="application/json")

    @app.get("/health")
    async def health() -> Response:
        try:
            h = dict(await scorer.health())
        except Exception as e:  # noqa: BLE001
            h = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        ok = bool(h.pop("ok", False))
        body = {"status": "ok" if ok else "unavailable", "name": scorer.name, "version": str(scorer.version), **h}
        return reply(200 if ok else 503, body)

    @app.post("/score")
    async def score(request: Request) -> Response:
        if token is not None:
            got = request.headers.get("authorization", "")
            if not hmac.compare_digest(got.encode(), f"Bearer {token}".encode()):
                return reply(401, {"error": "missing or wrong bearer token"})
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_request_bytes:
            return reply(413, {"error": f"request body over {max_request_bytes} bytes"})
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_request_bytes:
                return reply(413, {"error": f"request body over {max_request_bytes} bytes"})
            chunks.append(chunk)
        try:
            # invalid UTF-8 bytes become lone surrogates, cleaned per item (flag invalid_utf8) by parse_item
            body = json.loads(b"".join(chunks).decode("utf-8", errors="surrogateescape"))
        except ValueError as e:
            return reply(400, {"error": f"body is not JSON: {e}"})
        except RecursionError:  # nested deeper than the parser goes
            return reply(400, {"error": too_deep})
        if json_depth(body) > MAX_JSON_DEPTH:
            return reply(400, {"error": too_deep})
        if not isinstance(body, dict) or not isinstance(body.get("items"), list):
            return reply(400, {"error": "body must be an object with an 'items' list"})
        if len(body["items"]) > max_items:
            return reply(413, {"error": f"more than {max_items} items"})
        options = body.get("options") or {}
        if not isinstance(options, dict):
            return reply(400, {"error": "'options' must be an object"})
        t0 = time.perf_counter()
        results = await score_batch(scorer, body["items"], options, item_timeout_s)
        log.debug("scored %d items in %.3fs", len(results), time.perf_counter() - t0)
        return reply(200, {"items": results})

    return app


# ----------------------------------------------------------------------------------------------------------- CLI


def add_common_args(parser: argparse.ArgumentParser, default_port: int) -> argparse.ArgumentParser:
    """--host (127.0.0.1), --port, --token (env REWARD_SERVER_TOKEN), --max-request-bytes, --item-timeout-s,
    --log-level."""
    parser.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default)")
    parser.add_argument("--port", type=int, default=default_port)
    parser.add_argument("--token", default=os.environ.get(TOKEN_ENV), help=f"bearer token (env {TOKEN_ENV})")
    parser.add_argument("--max-request-bytes", type=int, default=DEFAULT_MAX_REQUEST_BYTES)
    parser.add_argument("--max-items", type=int, default=DEFAULT_MAX_ITEMS)
    parser.add_argument("--item-timeout-s", type=float, default=DEFAULT_ITEM_TIMEOUT_S)
    parser.add_argument("--log-level", default="info")
    return parser


def serve(scorer: Scorer, args: argparse.Namespace) -> None:
    """Run ``scorer`` with uvicorn using the parsed common args (blocks)."""
    import uvicorn

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if listens_beyond_loopback(args.host) and not args.token:
        log.warning("listening on %s without a bearer token: anyone who reaches this port can use it", args.host)
    app = create_app(
        scorer,
        token=args.token,
        max_request_bytes=args.max_request_bytes,
        max_items=args.max_items,
        item_timeout_s=args.item_timeout_s,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level.lower(), access_log=False)


class ServerThread:
    """Run an ASGI app with uvicorn in a background thread on a free loopback port (tests, benchmarks).

    ``with ServerThread(app) as srv: requests.post(srv.url + "/score", ...)``. Startup/shutdown (lifespan) run in
    the thread's own event loop.
    """

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, startup_timeout_s: float = 60.0):
        import uvicorn

        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.host, self.port = self._sock.getsockname()[:2]
        self.url = f"http://{self.host}:{self.port}"
        cfg = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
        self._server = uvicorn.Server(cfg)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)
        self._startup_timeout_s = startup_timeout_s

    def start(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + self._startup_timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("server thread failed to start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
