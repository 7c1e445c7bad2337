"""End-to-end: verl 0.9.1's real trainer (`python -m verl.trainer.main_ppo`, v1) on the CPU backend.

Each test starts the real trainer in a subprocess (`Run` of tests/harness/trainer.py) with the overrides of
`verl_bot/cpu/overrides.txt`, a tiny Qwen2 model built locally, and a tiny
`toy_lint` dataset. What the tests read back, all without forking verl:

- `VERL_BOT_HF_ROLLOUT_LOG`: the rollout server's JSON lines (one per weight
  update: version, global step, checksum of the weights it now serves);
- `VERL_FILE_LOGGER_PATH` + `trainer.logger=[console,file]`: verl's metrics;
- a probe module loaded through verl's own `VERL_USE_EXTERNAL_MODULES` that
  wraps the registered `bot` estimator and records what `token_level_rewards`
  it received (so the test sees the dense rewards *at the estimator*).

Every run is tagged with an environment variable that its Ray processes
inherit; the tests find leftovers by that tag (never by process name) and
kill only those. Every run has a timeout whose message names the Ray
resources that, when short, make verl hang instead of fail.

    .venv/bin/python -m pytest -q tests/e2e/test_cpu_e2e.py

The `bot` path's own end-to-end checks (dense rewards at the estimator, its advantages at the loss, failures,
weight syncs, token records) share a trainer start with the resume test: tests/e2e/test_e2e_resume.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import free_port
from tests.harness.references import reference_pure
from tests.harness.servers import kill, reward_server
from tests.harness.trainer import Run, advantage_records, marked_pids

pytestmark = pytest.mark.timeout(900)

# -------------------------------------------------------------------------------------------- tests
def test_grpo_with_the_bot_manager_a_reward_server_restarted_mid_run_and_ctrl_c(workdir):
    """One trainer start, three checks, verl's GRPO with the `bot` manager (token_level unset).

    One reward per response: each response's reward reaches verl's GRPO as one scalar on its last token, G, and the
    advantages are verl's GRPO of those; with dense rewards GRPO would sum G over the tokens (L * G: longer answers
    would win).
    A reward server restarted mid-run: half of each step's prompts are scored by the real math server, which is
    SIGKILLed once step 1 is logged and started again on its port once a step's advantages show rollouts it could
    not score. Those are flagged (`reward/scorer_failed/mean`), take no part in their groups and earn advantage 0
    while the others get GRPO's over their group's scored rollouts (each rollout is scored as it finishes, so a
    group may lose some of its rollouts; a lone survivor earns 0 too); the run goes on, and the steps after the
    server is back are scored in full.
    Ctrl-C (SIGINT to the trainer) while it trains the step after those: it exits and none of its Ray processes
    stays behind."""
    port = free_port()
    run = Run(workdir, "grpo_bot", ["algorithm.adv_estimator=grpo", "reward.reward_manager.name=bot",
                                    f"data.train_files={workdir / 'train_restart.parquet'}", "data.shuffle=False",
                                    f"+reward.reward_kwargs.bot.scorers.toy_remote=http://127.0.0.1:{port}"],
              steps=50)
    server = reward_server("math", port)
    try:
        run.start()
        _wait_for_step(run, 1, timeout=400)
        kill(server)
        deadline = time.monotonic() + 300
        while not any(r["failed"] for record in advantage_records(run) for r in record["rows"]):
            assert run.proc.poll() is None and time.monotonic() < deadline, run.output(4000)
            time.sleep(0.2)
        server = reward_server("math", port)  # returns once its /health answers
        back = last_logged_step(run)  # the steps after the next one start with the server up
        _wait_for_step(run, back + 2, timeout=300)
        assert len(marked_pids(run.mark)) > 3  # the trainer and its Ray processes, found by our tag
        run.proc.send_signal(signal.SIGINT)
        try:
            run.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail("trainer did not exit within 120 s of SIGINT:\n" + run.output(4000))
        deadline = time.monotonic() + 30
        left = marked_pids(run.mark)
        while left and time.monotonic() < deadline:
            time.sleep(1)
            left = marked_pids(run.mark)
        details = []
        for pid in left:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:150]
            except OSError:
                continue
            details.append(f"{pid}: {cmdline!r}")
        assert not left, "Ray processes left behind after SIGINT:\n" + "\n".join(details)
    finally:
        run.cleanup()
        kill(server)

    # the steps logged before the SIGINT (a later step's records may be cut short by it)
    records = advantage_records(run)[: back + 2]
    assert records[0]["mask_dtype"] == "torch.int64", records[0]["mask_dtype"]
    assert not any(r["failed"] for r in records[0]["rows"])
    for record in records:
        failed = [r for r in record["rows"] if r["failed"]]
        assert len(failed) <= 8, record["rows"]  # the server's 2 prompts x 4 rollouts at most
        assert all(a == 0 for r in failed for a in r["advantages"]), failed
        check_grpo_of_scalars([r for r in record["rows"] if not r["failed"]])
    metrics = [json.loads(ln) for ln in run.metrics.read_text().splitlines() if ln.strip()]
    steps = {m["step"]: m["data"] for m in metrics if "actor/pg_loss" in m["data"]}
    assert steps[1]["critic/score/mean"] == pytest.approx(steps[1]["reward/score/mean"], abs=1e-5)  # G, not G * L
    failed_share = {step: data["reward/scorer_failed/mean"] for step, data in steps.items()}
    for step, record in enumerate(records, start=1):  # the metric counts the flagged rollouts
        assert failed_share[step] == sum(r["failed"] for r in record["rows"]) / 16, (step, failed_share)
    assert failed_share[1] == 0 and max(failed_share.values()) > 0, failed_share
    assert failed_share[back + 2] == 0, failed_share  # the server is back: its rollouts are scored again


def check_grpo_of_scalars(rows: list[dict]) -> None:
    """Each row's reward is one scalar on its last token, the scores differ, and each row's advantages are verl's
    GRPO of its group's scores (the sample std, eps 1e-6) on every token; 0 for a row alone in its group (the other
    rollouts failed: no group to compare it with)."""
    for r in rows:
        assert all(x == 0 for x in r["rewards"][:-1]), r  # one scalar, on the last token
    scores = torch.tensor([r["rewards"][-1] for r in rows])
    assert len(set(scores.tolist())) > 1, scores  # toy_lint's G differs between responses
    for uid in {r["uid"] for r in rows}:
        members = [i for i, r in enumerate(rows) if r["uid"] == uid]
        group = scores[members]
        z = (group - group.mean()) / (group.std() + 1e-6) if len(members) > 1 else torch.zeros(1)  # the sample std
        for i, expected in zip(members, z.tolist(), strict=True):
            assert rows[i]["advantages"] == pytest.approx([expected] * len(rows[i]["rewards"]), abs=1e-5), rows[i]


def last_logged_step(run: Run) -> int:
    """The last step in the run's metrics file (0 before the first; a line still being written is left out)."""
    found = re.findall(r'^\{"step":(\d+),', run.metrics.read_text(), flags=re.M) if run.metrics.exists() else []
    return max(map(int, found), default=0)


