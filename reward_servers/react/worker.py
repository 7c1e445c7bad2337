"""Python side of the persistent Node workers (JSON lines over stdin/stdout).

A worker is started once and kept; a request that does not answer in time kills the worker's whole process
group (Node and its Chromium) and the next request starts a fresh one. Every pending request of a killed
worker fails with :class:`WorkerError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import shutil
import signal
from pathlib import Path

from .node_deps import NODE_DIR_ENV, node_dir

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
WORKER_JS = HERE / "node" / "worker.mjs"
STREAM_LIMIT = 256 * 1024 * 1024  # a line may carry a base64 screenshot


class WorkerError(RuntimeError):
    pass


def node_ready() -> tuple[bool, str]:
    """Whether node and the npm dependencies are installed (for /health, tests and helpful errors)."""
    if shutil.which(os.environ.get("REACT_REWARD_NODE", "node")) is None:
        return False, "node not found on PATH"
    modules = node_dir() / "node_modules"
    for pkg in ("esbuild", "eslint", "react", "playwright-core", "tailwindcss"):
        if not (modules / pkg).is_dir():
            return False, f"missing {modules / pkg}: run python -m reward_servers.react.node_deps"
    return True, "ok"


class NodeWorker:
    def __init__(self, name: str = "worker", env: dict | None = None, node: str | None = None,
                 warm: dict | None = None, warm_timeout_s: float = 180.0):
        self.name = name
        self.warm = warm  # sent to every fresh process before its first request (cold start off the item's clock)
        self.warm_timeout_s = warm_timeout_s
        self.env = env or {}
        self.node = node or os.environ.get("REACT_REWARD_NODE", "node")
        self.proc: asyncio.subprocess.Process | None = None
        self._pending: dict[int, asyncio.Future] = {}
        self._ids = itertools.count(1)
        self._reader: asyncio.Task | None = None
        self._start_lock = asyncio.Lock()
        self._ready: asyncio.subprocess.Process | None = None  # the process whose warm-up finished
        self.restarts = 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def _ensure(self) -> None:
        if self.alive and self._ready is self.proc:
            return
        async with self._start_lock:
            if self.alive and self._ready is self.proc:
                return
            if self.alive:  # started but its warm-up failed: start afresh
                await self.kill()
            env = {**os.environ, NODE_DIR_ENV: str(node_dir()), **self.env}
            self.proc = await asyncio.create_subprocess_exec(
                self.node, str(WORKER_JS),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=None,
                cwd=str(HERE), env=env, limit=STREAM_LIMIT, start_new_session=True,
            )
            self._reader = asyncio.create_task(self._read(self.proc))
            if self.warm is not None:
                await self._request(self.warm, self.warm_timeout_s)
            self._ready = self.proc

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        try:
            while True:
                line = await proc.stdout.readline()
                if not line:
                    break
                try:
                    msg = json.loads(line)
                except ValueError:
                    log.warning("%s: bad line from worker: %r", self.name, line[:200])
                    continue
                fut = self._pending.pop(msg.get("id"), None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        except Exception as e:  # noqa: BLE001
            log.warning("%s: reader stopped: %s", self.name, e)
        finally:
            if self.proc is proc:  # the worker died on its own: forget it (and its browser); next call restarts
                self.proc = None
                self.restarts += 1
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                self._fail_all(WorkerError(f"{self.name} exited"))

    def _fail_all(self, exc: Exception) -> None:
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)

    async def call(self, req: dict, timeout: float) -> dict:
        await self._ensure()
        return await self._request(req, timeout)

    async def _request(self, req: dict, timeout: float) -> dict:
        rid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        proc = self.proc
        assert proc is not None and proc.stdin is not None
        try:
            proc.stdin.write((json.dumps({**req, "id": rid}) + "\n").encode())
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as e:
            self._pending.pop(rid, None)
            await self.kill()
            raise WorkerError(f"{self.name}: cannot write: {e}") from e
        try:
            msg = await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError as e:
            self._pending.pop(rid, None)
            log.warning("%s: no answer in %.1fs to %s, restarting it", self.name, timeout, req.get("op"))
            await self.kill()
            raise WorkerError(f"{self.name} did not answer in {timeout:.1f}s") from e
        if not msg.get("ok"):
            raise WorkerError(f"{self.name}: {msg.get('error')}")
        return msg["result"]

    async def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        self.restarts += 1
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(proc.wait(), 5)
        self._fail_all(WorkerError(f"{self.name} was restarted"))
        if self._reader is not None:
            self._reader.cancel()

    async def close(self) -> None:
        proc = self.proc
        if proc is not None and proc.returncode is None and proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()
                await asyncio.wait_for(proc.wait(), 5)
        await self.kill()
        self.restarts = max(0, self.restarts - 1)


class WorkerPool:
    """N workers; each request goes to the one with the fewest requests in flight."""

    def __init__(self, size: int, name: str, env: dict | None = None, warm: dict | None = None):
        self.workers = [NodeWorker(f"{name}-{i}", env=env, warm=warm) for i in range(max(1, size))]

    async def call(self, req: dict, timeout: float) -> dict:
        w = min(self.workers, key=lambda w: (w.in_flight, not w.alive))
        return await w.call(req, timeout)

    async def broadcast(self, req: dict, timeout: float) -> list[dict]:
        return list(await asyncio.gather(*(w.call(req, timeout) for w in self.workers)))

    @property
    def restarts(self) -> int:
        return sum(w.restarts for w in self.workers)

    async def close(self) -> None:
        await asyncio.gather(*(w.close() for w in self.workers))
