"""verl's legacy trainer (`trainer.use_v1=false`, `RayPPOTrainer`) with `bot`, on verl's vLLM rollout (CPU build).

One trainer start (tests/harness/trainer.py's `Run`, its probe and its flaky scorer): 2 steps of `bot` with the
`bot` manager on verl's vLLM rollout, seven prompts in eight scored by a scorer that fails on a third of the
responses, token records of step 1. Checked, as the v1 trainer's run is in tests/e2e/test_e2e_resume.py:

- the run went through the legacy trainer (verl's own deprecation line) with verl-bot in use;
- the rollout sampled the policy the trainer trains (verl's `rollout_probs_diff_max` at fp32);
- the estimator received dense token rewards (not one scalar on the last token);
- each step's advantages are BoT's (the slow reference) of the token rewards of the rollouts whose scorer answered,
  0 where it failed (read from each row's own `reward_extra_info`) and in a group left with one rollout;
- the token records of step 1 are that step's rows; the step's metrics carry the reward metrics and the
  estimator's diagnostics.

What the legacy trainer cannot run is refused before Ray: tests/component/test_legacy_adapter.py.

    .venv/bin/python -m pytest -q tests/e2e/test_legacy_trainer.py
"""

from __future__ import annotations

import json

import pytest

from tests.harness.trainer import Run, check_bot_advantages, check_token_records

pytestmark = pytest.mark.timeout(900)


def test_bot_trains_through_verls_legacy_trainer_on_vllm(workdir):
    run = Run(workdir, "legacy_bot", [
        "trainer.use_v1=false",
        "algorithm.adv_estimator=bot",
        "reward.reward_manager.name=bot",
        f"data.train_files={workdir / 'train_flaky.parquet'}",
        "+reward.reward_kwargs.bot.scorers.toy_flaky=python:vb_probe:flaky_toy_lint",
        "+algorithm.token_report_steps=[1]",
        "+algorithm.token_report_groups=0",
    ], rollout="vllm").finish(timeout=600)
    log = run.output()
    assert "Legacy trainer `main_ppo_v0.py` is deprecated" in log, log[-3000:]
    assert "verl-bot 0.1.0 is in use in this run (algorithm.adv_estimator=bot)" in log, log[-3000:]

    metrics = [json.loads(ln) for ln in run.metrics.read_text().splitlines() if ln.strip()]
    steps = {m["step"]: m["data"] for m in metrics if "actor/pg_loss" in m["data"]}
    assert sorted(steps) == [1, 2], metrics
    for step, data in steps.items():
        assert data["training/rollout_probs_diff_max"] <= 1e-3, (step, data["training/rollout_probs_diff_max"])
        assert data["actor/grad_norm"] > 0, (step, data)
        for key in ("reward/score/mean", "reward/local_signal/mean", "reward/scorer_failed/mean",
                    "verl_bot/scorer_failed_rows", "bot/adv_abs_max", "bot/rollouts_per_group"):
            assert key in data, (key, sorted(data))
    assert sum(data["verl_bot/scorer_failed_rows"] for data in steps.values()) > 0

    calls = run.records()
    estimator_calls = [c for c in calls if c.get("estimator") == "bot"]
    assert len(estimator_calls) == 2, calls
    for call in estimator_calls:
        assert len(call["rows"]) == 16
        assert any(r["nonzero_before_last"] > 0 for r in call["rows"]), call["rows"]
        assert any(r["distinct"] >= 2 for r in call["rows"]), call["rows"]
    advantage_steps = [c["rows"] for c in calls if c.get("step") == "advantage"]
    assert len(advantage_steps) == 2, calls
    check_bot_advantages(advantage_steps)
    check_token_records(run.dir / "ckpt" / "token_records", advantage_steps[0], workdir / "model")
