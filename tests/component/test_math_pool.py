"""The worker pool: results in order, a hung item kills and replaces only its worker, crashes are isolated."""

from __future__ import annotations

import os
import time

import pytest

from reward_servers.math.pool import ItemTimeout, PoolError, WorkerDied, WorkerPool


@pytest.fixture(scope="module")
def pool():
    # reward_servers.math.verify:hang blocks SIGALRM and sleeps: a hang no alarm can stop, only a kill
    with WorkerPool("reward_servers.math.verify:hang", n_workers=2, item_timeout_s=1.0, chunk=4) as p:
        yield p


def test_results_in_order(pool):
    out = pool.map([f"x{i}" for i in range(50)])
    assert out == [f"x{i}" for i in range(50)]


def test_hung_item_is_killed_and_replaced(pool):
    before_pids, before_restarts = set(pool.pids()), pool.restarts
    t0 = time.monotonic()
    futs = [pool.submit_future(p) for p in ["a", 30, "b", "c", "d", "e", "f"]]
    results = []
    for f in futs:
        try:
            results.append(f.result(timeout=20))
        except PoolError as e:
            results.append(e)
    assert isinstance(results[1], ItemTimeout)
    assert [r for i, r in enumerate(results) if i != 1] == ["a", "b", "c", "d", "e", "f"]  # chunk-mates re-queued
    assert time.monotonic() - t0 < 8.0  # well under the 30 s the item wanted
    deadline = time.monotonic() + 15  # the replacement spawns in the background after the error is reported
    while (pool.restarts != before_restarts + 1 or len(pool.pids()) < 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.restarts == before_restarts + 1
    after = set(pool.pids())
    assert len(after) == 2 and len(after - before_pids) == 1
    for pid in before_pids - after:  # the hung worker is really gone
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert pool.healthy()
    assert pool.map(["again"]) == ["again"]


def test_dead_worker_is_isolated(pool):
    futs = [pool.submit_future(p) for p in ["die", "ok1", "ok2"]]
    with pytest.raises(WorkerDied):
        futs[0].result(timeout=20)
    assert [f.result(timeout=20) for f in futs[1:]] == ["ok1", "ok2"]
    assert pool.healthy()


def test_target_exceptions_are_per_item():
    with WorkerPool("reward_servers.math.verify:check", n_workers=1, item_timeout_s=10.0) as p:
        out = p.map([{"pred": "33", "gold": 33, "mode": "aime"}, {"bad": "payload"}])
    assert out[0]["correct"] is True
    assert isinstance(out[1], PoolError) and "KeyError" in str(out[1])
