"""The smoke run's verdict block (`python -m verl_bot.launch.smoke`) on hand-made run folders: each check can fail."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from verl_bot.launch import smoke

GOOD_STEP = {
    "actor/pg_loss": 0.1,
    "training/global_step": 1,
    "reward/scorer_failed/mean": 0.0,
    "training/rollout_probs_diff_max": 3e-9,
    "training/rollout_probs_diff_mean": 5e-10,
    "critic/advantages/max": 1.5,
    "critic/advantages/min": -1.5,
    "timing_s/step": 10.0,
}


def write_run(folder: Path, steps: list[dict], records: list[dict] | None = None, ckpt: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"step": i + 1, "data": {**GOOD_STEP, **data}}) for i, data in enumerate(steps)]
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    if records is not None:
        (folder / "token_records").mkdir()
        (folder / "token_records" / "step_1.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    if ckpt:
        (folder / "ckpt" / "global_step_2" / "actor").mkdir(parents=True)
        (folder / "ckpt" / "global_step_2" / "actor" / "model.pt").write_bytes(b"\0" * 2**20)
    return folder


def dense(n: int = 2) -> list[dict]:
    return [{"rewards": [0.5, 0.5, 0.7], "advantages": [0.1, 0.1, 0.4]} for _ in range(n)]


def args(folder: Path, **kw) -> list[str]:
    base = {"--out-dir": str(folder), "--full-steps": "150", "--batch-scale": "16/4", "--rollouts-per-step": "16",
            "--engine": "vllm 0.27.1 (CPU build)", "--algo": "bot", "--rc": "0", "--steps": "2"}
    base.update({f"--{k.replace('_', '-')}": str(v) for k, v in kw.items()})
    return [x for kv in base.items() for x in kv]


def verdict(folder: Path, **kw) -> tuple[list[str], list[str]]:
    return smoke.verdict(smoke.parse_args(args(folder, **kw)))


def test_a_good_run_passes_every_check_and_projects_the_full_run(tmp_path):
    folder = write_run(tmp_path / "ok", [{}, {"timing_s/step": 12.0}], dense())
    lines, failed = verdict(folder)
    assert failed == []
    text = "\n".join(lines)
    assert "steps done          2 of 2 (trainer exit 0)" in text
    assert "dense token rewards 2 of 2 recorded responses carry rewards before their last token" in text
    assert "global_step_2 written (1 MiB)" in text
    # the steps after the first: 12 s x batch 16/4 x 150 steps = 7200 s
    assert "projected full run  2.0 h (150 steps x 12.0 s x batch 16/4" in text


@pytest.mark.parametrize(
    "steps, records, kw, check",
    [
        ([{}], dense(), {}, "steps"),  # one step of two
        ([{}, {}], dense(), {"rc": 1}, "steps"),
        ([{"reward/scorer_failed/mean": 0.6}, {}], dense(), {}, "scorer"),
        ([{}, {}], [{"rewards": [0.0, 0.0, 1.0], "advantages": [1.0, 1.0, 1.0]}], {}, "dense"),  # one scalar
        ([{"critic/advantages/max": float("nan")}, {}], dense(), {}, "advantages"),
        ([{"vps/probed_rows": 0.0, "vps/probe_failed_rows": 16.0}, {}], dense(), {}, "probes"),
    ],
)
def test_each_check_fails_on_its_own_fault(tmp_path, steps, records, kw, check):
    lines, failed = verdict(write_run(tmp_path / check, steps, records), **kw)
    assert failed == [check], lines



@pytest.mark.parametrize(
    "platform, steps, tag, text",
    [
        # fp32 on the CPU: 1e-3 of probability at most, at every step
        ("cpu", [{}, {}], "ok", "rollout and trainer agree: rollout_probs_diff_max at most 3e-09 (<= 0.001)"),
        # step 1 is before any update: a difference there is the two engines computing different policies
        ("cpu", [{"training/rollout_probs_diff_max": 0.085}, {"training/rollout_probs_diff_max": 0.09}], "FAIL",
         "MISMATCH before any update: step 1's rollout_probs_diff_max 0.085 > 0.001"),
        # only after an update: the rollout serves older weights
        ("cpu", [{}, {"training/rollout_probs_diff_max": 0.3}], "WARN",
         "stale weights: step 2's rollout_probs_diff_max 0.3 > 0.001 after an update (step 1: 3e-09)"),
        # bf16 on a GPU: 1% of probability on average; a mismatch there is a warning (kernels differ anyway)
        ("gpu", [{"training/rollout_probs_diff_max": 0.4, "training/rollout_probs_diff_mean": 0.002}, {}], "ok",
         "rollout and trainer agree: rollout_probs_diff_mean at most 0.002 (<= 0.01)"),
        ("gpu", [{"training/rollout_probs_diff_mean": 0.03}, {}], "WARN", "MISMATCH before any update: step 1's "
         "rollout_probs_diff_mean 0.03 > 0.01"),
    ],
)
def test_the_policy_line_tells_a_mismatch_before_any_update_from_stale_weights(tmp_path, platform, steps, tag, text):
    lines, failed = verdict(write_run(tmp_path / "run", steps, dense()), platform=platform)
    line = next(ln for ln in lines if ln.startswith("policy "))
    assert text in line and line.endswith(f"[{tag}]"), line
    assert failed == (["policy"] if tag == "FAIL" else []), lines


@pytest.mark.parametrize("shares, text, tag", [
    ([0.5, 0.25], "S on 38% of the rollouts", "ok"),
    ([0.0, 0.0], "S on 0% of the rollouts: no token-level credit, BoT is GRPO here", "WARN"),
])
def test_the_local_signal_line_says_when_bot_has_none(tmp_path, shares, text, tag):
    steps = [{"reward/local_signal/mean": share} for share in shares]
    lines, failed = verdict(write_run(tmp_path / "run", steps, dense()))
    line = next(ln for ln in lines if ln.startswith("local signal"))
    assert text in line and line.endswith(f"[{tag}]") and failed == [], line
    lines, _ = verdict(write_run(tmp_path / "grpo", steps, dense()), algo="grpo")
    assert not any(ln.startswith("local signal") for ln in lines)  # GRPO reads no S

def test_the_verdict_names_the_node_plan_when_there_is_one(tmp_path):
    folder = write_run(tmp_path / "run", [{}, {}], dense())
    lines, _ = verdict(folder, plan="trainer GPUs 0,1,2,3, LLM judge GPUs 4,5,6,7")
    assert "node plan           trainer GPUs 0,1,2,3, LLM judge GPUs 4,5,6,7" in lines
    assert not any(line.startswith("node plan") for line in verdict(folder)[0])  # the CPU platform has none


def test_a_scalar_algorithm_is_not_asked_for_dense_rewards(tmp_path):
    records = [{"rewards": [0.0, 0.0, 1.0], "advantages": [1.0, 1.0, 1.0]}]
    lines, failed = verdict(write_run(tmp_path / "grpo", [{}, {}], records), algo="grpo")
    assert failed == [] and any(line.startswith("token rewards       one per response") for line in lines)


class _Health(BaseHTTPRequestHandler):
    stats: dict = {}

    def do_GET(self):  # noqa: N802 - http.server's name
        body = json.dumps({"status": "ok", "judge_stats": self.stats}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def health_server():
    server = HTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


@pytest.mark.parametrize(
    "stats, text, failed",
    [
        ({"llm_ok": 3, "llm_unparseable": 5, "vlm_attribution_ok": 9}, "8 of 8 calls answered, 3 with a usable score, "
         "0 unavailable [ok]", []),
        ({"step_unavailable": 4}, "0 of 4 calls answered, 0 with a usable score, 4 unavailable [FAIL]", ["judge"]),
        ({"step_ok": 1, "step_unavailable": 1}, "1 of 2 calls answered, 1 with a usable score, 1 unavailable [WARN]",
         []),
    ],
)
def test_the_judge_line_counts_the_reward_servers_judge_calls(tmp_path, health_server, stats, text, failed):
    _Health.stats = stats
    url = f"http://127.0.0.1:{health_server.server_address[1]}"
    folder = write_run(tmp_path / "judge", [{}, {}], dense())
    lines, got = verdict(folder, judge="step judge=http://judge/v1", reward_url=url)
    assert got == failed
    assert next(line for line in lines if line.startswith("judge")).endswith(text)


def test_the_command_prints_one_block_and_exits_non_zero_on_a_failed_check(tmp_path):
    folder = write_run(tmp_path / "cli", [{}], dense())
    proc = subprocess.run([sys.executable, "-m", "verl_bot.launch.smoke", *args(folder)], capture_output=True,
    text=True,
                          timeout=60)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0] == "== verl-bot smoke verdict ==" and lines[-1] == "VERDICT: FAILED (steps)"
    assert "Warning" not in proc.stderr  # a light command: it never imports verl (no start-up notes)


@pytest.mark.parametrize("shares, text, tag", [
    ([0.0, 0.0], "32 of 32 rollouts scored, 3.0 steps each on average, input truncated on 0% [ok]", []),
    ([0.25, 0.0], "28 of 32 rollouts scored, 3.0 steps each on average, input truncated on 0% [WARN]", []),
    ([1.0, 1.0], "0 of 32 rollouts scored, 3.0 steps each on average, input truncated on 0% [FAIL]", ["prm"]),
])
def test_the_prm_line_counts_the_rollouts_the_prm_scored(tmp_path, shares, text, tag):
    steps = [{"reward/prm_failed/mean": s, "reward/prm_steps/mean": 3.0, "reward/prm_truncated/mean": 0.0}
             for s in shares]
    lines, failed = verdict(write_run(tmp_path / "run", steps, dense()), prm="PRM prm=http://127.0.0.1:8010")
    line = next(ln for ln in lines if ln.startswith("PRM "))
    assert line == f"PRM                 PRM prm at http://127.0.0.1:8010: {text}", line
    assert failed == tag
    lines, failed = verdict(write_run(tmp_path / "none", [{}, {}], dense()), prm="PRM prm=http://127.0.0.1:8010")
    assert failed == ["prm"] and "no PRM metrics logged" in next(ln for ln in lines if ln.startswith("PRM "))
    assert not any(ln.startswith("PRM ") for ln in verdict(write_run(tmp_path / "off", [{}, {}], dense()))[0])