def _wait_for_step(run: Run, step: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if run.metrics.exists() and f'"step":{step},' in run.metrics.read_text():
            return
        if run.proc.poll() is not None:
            pytest.fail(f"trainer exited ({run.proc.returncode}) before step {step}:\n" + run.output(4000))
        time.sleep(0.5)
    run.cleanup()
    pytest.fail(f"no step {step} within {timeout:.0f}s:\n" + run.output(4000))


def _stderr_last_line(run: Run) -> str:
    return next(line for line in reversed(run.output().splitlines()) if line.startswith("verl-bot: run stopped:"))


STOCK_REWARD = """
def compute_score(data_source, solution_str, ground_truth=None, extra_info=None):
    \"\"\"A stock verl custom reward: the share of vowel-free characters, and whether the response has none.\"\"\"
    vowels = sum(c in "aeiou" for c in solution_str.lower())
    return {"score": 1.0 - vowels / max(len(solution_str), 1), "acc": float(vowels == 0)}
"""
WALL_CLOCK = ("timing_s/", "timing_per_token_ms/")  # and every "perf/" key: time, throughput, memory in use


def stock_grpo_run(workdir: Path, name: str, plugin: bool) -> Run:
    """verl's GRPO with its naive manager and a custom reward, 2 steps, rollout.full_determinism=true (the hf
    rollout then samples from the seed, the weights and the prompts alone), started. Without the plugin, verl
    loads only the CPU backend (verl_bot/cpu/backend_only.py)."""
    (workdir / "stock_reward.py").write_text(STOCK_REWARD)
    run = Run(
        workdir,
        name,
        [
            "algorithm.adv_estimator=grpo",
            "reward.reward_manager.name=naive",
            f"reward.custom_reward_function.path={workdir / 'stock_reward.py'}",
            "reward.custom_reward_function.name=compute_score",
            "actor_rollout_ref.rollout.full_determinism=True",
        ],
    )
    run.env["VERL_USE_EXTERNAL_MODULES"] = "" if plugin else "verl_bot.cpu.backend_only"
    run.env["VERL_USE_EXTERNAL_PLUGINS"] = "auto" if plugin else "none"
    return run.start()


def step_metrics(run: Run) -> list[dict]:
    """Each step's metrics of a finished run (which printed no line of verl-bot's)."""
    log = run.output()
    assert "verl-bot" not in log, [ln for ln in log.splitlines() if "verl-bot" in ln][:5]
    metrics = [json.loads(ln) for ln in run.metrics.read_text().splitlines() if ln.strip()]
    return [m["data"] for m in sorted(metrics, key=lambda m: m["step"])]


def test_a_stock_grpo_run_is_the_same_with_the_plugin_loaded(workdir):
    """A run that does not use verl-bot (issue 23): verl's GRPO with its naive manager, once with verl-bot's plugin
    loaded in every process and once without it (verl's VERL_USE_EXTERNAL_PLUGINS=none; the CPU backend alone),
    side by side: the same metric keys at every step, and the same values for the same seed and samples, up to
    float32 rounding (the rollouts reach the trainer in another order, so its sums add them in another order)
    except time and memory; no line of verl-bot's in the output."""
    runs = [stock_grpo_run(workdir, "stock_plugin", plugin=True), stock_grpo_run(workdir, "stock_none", plugin=False)]
    try:
        codes = [run.wait(timeout=600) for run in runs]
    finally:
        for run in runs:
            run.cleanup()
    for run, rc in zip(runs, codes, strict=True):
        assert rc == 0, run.output(6000)
    with_plugin, without = (step_metrics(run) for run in runs)
    assert len(with_plugin) == len(without) == 2
    for step, (a, b) in enumerate(zip(with_plugin, without, strict=True), start=1):
        assert sorted(a) == sorted(b), (step, sorted(set(a) ^ set(b)))
        values = {k: (a[k], b[k]) for k in a if not k.startswith(WALL_CLOCK) and "perf/" not in k}
        # abs 1e-5: rollout_corr/chi2_seq is E[ratio^2] - 1 of ratios within 1e-7 of 1, so its float32 rounding in
        # another summation order is ~2e-6 (CI saw 0.0 against 2.1e-6); every other value is O(1e-3) or more
        differ = {k: v for k, v in values.items() if v[0] != pytest.approx(v[1], rel=1e-5, abs=1e-5)}
        assert not differ, (step, differ)
        assert a["response_length/mean"] == b["response_length/mean"] and a["actor/grad_norm"] > 0


def test_rollout_engine_dies_stops_the_run_with_its_cause(workdir):
    """verl's vLLM rollout: kill vLLM's engine core after the first step. verl would tag every later group
    "failure" and end on "no materializable trajectories" (or refill forever); the run stops with the engine's
    error as its last line, within 2 minutes."""
    run = Run(workdir, "engine_dies", ["algorithm.adv_estimator=bot", "reward.reward_manager.name=bot"], steps=50,
              rollout="vllm").start()
    try:
        _wait_for_step(run, 1, timeout=400)
        engines = [pid for pid in marked_pids(run.mark) if b"EngineCore" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert engines, "no vLLM engine core among the run's processes"
        for pid in engines:
            os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        rc = run.wait(timeout=180)
        elapsed = time.monotonic() - killed
    finally:
        run.cleanup()
    assert rc != 0
    assert elapsed < 120, elapsed
    last = run.output().rstrip().splitlines()[-1]
    assert last == _stderr_last_line(run), run.output(4000)
    assert last.startswith("verl-bot: run stopped: RolloutEngineError: ") and "EngineDeadError" in last, last


def test_a_weight_sync_the_engine_fails_stops_the_run_with_its_cause(workdir):
    """verl's vLLM rollout: loading the trainer's weights fails inside vLLM's worker (injected by the probe
    module). verl's sender would wait for the bucket's acknowledgement forever; the run stops with the worker's
    error as its last line, within 2 minutes of the failure."""
    run = Run(workdir, "sync_fails", ["algorithm.adv_estimator=bot", "reward.reward_manager.name=bot"], steps=3,
              rollout="vllm")
    run.env["VB_INJECT"] = "weight_sync"
    run.start()
    try:
        rc = run.wait(timeout=600)
    finally:
        run.cleanup()
    assert rc != 0
    failed_at = float(json.loads(run.probe.read_text().splitlines()[0])["injected_at"])
    assert run.log.stat().st_mtime - failed_at < 120
    last = run.output().rstrip().splitlines()[-1]
    assert last == (
        "verl-bot: run stopped: RolloutEngineError: the rollout engine failed to load the trainer's weights "
        "(update_weights_from_ipc): RuntimeError: injected: this bucket cannot be loaded"
    ), run.output(4000)


def _last_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


@pytest.mark.parametrize(
    ("name", "extra", "message"),
    [
        (
            "unknown_data_source",
            ["algorithm.adv_estimator=bot", "reward.reward_manager.name=bot", "data.train_files={nope}"],
            "no scorer for data_source='nope'",
        ),
        (
            "naive_scalar",
            ["algorithm.adv_estimator=bot", "reward.reward_manager.name=naive"],
            "reward.reward_manager.name=naive gives one scalar per response",
        ),
        (
            "no_chat_template",
            ["algorithm.adv_estimator=bot", "reward.reward_manager.name=bot",
             "actor_rollout_ref.model.path={no_template}"],
            "has no chat template, and verl's dataset and agent loop format every prompt",
        ),
        (
            "kl_in_reward",
            ["algorithm.adv_estimator=bot", "reward.reward_manager.name=bot", "algorithm.use_kl_in_reward=True"],
            "use the actor's KL loss",
        ),
    ],
)
def test_misconfiguration_stops_verls_trainer_before_ray_with_the_message_last(workdir, name, extra, message):
    """verl's real trainer command, misconfigured: non-zero exit in seconds, the message is the last line."""
    import pandas as pd

    nope = workdir / "nope.parquet"
    pd.read_parquet(workdir / "train.parquet").assign(data_source="nope").to_parquet(nope)
    no_template = workdir / "model_no_template"  # the tiny model, its tokenizer without a chat template
    shutil.rmtree(no_template, ignore_errors=True)
    shutil.copytree(workdir / "model", no_template)
    (no_template / "chat_template.jinja").unlink(missing_ok=True)
    tokenizer_config = json.loads((no_template / "tokenizer_config.json").read_text())
    tokenizer_config.pop("chat_template", None)
    (no_template / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    run = Run(workdir, name, [e.format(nope=nope, no_template=no_template) for e in extra]).start()
    t0 = time.monotonic()
    try:
        rc = run.wait(timeout=120)
        out = run.output()
    finally:
        run.cleanup()
    assert rc != 0 and time.monotonic() - t0 < 120
    assert _last_line(out).startswith("verl-bot: run stopped: VerlBotConfigError: "), out[-3000:]
    assert message in _last_line(out), out[-3000:]
    assert "Started a local Ray instance" not in out  # refused before Ray (and before any model loads)


def test_pure_on_cpu_then_a_server_refusing_our_credentials_stops_the_run_before_its_update(workdir):
    """One trainer start, two checks, `pure` on the bot manager's streams, 4 prompts a step in order.

    Step 1 (toy_lint): the reward streams travel through TransferQueue to the `pure` estimator in verl's trainer, and
    its advantages are PURE's slow reference's of those streams (tests/harness/references.py, the knobs' defaults).
    Step 2's prompts are of a data source scored by a real reward server that came up after the start-up checks
    (which would refuse it at once: tests/component/test_run_safety.py) and answers HTTP 401 (a token rotated mid-run):
    a configuration error that only shows when a rollout is scored. The reward path marks it, the replay buffer stops
    the run before step 2's update, the message is the last line."""
    port = free_port()
    run = Run(
        workdir,
        "pure_refused",
        [
            "algorithm.adv_estimator=pure",
            "reward.reward_manager.name=bot",
            f"data.train_files={workdir / 'train_remote.parquet'}",
            "data.shuffle=False",
            f"+reward.reward_kwargs.bot.scorers.toy_remote=http://127.0.0.1:{port}",
        ],
        steps=2,
    )
    run.env.pop("REWARD_SERVER_TOKEN", None)
    server = None
    t0 = time.monotonic()
    try:
        run.start()
        while "Started a local Ray instance" not in run.output():  # past the start-up checks (before Ray)
            assert run.proc.poll() is None and time.monotonic() - t0 < 200, run.output(3000)
            time.sleep(0.5)
        server = subprocess.Popen(
            [sys.executable, "-m", "reward_servers.math", "--port", str(port), "--workers", "1", "--token", "secret"],
            cwd=Path(__file__).resolve().parents[2],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        rc = run.wait(timeout=400)
        out = run.output()
    finally:
        run.cleanup()
        if server is not None:
            server.terminate()
            server.wait(30)

    # step 1: `pure` got the streams, its advantages are the slow reference's and not all 0, verl logged the step
    calls = [c for c in run.records() if "estimator" in c]
    assert len(calls) == 1 and calls[0]["estimator"] == "pure", calls
    rows = calls[0]["rows"]
    assert len(rows) == 16
    assert all(r["step_ends"] >= 1 for r in rows if r["length"]), rows  # at least the last token
    assert all(r["outcome_sum"] in (0.0, 1.0) and r["outcome_padding"] == 0 for r in rows), rows
    assert any(r["local_nonzero"] > 0 for r in rows), rows
    assert any(r["adv_nonzero"] > 0 for r in rows), rows
    for r in rows:  # right-padded rows, as the reference reads them (a row's first `length` tokens)
        assert r["mask"] == [1] * r["length"] + [0] * (len(r["mask"]) - r["length"]), r["mask"]
    column = {key: [r[key] for r in rows] for key in ("local", "step_end", "outcome_sum", "length", "uid")}
    expected, _ = reference_pure(column["local"], column["step_end"], column["outcome_sum"], column["length"],
                                 column["uid"])
    torch.testing.assert_close(torch.tensor([r["advantages"] for r in rows], dtype=torch.float64),
                               torch.tensor(expected, dtype=torch.float64), atol=1e-4, rtol=1e-4)
    metrics = [json.loads(ln) for ln in run.metrics.read_text().splitlines() if ln.strip()]
    steps = {m["step"]: m["data"] for m in metrics if "actor/pg_loss" in m["data"]}
    assert sorted(steps) == [1], metrics  # step 2 was stopped before its update
    assert 0.0 <= steps[1]["reward/solved/mean"] <= 1.0

    # step 2: the refusal, as the run's last line
    assert rc != 0, out[-3000:]
    last = _last_line(out)
    assert last.startswith("verl-bot: run stopped: VerlBotConfigError: "), out[-3000:]
    assert "answered HTTP 401 (credentials refused)" in last and "REWARD_SERVER_TOKEN" in last, last
    print(f"refused run stopped after {time.monotonic() - t0:.0f} s")
