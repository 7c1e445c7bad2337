"""A pool of worker processes with a hard per-item time limit: a hung item kills and replaces its worker.

Why not ``concurrent.futures.ProcessPoolExecutor``: it cannot kill one hung worker (a kill breaks the whole pool),
and math-verify's own timeout uses ``signal.alarm``, which needs the MAIN thread of the process that parses. Each
:class:`WorkerPool` worker is a single-threaded subprocess under an address-space limit (``memory_mb``, so a parser
bomb cannot take the machine down); a worker past an item's limit is SIGKILLed and replaced. Used by the math server
(reward_servers/math/README.md, "Worker pool") and by the `bot` manager for verl's sync reward functions.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import importlib
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class PoolError(Exception):
    """Base class of per-item pool failures."""


class ItemTimeout(PoolError):
    """The item ran past the hard time limit; its worker was killed and replaced."""


class WorkerDied(PoolError):
    """The worker died while running the item."""


class PoolClosed(PoolError):
    """The pool was closed before the item ran."""


def _resolve(target: str) -> Callable[[Any], Any]:
    mod, _, fn = target.partition(":")
    return getattr(importlib.import_module(mod), fn)


def _worker_main(conn, target: str, memory_mb: int, warmup: Any = None) -> None:
    """Worker process: receive ``[(task_id, payload), ...]``, send ``(task_id, ok, result)`` per item."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if memory_mb > 0:
        try:
            import resource

            limit = memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ImportError, ValueError, OSError):
            pass
    fn = _resolve(target)
    if warmup is not None:
        try:
            fn(warmup)  # first calls import/compile lazily; pay that before reporting ready
        except Exception:  # noqa: BLE001
            pass
    conn.send(("ready", os.getpid()))
    while True:
        try:
            batch = conn.recv()
        except (EOFError, OSError):
            return  # parent went away
        if batch is None:
            return
        for task_id, payload in batch:
            try:
                res, ok = fn(payload), True
            except MemoryError:
                res, ok = "MemoryError", False
            except Exception as e:  # noqa: BLE001 - reported to the caller
                res, ok = f"{type(e).__name__}: {e}"[:500], False
            conn.send((task_id, ok, res))


@dataclass
class _Task:
    id: int
    payload: Any
    future: cf.Future


def _worker_entry(fd: int, target: str, memory_mb: int) -> None:
    """Entry point of a worker process started with ``python -c`` (see :class:`_Worker`)."""
    from multiprocessing.connection import Connection

    conn = Connection(fd)
    warmup = conn.recv()
    _worker_main(conn, target, memory_mb, warmup)


class _Worker:
    """One ``python -c`` subprocess + a socketpair carrying pickled messages.

    A plain subprocess (not ``multiprocessing`` spawn) so the parent's ``__main__`` is never re-imported: the pool
    works the same from ``python -m``, pytest, a benchmark script, stdin or a Ray actor.
    """

    def __init__(self, target: str, memory_mb: int, startup_timeout_s: float, warmup: Any = None):
        from multiprocessing.connection import Connection

        parent, child = socket.socketpair()
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
        code = (
            "from reward_servers.math.pool import _worker_entry; "
            f"_worker_entry({child.fileno()}, {target!r}, {int(memory_mb)})"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], pass_fds=[child.fileno()], env=env, stdin=subprocess.DEVNULL
        )
        child.close()
        self.conn = Connection(parent.detach())
        self.conn.send(warmup)
        ok = False
        try:
            ok = self.conn.poll(startup_timeout_s)
            msg = self.conn.recv() if ok else None
        except (EOFError, OSError):
            msg = None
        if not msg or msg[0] != "ready":
            self.kill()
            raise RuntimeError(f"worker for {target} did not start (within {startup_timeout_s}s)")
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.conn.close()

    def close(self) -> None:
        try:
            self.conn.send(None)
            self.proc.wait(2)
        except (OSError, EOFError, subprocess.TimeoutExpired):
            pass
        self.kill()


