"""verl's trainer in a subprocess for the end-to-end tests: `Run` (one `main_ppo` start on the CPU backend, tagged so
that its leftovers are found and killed), the shared `workdir` (the tiny model, the parquet data of every start, the
probe module that records what verl's step saw) and the checks of a step's records."""

from __future__ import annotations

import json
import os
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

from tests.harness.references import reference_bot
from verl_bot.cpu import overrides
from verl_bot.observe.token_records import read_records, recorded_files

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
from verl_bot_demo.scorers import toy_lint


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
    """Records the reward streams the `pure` estimator finds active, each row's uid, mask and the advantages `pure`
    returns (the real `pure`, run here)."""
    from verl_bot.credit.streams import active_streams
    mask = kwargs["response_mask"]
    streams = active_streams("pure", ("local", "step_end", "outcome"), mask)
    advantages, returns = _pure(*args, **kwargs)
    m = mask.bool()
    rows = [{
        "uid": str(kwargs["index"][i]),
        "mask": m[i].int().tolist(),
        "local": streams["local"][i].tolist(),
        "step_end": streams["step_end"][i].tolist(),
        "advantages": advantages[i].tolist(),
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


def marked_pids(mark: str) -> list[int]:
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


def kill_marked(mark: str) -> None:
    for pid in marked_pids(mark):
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
        kill_marked(self.mark)
        if getattr(self, "_fh", None):
            self._fh.close()
        shutil.rmtree(self.ray_dir, ignore_errors=True)


def check_bot_advantages(advantage_steps: list[list[dict]]) -> None:
    """Each step's advantages (the probe's rows of its whole advantage step): BoT's over the rollouts whose scorer
    answered (the slow reference, `reference_bot`); 0 where it failed, and 0 in a group that failures left with a
    single rollout (nothing to compare it with). At least one failure in the steps, else the check says nothing
    about failures."""
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
        expected = reference_bot(rewards, mask, [r["uid"] for r in valid])
        for i, r in enumerate(valid):
            got = torch.tensor(r["advantages"], dtype=torch.float64)
            torch.testing.assert_close(got, expected[i, : len(r["rewards"])], rtol=1e-4, atol=1e-4)
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


def kill_in_step_3(run: Run, out: Path) -> None:
    """SIGKILL every process of the run (launcher, driver, Ray and its actors) once the step-2 checkpoint and step
    2's metrics line are written (verl logs a step after saving its checkpoint): step 3 is running."""
    latest, metrics = out / "ckpt" / "latest_checkpointed_iteration.txt", out / "metrics.jsonl"
    deadline = time.monotonic() + 500
    try:
        while not (latest.exists() and latest.read_text().strip() == "2" and metrics.exists()
                   and '"step":2,' in metrics.read_text()):
            assert run.proc.poll() is None, run.output(4000)
            assert time.monotonic() < deadline, "no step-2 checkpoint:\n" + run.output(4000)
            time.sleep(0.5)
        kill_marked(run.mark)
        run.proc.wait(timeout=60)
        deadline = time.monotonic() + 30
        while marked_pids(run.mark) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not marked_pids(run.mark), "processes of the killed run still there:\n" + run.output(3000)
    finally:
        run.cleanup()
