"""GRPO-VPS end to end: `ALGO=vps STEPS=2 bash recipes/cpu_train.sh` runs verl 0.9.1's real trainer on the CPU.

The task is toy_math (cpu_train.sh's default for vps) with two-step problems, in its file order
(`data.shuffle=False`): in every 8 prompts one has no ground truth and one a ground truth no response can reach
(11: the running value stays in 0..9), and a tiny model given a short warm start here (cpu_train.sh would make
its longer one). GRPO-VPS runs with its defaults: beliefs in probability space, the group z-score floored.

One trainer start. The `vps_single_turn` agent loop probes every rollout on the `hf` rollout server
(`prompt_logprobs`) inside verl's agent-loop worker; the records travel with the rows through TransferQueue; a
probe module (loaded by verl through `VERL_USE_EXTERNAL_MODULES`, as in tests/test_cpu_e2e.py) wraps the
registered `vps` estimator and records, per row, the probe record, the group id and the progress the estimator
added to GRPO's advantage. The test recomputes that progress from the records with the slow loop reference.

    .venv/bin/python -m pytest -q tests/test_e2e_vps.py
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.test_cpu_e2e import Run
from tests.test_vps_advantage import reference_vps
from verl_bot.advantage.vps import DEFAULT_STD_FLOOR

pytestmark = pytest.mark.timeout(900)

ROOT = Path(__file__).resolve().parents[1]
ALPHA = 0.5
UNREACHABLE = "11"

PROBE = '''
"""Test probe: records what the `vps` estimator reads (probe records) and adds (progress) per row."""
import json, os
import verl_bot.plugin
verl_bot.plugin.register()
from verl.trainer.ppo import core_algos
from verl_bot.context import current
_vps = core_algos.get_adv_estimator_fn("vps")
_grpo = core_algos.get_adv_estimator_fn("grpo")

def vps_probe(**kwargs):
    adv, ret = _vps(**kwargs)
    config = kwargs["config"]
    grpo, _ = _grpo(
        token_level_rewards=kwargs["token_level_rewards"], response_mask=kwargs["response_mask"],
        index=kwargs["index"], norm_adv_by_std_in_grpo=config.get("norm_adv_by_std_in_grpo", True),
    )
    progress = (adv - grpo) / float(config.vps_alpha)
    mask = kwargs["response_mask"].bool()
    ctx = current()
    rows = []
    for i, row in enumerate(ctx.rows):
        n = int(mask[i].sum())
        rows.append({
            "uid": str(kwargs["index"][i]), "length": n, "record": row["verl_bot_vps"],
            "solved": (row.get("reward_extra_info") or {}).get("solved"), "grpo": float(grpo[i, 0]) if n else 0.0,
            "progress": progress[i, :n].tolist(),
        })
    with open(os.environ["VB_PROBE_FILE"], "a") as f:
        f.write(json.dumps({"rows": rows, "metrics": dict(ctx.metrics)}) + "\\n")
    return adv, ret

core_algos.ADV_ESTIMATOR_REGISTRY["vps"] = vps_probe

'''


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """The toy_math task (a few rows without a ground truth), a tiny model warm-started on it, the probe module."""
    import subprocess
    import sys

    import pandas as pd

    from verl_bot.cpu.tiny_model import build_model

    root = tmp_path_factory.mktemp("e2e_vps")
    data = root / "data"
    cmd = [sys.executable, str(ROOT / "recipes" / "data" / "toy_math.py"), "--out", str(data), "--train", "64",
           "--min-ops", "2", "--max-ops", "2"]
    subprocess.run(cmd, check=True, capture_output=True)
    train = pd.read_parquet(data / "train.parquet")
    truths = {3: None, 5: UNREACHABLE}
    train["reward_model"] = [
        {**rm, "ground_truth": truths.get(i % 8, rm["ground_truth"])} for i, rm in enumerate(train["reward_model"])
    ]
    train.to_parquet(data / "train.parquet")
    # 300 steps: about a fifth of its sampled solutions of two-step problems are right (150: 9%), so that rollouts
    # reach a solved outcome, the progress that is not floored in probability space
    build_model(root / "model", warm_start="toy_math", warm_start_kwargs={"steps": 300, "batch_size": 32})
    (root / "probe").mkdir()
    (root / "probe" / "vb_probe.py").write_text(PROBE)
    return root


def test_vps_two_steps_through_cpu_train_sh(workdir):
    """Probes run inside verl's agent loop, their records reach the estimator, whose progress matches them (in
    probability space, floored); a group whose beliefs never leave ~0 gets ~GRPO's advantage."""
    run = Run(workdir, "vps", [])
    run.cmd = ["bash", str(ROOT / "recipes" / "cpu_train.sh"), f"+algorithm.vps_alpha={ALPHA}", "data.shuffle=False"]
    run.env.update(
        {
            "ALGO": "vps",
            "STEPS": "2",
            "PY": str(ROOT / ".venv" / "bin" / "python"),
            "OUT_DIR": str(run.dir),
            "MODEL_DIR": str(workdir / "model"),
            "DATA_DIR": str(workdir / "data"),
            "TIMEOUT_S": "600",
        }
    )
    calls = run.finish(timeout=700).records()
    assert len(calls) == 2, calls
    for call in calls:
        rows = call["rows"]
        assert len(rows) == 32  # 8 prompts x 4 rollouts
        records = [r["record"] for r in rows]
        statuses = {rec["status"] for rec in records}
        assert statuses <= {"ok", "no_ground_truth", "empty_response"}, statuses
        probed = [r for r in rows if r["record"]["status"] == "ok"]
        assert probed and any(len(r["record"]["cuts"]) >= 2 for r in probed), records
        for r in probed:
            rec = r["record"]
            assert rec["cuts"][0] == 0 and rec["cuts"] == sorted(rec["cuts"]) and len(rec["logp"]) == len(rec["cuts"])
            assert all(math.isfinite(x) and x <= 0 for x in rec["logp"])
            assert rec["probe_tokens"] > 0 and rec["probe_s"] > 0 and rec["gen_s"] > 0
        # the progress the estimator added is the slow reference's, from these records (the group z-score)
        width = max(r["length"] for r in rows)
        _, expected = reference_vps(
            [[r["grpo"]] * width for r in rows],
            [r["length"] for r in rows],
            [r["uid"] for r in rows],
            [r["record"]["cuts"] for r in rows],
            [r["record"]["logp"] for r in rows],
            [None if r["solved"] is None else float(r["solved"]) for r in rows],
            ALPHA,
            std_floor=DEFAULT_STD_FLOOR,
        )
        for r, exp in zip(rows, expected, strict=True):
            assert r["progress"] == pytest.approx(exp[: r["length"]], abs=1e-3), (r, exp)
            if r["record"]["status"] != "ok":
                assert all(p == 0 for p in r["progress"])  # no probes: GRPO's advantage
        assert any(abs(p) > 0.1 for r in probed for p in r["progress"]), [(r["record"], r["solved"]) for r in probed]
        # groups of unsolved rollouts whose beliefs stay below 1e-4 (the unreachable answer's among them): the
        # floored z-score is at most 2e-4 / floor; unfloored, the noise of those beliefs was stretched to unit variance
        groups = {}
        for r in rows:
            groups.setdefault(r["uid"], []).append(r)
        flat = [
            g for g in groups.values()
            if all(r["record"]["status"] == "ok" and r["solved"] == 0 and max(r["record"]["logp"]) < math.log(1e-4)
                   for r in g)
        ]
        assert flat, [[(r["record"]["logp"], r["solved"]) for r in g] for g in groups.values()]
        assert all(abs(p) < 2e-4 / DEFAULT_STD_FLOOR for g in flat for r in g for p in r["progress"]), flat
        assert call["metrics"]["vps/floor_share"] >= len(flat) / 7  # 7 groups with ground truth per step
        assert call["metrics"]["vps/probe_tokens_per_rollout"] > 0

    # the probing cost reaches verl's logged metrics
    metrics = run.records(run.metrics)
    steps = {m["step"]: m["data"] for m in metrics if "actor/pg_loss" in m["data"]}
    assert sorted(steps) == [1, 2], metrics
    for data in steps.values():
        assert data["vps/probe_tokens_per_rollout"] > 0 and data["vps/probe_time_s"] > 0
        # the file's order: every 8 prompts hold one without a ground truth, i.e. 4 of the step's 32 rollouts
        assert data["vps/no_ground_truth_rows"] == 4 and data["vps/probe_failed_rows"] == 0