class WorkerPool:
    """``n_workers`` processes running ``target``, each a single-threaded subprocess running ``target(payload)`` in
    its main thread; one dispatcher thread in the server owns each worker, feeds it chunks of queued items (up to two
    chunks ahead), and reads the results one by one:

    - each result must arrive within ``item_timeout_s`` of the previous one (or of the send); otherwise the worker is
      SIGKILLed, that item fails with :class:`ItemTimeout`, the other items sent to it are re-queued, a new worker
      is spawned;
    - a worker that dies (segfault, OOM kill, ``os._exit``) fails its current item with :class:`WorkerDied` the same
      way.

    ``await pool.submit(payload)`` from asyncio; ``payload`` and result picklable.

    Args:
        target: ``"module:function"``; the function takes one payload and returns a picklable result.
        n_workers: processes (default: CPU count).
        item_timeout_s: hard limit per item, seconds (wall clock, measured in the server).
        chunk: max items sent to a worker at once (amortises pipe round trips).
        memory_mb: address-space limit per worker (0: none).
        warmup: a payload each new worker runs once before it reports ready (result ignored).
    """

    def __init__(
        self,
        target: str,
        n_workers: int | None = None,
        item_timeout_s: float = 10.0,
        chunk: int = 16,
        memory_mb: int = 4096,
        startup_timeout_s: float = 60.0,
        warmup: Any = None,
    ):
        self.target = target
        self.n_workers = max(1, n_workers or os.cpu_count() or 1)
        self.item_timeout_s = float(item_timeout_s)
        self.chunk = max(1, int(chunk))
        self.memory_mb = int(memory_mb)
        self.startup_timeout_s = startup_timeout_s
        self.warmup = warmup
        self._queue: queue.Queue[_Task | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._workers: list[_Worker | None] = []
        self._next_id = 0
        self._id_lock = threading.Lock()
        self._closed = False
        self.restarts = 0  # workers replaced after a timeout or a death
        self.completed = 0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> WorkerPool:
        """Spawn all workers (in parallel) and their dispatcher threads; blocks until every worker is ready."""
        with cf.ThreadPoolExecutor(self.n_workers) as ex:
            self._workers = list(
                ex.map(
                    lambda _: _Worker(self.target, self.memory_mb, self.startup_timeout_s, self.warmup),
                    range(self.n_workers),
                )
            )
        for i in range(self.n_workers):
            t = threading.Thread(target=self._dispatch, args=(i,), daemon=True, name=f"pool-dispatch-{i}")
            t.start()
            self._threads.append(t)
        return self

    def close(self) -> None:
        """Stop dispatchers, fail queued items with :class:`PoolClosed`, stop workers."""
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join(self.item_timeout_s + 5)
        while True:
            try:
                task = self._queue.get_nowait()
            except queue.Empty:
                break
            if task is not None and not task.future.done():
                task.future.set_exception(PoolClosed("pool closed"))
        for w in self._workers:
            if w is not None:
                w.close()

    def __enter__(self) -> WorkerPool:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def healthy(self) -> bool:
        """True when every dispatcher runs and every worker process is alive (or being replaced)."""
        return not self._closed and all(t.is_alive() for t in self._threads) and len(self._threads) > 0

    def pids(self) -> list[int]:
        return [w.pid for w in self._workers if w is not None]

    # ------------------------------------------------------------------ submit
    def submit_future(self, payload: Any) -> cf.Future:
        """Queue one item; returns a ``concurrent.futures.Future`` with the result or a :class:`PoolError`."""
        if self._closed:
            raise PoolClosed("pool closed")
        with self._id_lock:
            self._next_id += 1
            tid = self._next_id
        fut: cf.Future = cf.Future()
        self._queue.put(_Task(tid, payload, fut))
        return fut

    async def submit(self, payload: Any) -> Any:
        """Async form of :meth:`submit_future`."""
        return await asyncio.wrap_future(self.submit_future(payload))

    def map(self, payloads: list[Any]) -> list[Any]:
        """Blocking helper: results (or exception objects) in order."""
        futs = [self.submit_future(p) for p in payloads]
        out = []
        for f in futs:
            try:
                out.append(f.result())
            except Exception as e:  # noqa: BLE001
                out.append(e)
        return out

    # ------------------------------------------------------------------ dispatcher
    def _replace(self, i: int, why: str) -> None:
        w = self._workers[i]
        if w is not None:
            w.kill()
        self._workers[i] = None
        self.restarts += 1
        log.warning("worker %d replaced: %s", i, why)
        while not self._closed:
            try:
                self._workers[i] = _Worker(self.target, self.memory_mb, self.startup_timeout_s, self.warmup)
                return
            except Exception:  # noqa: BLE001 - keep trying; the pool must heal
                log.exception("respawning worker %d failed", i)
                time.sleep(1.0)

    def _take_batch(self, block: bool) -> list[_Task] | None:
        """Up to ``chunk`` queued tasks ([] when none is ready and ``block`` is False); None on shutdown."""
        try:
            first = self._queue.get() if block else self._queue.get_nowait()
        except queue.Empty:
            return []
        if first is None:
            return None
        batch = [first]
        while len(batch) < self.chunk:
            try:
                t = self._queue.get_nowait()
            except queue.Empty:
                break
            if t is None:  # shutdown marker: put it back for this or another dispatcher
                self._queue.put(None)
                break
            batch.append(t)
        return [t for t in batch if isinstance(t, _Requeued) or t.future.set_running_or_notify_cancel()]

    def _send(self, i: int, batch: list[_Task]) -> bool:
        """Send ``batch`` to worker ``i`` (replacing a dead worker first); False when it could not be sent."""
        w = self._workers[i]
        if w is None or not w.alive():
            self._replace(i, "dead before send")
            w = self._workers[i]
            if w is None:
                for t in batch:
                    t.future.set_exception(PoolClosed("pool closed"))
                return False
        try:
            w.conn.send([(t.id, t.payload) for t in batch])
            return True
        except (OSError, EOFError, ValueError) as e:
            for t in batch:
                self._queue.put(_Requeued(t))
            self._replace(i, f"send failed: {e}")
            return False

    def _dispatch(self, i: int) -> None:
        """Feed worker ``i`` up to two chunks ahead (so it never waits for this thread) and collect results in
        order; the head item's result must arrive within ``item_timeout_s``."""
        inflight: deque[_Task] = deque()
        stopping = False
        while True:
            while not stopping and len(inflight) < 2 * self.chunk:
                batch = self._take_batch(block=not inflight)
                if batch is None:
                    stopping = True
                elif not batch:
                    if inflight:
                        break
                elif self._send(i, batch):
                    inflight.extend(batch)
            if not inflight:
                if stopping:
                    return
                continue
            w = self._workers[i]
            err: PoolError | None = None
            try:
                if w is not None and w.conn.poll(self.item_timeout_s):
                    got_id, ok, res = w.conn.recv()
                else:
                    err = ItemTimeout(f"item ran past {self.item_timeout_s}s; worker killed")
            except (EOFError, OSError) as e:
                err = WorkerDied(f"worker died: {type(e).__name__}")
            if err is not None:
                inflight.popleft().future.set_exception(err)
                for t in inflight:  # re-queue behind others; their futures stay RUNNING
                    self._queue.put(_Requeued(t))
                inflight.clear()
                self._replace(i, str(err))
                continue
            t = inflight.popleft()
            assert t.id == got_id, (t.id, got_id)
            self.completed += 1
            if ok:
                t.future.set_result(res)
            else:
                t.future.set_exception(PoolError(res))


class _Requeued(_Task):
    """A task put back after its chunk's worker was killed; its future is already RUNNING."""

    def __init__(self, task: _Task):
        super().__init__(task.id, task.payload, task.future)
