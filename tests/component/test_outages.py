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
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.component.test_reward_manager import make_batch, worker_for
from tests.conftest import free_port, wait_http

ROOT = Path(__file__).resolve().parents[2]
RESPONSES = {
    "math": ["Step 1: 3 + 4 = 7\n\n<final>7</final>", "<final>8</final>", "no answer at all", ""],
    "react": ["```tsx\nexport default function App() { return <h1>Hi</h1>; }\n```", "```tsx\nexport default x(\n```",
              "no code at all", ""],
}
SERVERS = {  # the server's command line after `python -m`, and how long it may take to answer /health
    "math": (["reward_servers.math", "--workers", "1"], 120),
    "react": (["reward_servers.react", "--compile-workers", "1"], 180),
}


def reward_server(kind: str, port: int) -> subprocess.Popen:
    """The `kind` reward server on `port`, up (its /health answers), in a process group of its own (React's Node
    workers and Chromium die with it)."""
    argv, timeout = SERVERS[kind]
    proc = subprocess.Popen([sys.executable, "-m", *argv, "--port", str(port)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", timeout, proc, poll_s=0.3)
    except BaseException:  # not up: the caller never gets it to stop
        kill(proc)
        raise
    return proc


def kill(server: subprocess.Popen) -> None:
    """SIGKILL the server and everything it started."""
    try:
        os.killpg(server.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    server.wait(30)


def scoring_batch(tokenizer, kind: str):
    """A DataProto of the kind's four responses, data source `<kind>_remote` (math: ground truth 7)."""
    data, _ = make_batch(tokenizer, RESPONSES[kind], data_source=f"{kind}_remote")
    data.non_tensor_batch["reward_model"] = np.array([{"style": "rule", "ground_truth": "7"}] * len(RESPONSES[kind]),
                                                     dtype=object)
    return data


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
