"""End-to-end: verl 0.9.1's real trainer (`python -m verl.trainer.main_ppo`, v1) on the CPU backend.

Each test starts the real trainer in a subprocess with the overrides of
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
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import torch

from tests.component.test_outages import kill, reward_server
from tests.conftest import free_port
from verl_bot.advantage.bot import bot_advantage
from verl_bot.cpu import overrides
from verl_bot.observe.token_records import read_records, recorded_files

pytestmark = pytest.mark.timeout(900)

MARK_ENV = "VERL_BOT_TEST_RUN"

PROBE = '''
"""Test probe (loaded by verl via VERL_USE_EXTERNAL_MODULES in every verl process): records what the
estimators receive, the advantages of the whole advantage step, and the advantages at the actor's update."""
import json, os, zlib
import torch
import verl_bot.plugin
verl_bot.plugin.register()
from verl.trainer.ppo import core_algos, ray_trainer
from verl.trainer.ppo.v1 import trainer_base
from verl_bot.credit.context import current
from verl_bot.rewards.builtin import toy_lint


def _write(record, env="VB_PROBE_FILE"):
    with open(os.environ[env], "a") as f:
        f.write(json.dumps(record) + "\\n")


def flaky_toy_lint(prompt, response, ground_truth=None, extra_info=None):
    """toy_lint, but the scorer fails (raises) on a third of the responses, deterministically by their text."""
    if zlib.crc32(response.encode()) % 3 == 0:
        raise RuntimeError("flaky scorer: simulated timeout")
    return toy_lint(prompt, response, ground_truth, extra_info)


_bot = core_algos.get_adv_estimator_fn("bot")


def bot_probe(*args, **kwargs):
    """token_level_rewards, response_mask: [B, T]. Records per-row stats, then runs the real `bot`."""
    rewards = kwargs["token_level_rewards"] if "token_level_rewards" in kwargs else args[0]
    mask = kwargs["response_mask"] if "response_mask" in kwargs else args[1]
    r = rewards.detach().float()
    m = mask.detach().bool()
    pos = torch.arange(m.shape[1]).expand_as(m)
    last = torch.where(m, pos, torch.full_like(pos, -1)).max(dim=1).values  # [B]
    rows = []
    for i in range(r.shape[0]):
        valid = r[i][m[i]]
        rows.append({
            "length": int(m[i].sum()),
            "nonzero": int((valid != 0).sum()),
            "nonzero_before_last": int(((r[i] != 0) & m[i] & (pos[i] != last[i])).sum()),
            "distinct": int(torch.unique(valid).numel()),
            "sum": float(valid.sum()),
        })
    _write({"estimator": "bot", "shape": list(r.shape), "mask_dtype": str(mask.dtype), "rows": rows})
    return _bot(*args, **kwargs)


core_algos.ADV_ESTIMATOR_REGISTRY["bot"] = bot_probe
_pure = core_algos.get_adv_estimator_fn("pure")


def pure_probe(*args, **kwargs):
    """Records the reward streams the `pure` estimator finds active, then runs the real `pure`."""
    from verl_bot.credit.streams import active_streams
    mask = kwargs["response_mask"]
    streams = active_streams("pure", ("local", "step_end", "outcome"), mask)
    advantages, returns = _pure(*args, **kwargs)
    m = mask.bool()
    rows = [{
        "length": int(m[i].sum()),
        "local_nonzero": int((streams["local"][i][m[i]] != 0).sum()),
        "step_ends": int(streams["step_end"][i][m[i]].sum()),
        "outcome_sum": float(streams["outcome"][i].sum()),
        "outcome_padding": float(streams["outcome"][i][~m[i]].abs().sum()),
        "adv_nonzero": int((advantages[i][m[i]] != 0).sum()),
    } for i in range(mask.shape[0])]
    _write({"estimator": "pure", "shape": list(mask.shape), "rows": rows})
    return advantages, returns


core_algos.ADV_ESTIMATOR_REGISTRY["pure"] = pure_probe
_advantage_step = trainer_base.compute_advantage_for_multi_trajectories


