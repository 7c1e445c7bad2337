"""The real reward servers as separate processes (`python -m reward_servers.math`, `python -m reward_servers.react`):
started on a port and up, killed with everything they started, and a batch of responses for them to score; shared by
the outage tests (tests/component/test_outages.py, the end-to-end restart in tests/e2e/test_cpu_e2e.py) and
benchmarks/outage.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.conftest import wait_http
from tests.harness.manager import make_batch

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
