"""Reward servers that go away under a run: the real math server (`python -m reward_servers.math`) SIGKILLed and
restarted on its port while verl 0.9.1's own reward-loop worker scores with the `bot` manager.

While it is down, every rollout it would score gets the failure sentinel and `scorer_failed` (it takes no part in its
group, advantage 0: tests/test_run_safety.py), within the scorer's deadline and retries, never a hang; when it is back
on its port the same worker scores again; with two URLs for the data source (round-robin), losing one loses no
rollout."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from tests.conftest import free_port, wait_http
from tests.test_reward_manager import make_batch, worker_for

ROOT = Path(__file__).resolve().parents[1]
RESPONSES = ["Step 1: 3 + 4 = 7\n\n<final>7</final>", "<final>8</final>", "no answer at all", ""]


def math_server(port: int) -> subprocess.Popen:
    """The math reward server on `port`, up (its /health answers)."""
    proc = subprocess.Popen([sys.executable, "-m", "reward_servers.math", "--port", str(port), "--workers", "1"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(f"http://127.0.0.1:{port}/health", 120, proc, poll_s=0.3)
    return proc


def scored(worker, tokenizer) -> list[float]:
    """`scorer_failed` of each response of one batch (data source `math_remote`, ground truth 7)."""
    data, _ = make_batch(tokenizer, RESPONSES, data_source="math_remote")
    data.non_tensor_batch["reward_model"] = np.array([{"style": "rule", "ground_truth": "7"}] * len(RESPONSES),
                                                     dtype=object)
    return [out["reward_extra_info"]["scorer_failed"] for out in asyncio.run(worker.compute_score_batch(data))]


def test_a_killed_and_restarted_math_server_costs_only_the_rollouts_scored_while_it_was_down(tiny_model_dir,
                                                                                             tokenizer):
    port = free_port()
    server = math_server(port)
    try:
        worker, _ = worker_for(tiny_model_dir, f"+reward.reward_kwargs.bot.scorers.math_remote='http://127.0.0.1:{port}'",
                               "+reward.reward_kwargs.bot.timeout_s=5", "+reward.reward_kwargs.bot.retries=1")
        assert scored(worker, tokenizer) == [0.0] * 4
        server.kill()
        server.wait(30)
        t0 = time.monotonic()
        assert scored(worker, tokenizer) == [1.0] * 4  # the sentinel and the flag, for every rollout
        assert time.monotonic() - t0 < 2 * 5 + 5  # within (retries + 1) deadlines: a refused connection, no hang
        server = math_server(port)
        assert scored(worker, tokenizer) == [0.0] * 4  # the same worker, its session reconnected
    finally:
        server.kill()
        server.wait(30)


def test_with_two_urls_losing_one_server_loses_no_rollout(tiny_model_dir, tokenizer):
    ports = [free_port(), free_port()]
    servers = [math_server(port) for port in ports]
    try:
        urls = ",".join(f"http://127.0.0.1:{port}" for port in ports)
        worker, _ = worker_for(tiny_model_dir, f"+reward.reward_kwargs.bot.scorers.math_remote='{urls}'",
                               "+reward.reward_kwargs.bot.timeout_s=5", "+reward.reward_kwargs.bot.retries=1")
        servers[0].kill()
        servers[0].wait(30)
        assert scored(worker, tokenizer) == [0.0] * 4  # each rollout the dead one would take goes to the other
    finally:
        for server in servers:
            server.kill()
            server.wait(30)