def advantage_step_probe(data, *args, **kwargs):
    """The whole advantage step (verl-bot's hook inside): per row uid, rewards, old log-probs, advantages, failed."""
    out = _advantage_step(data, *args, **kwargs)
    ctx = current()
    mask = out.batch["response_mask"].bool()
    failed = ctx.failed.tolist() if ctx is not None and ctx.failed is not None else [False] * len(mask)
    _write_advantage_rows(out, failed)
    return out


def _write_advantage_rows(out, failed):
    mask = out.batch["response_mask"].bool()
    rows = []
    for i in range(len(mask)):
        rows.append({
            "uid": str(out.non_tensor_batch["uid"][i]),
            "failed": bool(failed[i]),
            "rewards": out.batch["token_level_rewards"][i][mask[i]].tolist(),
            "old_log_probs": out.batch["old_log_probs"][i][mask[i]].tolist(),
            "advantages": out.batch["advantages"][i][mask[i]].tolist(),
        })
    _write({"step": "advantage", "mask_dtype": str(out.batch["response_mask"].dtype), "rows": rows})


trainer_base.compute_advantage_for_multi_trajectories = advantage_step_probe
_legacy_advantage = ray_trainer.compute_advantage


def legacy_advantage_probe(data, *args, **kwargs):
    """The legacy trainer's advantage step (verl-bot's hook inside), recorded as `advantage_step_probe` does; a
    failed row is read from its own `reward_extra_info` (the scorer's verdict), not from verl-bot's context."""
    out = _legacy_advantage(data, *args, **kwargs)
    infos = out.non_tensor_batch.get("reward_extra_info", [{}] * len(out))
    _write_advantage_rows(out, [float((info or {}).get("scorer_failed", 0) or 0) > 0 for info in infos])
    return out


ray_trainer.compute_advantage = legacy_advantage_probe
_vanilla = core_algos.POLICY_LOSS_REGISTRY["vanilla"]


def vanilla_probe(old_log_prob, log_prob, advantages, response_mask, *args, **kwargs):
    """At the actor's update (a worker process): each row's old log-probs and the advantages the loss uses."""
    m = response_mask.bool()
    rows = [{"old_log_probs": old_log_prob[i][m[i]].tolist(), "advantages": advantages[i][m[i]].tolist()}
            for i in range(len(m))]
    _write({"step": "loss", "rows": rows})
    return _vanilla(old_log_prob, log_prob, advantages, response_mask, *args, **kwargs)


core_algos.POLICY_LOSS_REGISTRY["vanilla"] = vanilla_probe

if os.environ.get("VB_INJECT") == "weight_sync":  # loading the trainer's weights fails inside vLLM's worker
    import time
    import sys
    from verl_bot.hooks.on_import import when_imported

    def _failing_update():
        def _update_weights(self, *args, **kwargs):
            _write({"injected_at": time.time()})
            raise RuntimeError("injected: this bucket cannot be loaded")

        utils = sys.modules["verl.workers.rollout.vllm_rollout.utils"]
        utils.vLLMColocateWorkerExtension._update_weights = _update_weights

    when_imported("verl.workers.rollout.vllm_rollout.utils", _failing_update)
