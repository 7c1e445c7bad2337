"""A long run survives a stop: `ALGO=bot STEPS=4 bash recipes/cpu_train.sh trainer.save_freq=2`, stopped (SIGTERM to
the launcher, as a scheduler or `kill` does) during step 3, then the same command again: verl resumes from the step-2
checkpoint (`trainer.resume_mode=auto`, its default) and finishes. Two trainer starts, verl 0.9.1's real trainer on
the CPU backend (hf rollout).

Checked: the stop ends every process of the run (launcher, driver, Ray and its actors: recipes/signals.sh and the
driver's SIGTERM); the metrics file holds every step once, the killed launch's steps 1-2 kept (verl_bot/hooks/
resume.py); the dataloader continues where the checkpoint left it (the 4 steps of 8 prompts train each of the 32
prompts of the epoch once: a restarted epoch would repeat step 1's); the token report's chosen steps are each
written once.

    .venv/bin/python -m pytest -q tests/test_e2e_resume.py
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.test_cpu_e2e import Run, _marked_pids, workdir  # noqa: F401 - `workdir` is the shared fixture
from verl_bot.token_records import recorded_files

pytestmark = pytest.mark.timeout(900)
ROOT = Path(__file__).resolve().parents[1]


def launch(root: Path, name: str, out_dir: Path) -> Run:
    """`bash recipes/cpu_train.sh` of a 4-step `bot` run saving every 2 steps into `out_dir`, started."""
    run = Run(root, name, [])
    run.cmd = ["bash", str(ROOT / "recipes" / "cpu_train.sh"), "trainer.save_freq=2", "data.shuffle=True",
               "+algorithm.token_report_steps=[1,4]", "+algorithm.token_report_groups=1"]
    run.env.update({"ALGO": "bot", "STEPS": "4", "ROLLOUT": "hf", "TIMEOUT_S": "600",
                    "PY": str(ROOT / ".venv" / "bin" / "python"), "OUT_DIR": str(out_dir),
                    "MODEL_DIR": str(root / "model"), "DATA_DIR": str(root / "data")})
    (root / "data").mkdir(exist_ok=True)
    for split, source in (("train", "train.parquet"), ("test", "val.parquet")):  # cpu_train.sh's file names
        target = root / "data" / f"{split}.parquet"
        if not target.exists():
            target.symlink_to(root / source)
    return run.start()


def test_a_stopped_bot_run_resumes_from_its_checkpoint_and_loses_nothing(workdir):  # noqa: F811 - the fixture
    out = workdir / "resume_out"
    first = launch(workdir, "resume_1", out)
    latest = out / "ckpt" / "latest_checkpointed_iteration.txt"
    try:
        deadline = time.monotonic() + 500
        metrics = out / "metrics.jsonl"
        # the step-2 checkpoint and step 2's metrics line (verl logs a step after saving its checkpoint): step 3 runs
        while not (latest.exists() and latest.read_text().strip() == "2" and metrics.exists()
                   and '"step":2,' in metrics.read_text()):
            assert first.proc.poll() is None, first.output(4000)
            assert time.monotonic() < deadline, "no step-2 checkpoint:\n" + first.output(4000)
            time.sleep(0.5)
        os.kill(first.proc.pid, signal.SIGTERM)  # the launcher (bash) only: it must stop the run
        first.proc.wait(timeout=120)
        deadline = time.monotonic() + 60
        while _marked_pids(first.mark) and time.monotonic() < deadline:
            time.sleep(1)
        assert not _marked_pids(first.mark), "processes of the stopped run left behind:\n" + first.output(3000)
    finally:
        first.cleanup()
    steps_before = [json.loads(ln)["step"] for ln in (out / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    assert steps_before[:2] == [1, 2] and set(steps_before) <= {1, 2, 3}, steps_before

    second = launch(workdir, "resume_2", out)
    try:
        rc = second.wait(timeout=600)
    finally:
        second.cleanup()
    assert rc == 0, second.output(6000)
    log = second.output()
    assert "Resuming from" in log and "global_step_2" in log, log[-4000:]
    assert "resumed at step 2: 2 metric lines of the steps before it kept" in log, log[-4000:]

    records = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    assert [r["step"] for r in records if "actor/pg_loss" in r["data"]] == [1, 2, 3, 4], records
    prompts = {}
    for step in (1, 2, 3, 4):
        rows = [json.loads(ln) for ln in (out / "rollouts" / f"{step}.jsonl").read_text().splitlines() if ln.strip()]
        prompts[step] = {r["input"] for r in rows}
        assert len(prompts[step]) == 8, (step, prompts[step])  # cpu_train.sh's 8 prompts x 4 rollouts a step
    assert len(set().union(*prompts.values())) == 32, prompts  # the epoch of 32 prompts, none twice, none skipped
    assert list(recorded_files(out / "ckpt" / "token_records")) == [1, 4]
