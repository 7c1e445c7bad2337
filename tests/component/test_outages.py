"""Reward servers that go away under a run: the real math server (`python -m reward_servers.math`) and the real React
server (`python -m reward_servers.react`: Node workers and Chromium) SIGKILLed and restarted on their port while
verl 0.9.1's own reward-loop worker scores with the `bot` manager.

While a server is down, every rollout it would score gets the failure sentinel and `scorer_failed` (it takes no part
in its group, advantage 0: tests/component/test_run_safety.py), within the scorer's deadline and retries, never a hang;
when
it is back on its port the same worker scores again; with two URLs for the data source (round-robin), losing one
loses no rollout. How many rollouts an outage costs per second: benchmarks/outage.py."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.conftest import free_port
from tests.harness.manager import worker_for
from tests.harness.servers import kill, reward_server, scoring_batch


def scored(worker, tokenizer, kind: str = "math") -> list[float]:
    """`scorer_failed` of each response of one `scoring_batch`."""
    outs = asyncio.run(worker.compute_score_batch(scoring_batch(tokenizer, kind)))
    return [out["reward_extra_info"]["scorer_failed"] for out in outs]


@pytest.mark.parametrize("kind", ["math", "react"])
def test_a_killed_and_restarted_reward_server_costs_only_the_rollouts_scored_while_it_was_down(kind, tiny_model_dir,
                                                                                                tokenizer):
    port = free_port()
    server = reward_server(kind, port)
    try:
        worker, _ = worker_for(tiny_model_dir, f"+reward.reward_kwargs.bot.scorers.{kind}_remote='http://127.0.0.1:{port}'",
                               "+reward.reward_kwargs.bot.timeout_s=30", "+reward.reward_kwargs.bot.retries=1")
        assert scored(worker, tokenizer, kind) == [0.0] * 4
        kill(server)
        t0 = time.monotonic()
        assert scored(worker, tokenizer, kind) == [1.0] * 4  # the sentinel and the flag, for every rollout
        assert time.monotonic() - t0 < 15  # a refused connection fails at once (then one backoff): no deadline, no hang
        server = reward_server(kind, port)
        assert scored(worker, tokenizer, kind) == [0.0] * 4  # the same worker, its session reconnected
    finally:
        kill(server)


def test_with_two_urls_losing_one_server_loses_no_rollout(tiny_model_dir, tokenizer):
    ports = [free_port(), free_port()]
    servers = [reward_server("math", port) for port in ports]
    try:
        urls = ",".join(f"http://127.0.0.1:{port}" for port in ports)
        worker, _ = worker_for(tiny_model_dir, f"+reward.reward_kwargs.bot.scorers.math_remote='{urls}'",
                               "+reward.reward_kwargs.bot.timeout_s=5", "+reward.reward_kwargs.bot.retries=1")
        kill(servers[0])
        assert scored(worker, tokenizer) == [0.0] * 4  # each rollout the dead one would take goes to the other
    finally:
        for server in servers:
            kill(server)