'''


# ----------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def workdir(tmp_path_factory, tiny_model_dir) -> Path:
    """Tiny model + tokenizer (with ChatML template, from conftest), a toy_lint dataset, and the probe module."""
    root = tmp_path_factory.mktemp("cpu_e2e")
    (root / "model").symlink_to(tiny_model_dir, target_is_directory=True)
    import pandas as pd

    words = ["good", "bad", "ok", "fine", "great", "yes", "no", "poor"]
    rows = []
    for i in range(32):
        gt = {"forbidden": "aeiou"} if i % 2 == 0 else None  # ground_truth may be absent for toy_lint
        rows.append(
            {
                "data_source": "toy_lint",
                "prompt": [{"role": "user", "content": f"Write {words[i % len(words)]} text number {i}"}],
                "ability": "lint",
                "reward_model": {"style": "rule", "ground_truth": gt},
                "extra_info": {"index": i, "split": "train"},
            }
        )
    df = pd.DataFrame(rows)
    df.to_parquet(root / "train.parquet")
    df.iloc[:8].to_parquet(root / "val.parquet")
    # seven prompts in eight scored by a scorer that fails on a third of the responses (vb_probe.flaky_toy_lint),
    # the rest by toy_lint's: no failure in a whole run has odds 3e-5 (with every other prompt: 1% of the runs)
    sources = (["toy_lint"] + ["toy_flaky"] * 7) * 4
    df.assign(data_source=sources).to_parquet(root / "train_flaky.parquet")
    # in order (data.shuffle=False, 4 prompts a step): step 1 toy_lint, step 2 a data source of a reward server
    df.iloc[:8].assign(data_source=["toy_lint"] * 4 + ["toy_remote"] * 4).to_parquet(root / "train_remote.parquet")
    # in order (4 prompts a step): every step two toy_lint prompts and two of a math server's (answer 7)
    remote = [{"data_source": "toy_remote", "reward_model": {"style": "rule", "ground_truth": "7"}}, {}]
    pd.DataFrame([{**row, "reward_model": {"style": "rule", "ground_truth": None}, **remote[i % 2]}
                  for i, row in enumerate(rows)]).to_parquet(root / "train_restart.parquet")
    (root / "probe").mkdir()
    (root / "probe" / "vb_probe.py").write_text(PROBE)
    return root


# ------------------------------------------------------------------------------------------ helpers
def _marked_pids(mark: str) -> list[int]:
    """Processes (other than this one) whose environment carries our run tag: the trainer and all its Ray processes."""
    needle = f"{MARK_ENV}={mark}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            env = (d / "environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            found.append(int(d.name))
    return found


def _kill_marked(mark: str) -> None:
    for pid in _marked_pids(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Run:
    """One `python -m verl.trainer.main_ppo` subprocess on the CPU backend."""

    def __init__(self, workdir: Path, name: str, extra: list[str], model: Path | None = None, steps: int = 2,
                 rollout: str = "hf"):
        self.dir = workdir / name
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir()
        self.mark = uuid.uuid4().hex
        self.ray_dir = tempfile.mkdtemp(prefix="vbray", dir="/tmp")  # short: Ray's socket paths have a length limit
        self.log = self.dir / "trainer.log"
        self.rollout_log = self.dir / "rollout.jsonl"
        self.metrics = self.dir / "metrics.jsonl"
        self.probe = self.dir / "probe.jsonl"
        self.cmd = [
            sys.executable,
            "-m",
            "verl.trainer.main_ppo",
            *overrides(rollout=rollout),
            f"+ray_kwargs.ray_init._temp_dir={self.ray_dir}",
            f"data.train_files={workdir / 'train.parquet'}",
            f"data.val_files={workdir / 'val.parquet'}",
            "data.train_batch_size=4",
            "data.max_prompt_length=64",
            "data.max_response_length=32",
            f"actor_rollout_ref.model.path={model or workdir / 'model'}",
            "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16",
            "actor_rollout_ref.actor.use_kl_loss=False",
            "actor_rollout_ref.actor.optim.lr=1e-3",
            "algorithm.use_kl_in_reward=False",
            "trainer.logger=[console,file]",
            "trainer.project_name=verl_bot_test",
            f"trainer.experiment_name={name}",
            "trainer.val_before_train=False",
            "trainer.test_freq=-1",
            "trainer.save_freq=-1",
            f"trainer.total_training_steps={steps}",
            f"trainer.default_local_dir={self.dir / 'ckpt'}",
            *extra,
        ]
        self.env = dict(os.environ)
        if self.env.get("CUDA_VISIBLE_DEVICES") == "":
            del self.env["CUDA_VISIBLE_DEVICES"]
        self.env.update(
            {
                "VERL_PLATFORM": "cpu",
                "ROLLOUT": rollout,  # when the command is recipes/cpu_train.sh
                MARK_ENV: self.mark,
                "VERL_FILE_LOGGER_PATH": str(self.metrics),
                "VERL_BOT_HF_ROLLOUT_LOG": str(self.rollout_log),
                "VB_PROBE_FILE": str(self.probe),
                "VERL_USE_EXTERNAL_MODULES": "vb_probe",
                "PYTHONPATH": os.pathsep.join([str(workdir / "probe"), self.env.get("PYTHONPATH", "")]).rstrip(
                    os.pathsep
                ),
                "HYDRA_FULL_ERROR": "1",
                "RAY_DEDUP_LOGS": "0",
            }
        )
        self.proc: subprocess.Popen | None = None

    def start(self) -> Run:
        self._fh = open(self.log, "wb")
        self.proc = subprocess.Popen(
            self.cmd,
            env=self.env,
            stdout=self._fh,
            stderr=subprocess.STDOUT,
            cwd=self.dir,
            # a test session started in the background by a shell without job control inherits SIGINT
            # ignored, and Python then installs no KeyboardInterrupt handler: give the trainer the default
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        return self

    def output(self, tail: int = 0) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text[-tail:] if tail else text

    def wait(self, timeout: float) -> int:
        """Wait for the trainer to exit; on timeout kill this run's processes and fail naming what usually hangs."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.cleanup()
            text = self.output()
            hints = [ln for ln in text.splitlines() if "cannot be scheduled" in ln or "Waiting for" in ln][-5:]
            pytest.fail(
                f"verl's trainer did not finish within {timeout:.0f}s. A shortage of Ray resources makes verl hang "
                "instead of fail; check: logical CPUs (ray_kwargs.ray_init.num_cpus: task runner, TransferQueue, "
                "agent-loop and reward-loop workers hold one each), logical GPUs (+ray_kwargs.ray_init.num_gpus "
                "must equal trainer.n_gpus_per_node * trainer.nnodes), TransferQueue storage units "
                "(transfer_queue.backend.SimpleStorage.num_data_storage_units), CUDA_VISIBLE_DEVICES set but empty; "
                "or the machine is overloaded.\nRay said: "
                + ("\n".join(hints) or "(nothing about resources)")
                + f"\n--- last lines of {self.log} ---\n"
                + text[-4000:]
            )

    def finish(self, timeout: float = 420, tail: int = 6000) -> Run:
        """Start the trainer, wait for it and clean up; assert that it succeeded (its log's tail if not)."""
        self.start()
        try:
            rc = self.wait(timeout=timeout)
        finally:
            self.cleanup()
        assert rc == 0, self.output(tail)
        return self

    def records(self, path: Path | None = None) -> list[dict]:
        """The JSON lines of `path` (default: the probe's file)."""
        return [json.loads(ln) for ln in (path or self.probe).read_text().splitlines() if ln.strip()]

    def rollout_events(self) -> list[dict]:
        if not self.rollout_log.exists():
            return []
        return [json.loads(ln) for ln in self.rollout_log.read_text().splitlines() if ln.strip()]

    def wait_for_event(self, pred, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ev in self.rollout_events():
                if pred(ev):
                    return ev
            if self.proc is not None and self.proc.poll() is not None:
                pytest.fail(
                    f"trainer exited ({self.proc.returncode}) before the awaited rollout event:\n" + self.output(4000)
                )
            time.sleep(0.5)
        self.cleanup()
        pytest.fail(
            f"no such rollout server event within {timeout:.0f}s (see Run.wait for what usually hangs):\n"
            + self.output(4000)
        )

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        _kill_marked(self.mark)
        if getattr(self, "_fh", None):
            self._fh.close()
        shutil.rmtree(self.ray_dir, ignore_errors=True)


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
        assert len(_marked_pids(run.mark)) > 3  # the trainer and its Ray processes, found by our tag
        run.proc.send_signal(signal.SIGINT)
        try:
            run.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail("trainer did not exit within 120 s of SIGINT:\n" + run.output(4000))
        deadline = time.monotonic() + 30
        left = _marked_pids(run.mark)
        while left and time.monotonic() < deadline:
            time.sleep(1)
            left = _marked_pids(run.mark)
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



def check_bot_advantages(advantage_steps: list[list[dict]]) -> None:
    """Each step's advantages (the probe's rows of its whole advantage step): `bot_advantage` over the rollouts
    whose scorer answered; 0 where it failed, and 0 in a group that failures left with a single rollout (nothing to
    compare it with). At least one failure in the steps, else the check says nothing about failures."""
    assert advantage_steps
    failed_seen = 0
    for rows in advantage_steps:
        failed_seen += sum(r["failed"] for r in rows)
        had_failure = {r["uid"] for r in rows if r["failed"]}
        survivors = {u: sum(1 for r in rows if r["uid"] == u and not r["failed"]) for u in had_failure}
        lone = {u for u, n in survivors.items() if n == 1}
        for r in rows:
            if r["failed"] or r["uid"] in lone:
                assert not any(r["advantages"]), r
        valid = [r for r in rows if not r["failed"] and r["uid"] not in lone]
        width = max(len(r["rewards"]) for r in valid)
        rewards = torch.zeros(len(valid), width)
        mask = torch.zeros(len(valid), width)
        for i, r in enumerate(valid):
            rewards[i, : len(r["rewards"])] = torch.tensor(r["rewards"])
            mask[i, : len(r["rewards"])] = 1.0
        expected = bot_advantage(rewards, mask, [r["uid"] for r in valid])
        for i, r in enumerate(valid):
            torch.testing.assert_close(torch.tensor(r["advantages"]), expected[i, : len(r["rewards"])])
    assert failed_seen > 0, "the flaky scorer never failed: the test checks nothing about failures"


def check_token_records(folder: Path, step_rows: list[dict], model: Path) -> None:
    """The token records of step 1 in `folder` are exactly that step's rows (`step_rows`, the probe's): uid, token
    rewards, advantages, and the token ids with the bytes of their pieces, which spell the decoded response."""
    from transformers import AutoTokenizer

    files = recorded_files(folder)
    assert 1 in files, files
    records = read_records(files[1])

    def row_key(uid, rewards, advantages):
        return uid, tuple(round(x, 5) for x in rewards), tuple(round(x, 5) for x in advantages)

    assert sorted(row_key(r["uid"], r["rewards"], r["advantages"]) for r in records) == sorted(
        row_key(r["uid"], r["rewards"], r["advantages"]) for r in step_rows
    )
    tokenizer = AutoTokenizer.from_pretrained(model)
    for r in records:
        assert (r["step"], r["estimator"], r["data_source"] in ("toy_lint", "toy_flaky")) == (1, "bot", True)
        pieces = zip(r["token_bytes"], r["special"], strict=True)
        raw = b"".join(bytes.fromhex(h) for h, special in pieces if not special)
        assert raw.decode("utf-8", "replace") == tokenizer.decode(r["response_ids"], skip_special_tokens=True)

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


def probe_records(probe: Path) -> list[dict]:
    """A probe file's records so far; a last line cut short (still being written, or by a kill) is left out."""
    text = probe.read_text() if probe.exists() else ""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if lines and not text.endswith("\n"):
        lines.pop()
    return [json.loads(ln) for ln in lines]


def advantage_records(run: Run) -> list[dict]:
    """The probe's records of verl's advantage step so far, one a step."""
    return [record for record in probe_records(run.probe) if record.get("step") == "advantage"]


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
        engines = [pid for pid in _marked_pids(run.mark) if b"EngineCore" in Path(f"/proc/{pid}/cmdline").read_bytes()]
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

    Step 1 (toy_lint): the reward streams travel through TransferQueue to the `pure` estimator in verl's trainer.
    Step 2's prompts are of a data source scored by a real reward server that came up after the start-up checks
    (which would refuse it at once: tests/component/test_run_safety.py) and answers HTTP 401 (a token rotated mid-run):
    a
    configuration error that only shows when a rollout is scored. The reward path marks it, the replay buffer stops
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

    # step 1: `pure` got the streams, its advantages are not all 0, verl logged the step
    calls = [c for c in run.records() if "estimator" in c]
    assert len(calls) == 1 and calls[0]["estimator"] == "pure", calls
    rows = calls[0]["rows"]
    assert len(rows) == 16
    assert all(r["step_ends"] >= 1 for r in rows if r["length"]), rows  # at least the last token
    assert all(r["outcome_sum"] in (0.0, 1.0) and r["outcome_padding"] == 0 for r in rows), rows
    assert any(r["local_nonzero"] > 0 for r in rows), rows
    assert any(r["adv_nonzero"] > 0 for r in rows), rows
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
