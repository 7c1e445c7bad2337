"""End-to-end: ReCo (estimator `reco` + policy loss `reco`) through verl 0.9.1's real trainer on the CPU backend.

One trainer start, 2 steps, 2 PPO mini-batches per step (ppo_mini_batch_size < train_batch_size, so the token
ratio acts on the second). A probe module, which verl imports in every process (workers included), wraps the
registered `reco` estimator and `reco` loss and records what they see:

- at the estimator (driver): the old log-probs and the response ids from the batch context, and that the
  advantages are verl's `grpo` times weights equal to the slow reference's weights of that batch's log-probs and
  copies (tests/unit/test_reco.py);
- in the update (actor worker): the knobs shipped from `+algorithm.reco_*`, and the variance ratio per call,
  1 on the first mini-batch of each step (theta = theta_old, up to float32 rounding) and not on the second.

    .venv/bin/python -m pytest -q tests/e2e/test_e2e_reco.py
    # measured on the shared 2-core machine: 48-115 s (load average 2-9), 209 s (load average ~22)
"""

from __future__ import annotations

import pytest

from tests.harness.references import reference_weights
from tests.harness.trainer import Run

pytestmark = pytest.mark.timeout(900)

PROBE = '''
"""Test probe (loaded by verl via VERL_USE_EXTERNAL_MODULES): records what ReCo's estimator and loss see."""
import json, os
import torch
import verl_bot.plugin
verl_bot.plugin.register()
from verl.trainer.ppo import core_algos
from verl_bot.advantage.reco import reco_weights
from verl_bot.credit.context import current, loss_settings
from verl_bot.losses.reco import variance_ratio

_estimator = core_algos.get_adv_estimator_fn("reco")
_loss = core_algos.get_policy_loss_fn("reco")


def _write(record):
    with open(os.environ["VB_PROBE_FILE"], "a") as f:
        f.write(json.dumps(record) + "\\n")


def reco_estimator_probe(token_level_rewards, response_mask, index=None, config=None, **kwargs):
    tensors = current().tensors
    old, responses = tensors["old_log_probs"], tensors["responses"]
    advantages, returns = _estimator(token_level_rewards, response_mask, index=index, config=config, **kwargs)
    grpo, _ = core_algos.compute_grpo_outcome_advantage(token_level_rewards, response_mask, index)
    mask = response_mask.bool()
    # the weights the advantages carry: A = grpo * w on every token of a row whose GRPO advantage is not 0
    scale = torch.where(grpo != 0, advantages / torch.where(grpo != 0, grpo, 1.0), torch.nan)
    carried = [float(row[m][0]) if m.any() else None for row, m in zip(scale, mask & (grpo != 0), strict=True)]
    _write({
        "where": "estimator", "pid": os.getpid(), "rows": int(response_mask.shape[0]),
        "old_shape": list(old.shape), "mask_shape": list(response_mask.shape),
        "responses_shape": list(responses.shape), "groups": [str(u) for u in index],
        "mean_lp": [float(row[m].double().mean()) if m.any() else 0.0 for row, m in zip(old, mask, strict=True)],
        "ids": [responses[i][mask[i]].tolist() for i in range(len(mask))],
        "valid": mask.any(dim=1).tolist(), "carried": carried,
        "max_diff": float((advantages - grpo * reco_weights(
            old, response_mask, index, w_max=float(config.get("reco_w_max", 5.0)), responses=responses
        )[0][:, None]).abs().max()),
    })
    return advantages, returns


def reco_loss_probe(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None,
                    rollout_is_weights=None):
    m = response_mask.bool()
    r_var, _ = variance_ratio(log_prob.detach(), old_log_prob, cap=100.0)
    loss, metrics = _loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config,
                          rollout_is_weights)
    _write({
        "where": "loss", "pid": os.getpid(), "settings": dict(loss_settings() or {}),
        "tokens": int(m.sum()), "rvar_dev": float((r_var[m] - 1).abs().mean()),
        "ratio_dev": float(((log_prob.detach() - old_log_prob)[m]).abs().mean()),
        "rvar_mean": metrics["reco/rvar_mean"], "finite": bool(torch.isfinite(loss)),
    })
    return loss, metrics


core_algos.ADV_ESTIMATOR_REGISTRY["reco"] = reco_estimator_probe
core_algos.POLICY_LOSS_REGISTRY["reco"] = reco_loss_probe
'''


def test_reco_two_steps_on_cpu(workdir):
    (workdir / "probe" / "vb_reco_probe.py").write_text(PROBE)
    run = Run(
        workdir,
        "reco",
        [
            "algorithm.adv_estimator=reco",
            "actor_rollout_ref.actor.policy_loss.loss_mode=reco",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",  # 2 updates per step (train_batch_size=4)
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
            "reward.reward_manager.name=bot",  # token_level unset: one reward per response for `reco`
            "+algorithm.reco_w_max=4.0",
            "+algorithm.reco_rvar_cap=2.5",
        ],
    )
    run.env["VERL_USE_EXTERNAL_MODULES"] = "vb_reco_probe"
    records = run.finish(timeout=480).records()

    # the estimator, in the driver: old log-probs of the batch's shape, non-trivial weights, GRPO x w
    estimator = [r for r in records if r["where"] == "estimator"]
    assert len(estimator) == 2, records
    for call in estimator:
        assert call["rows"] == 16 and call["old_shape"] == call["mask_shape"] == call["responses_shape"], call
        assert call["max_diff"] < 1e-5, call
        # the weights the advantages carry are the slow reference's, from this batch's old log-probs and ids
        expected = reference_weights(
            call["mean_lp"], [tuple(ids) for ids in call["ids"]], call["groups"], call["valid"], 4.0, "count_model"
        )
        carried = [(w, e) for w, e in zip(call["carried"], expected, strict=True) if w is not None]
        assert len(carried) >= 8, call  # rows whose GRPO advantage is not 0
        assert [w for w, _ in carried] == pytest.approx([e for _, e in carried], rel=1e-4), carried
    assert any(abs(e - 1) > 1e-2 for call in estimator for e in reference_weights(
        call["mean_lp"], [tuple(i) for i in call["ids"]], call["groups"], call["valid"], 4.0, "count_model"
    )), estimator

    # the loss, in the actor worker: the knobs arrived; r_var = 1 on the first mini-batch of a step, not later
    loss = [r for r in records if r["where"] == "loss"]
    assert len(loss) == 4, records  # 2 steps x 2 mini-batches x 1 micro-batch
    assert {r["pid"] for r in loss}.isdisjoint({r["pid"] for r in estimator}), "the loss must run in the worker"
    for call in loss:
        assert call["settings"]["reco_rvar_cap"] == 2.5 and call["finite"], call
    # mean |log p - log p_old| and mean |r_var - 1| over the tokens. At theta = theta_old both are 0 up to the
    # float32 rounding of two forwards (the CPU overrides make verl's FSDP engine compute in fp32)
    first, later = [loss[0], loss[2]], [loss[1], loss[3]]
    assert all(c["ratio_dev"] < 1e-4 and c["rvar_dev"] < 1e-4 for c in first), first
    assert all(c["ratio_dev"] > 5e-3 and c["rvar_dev"] > 5e-3 for c in later), later

    # verl's metrics: ReCo's diagnostics, and both halves on
    metrics = run.records(run.metrics)
    steps = {m["step"]: m["data"] for m in metrics if "actor/pg_loss" in m["data"]}
    assert sorted(steps) == [1, 2], metrics
    for step, data in steps.items():
        assert data["reco/weights_on"] == 1.0 and data["reco/token_ratio_on"] == 1.0, (step, data)
        assert data["reco/w_mean"] == pytest.approx(1.0, abs=1e-5), (step, data)
        assert 1.0 < data["reco/w_max"] <= 16.0, (step, data)
        assert 0.0 <= data["reco/saturated_share"] <= 1.0 and 0 < data["reco/rvar_mean"] <= 2.5, (step, data)
        assert data["actor/grad_norm"] > 0, (step, data)
        assert not any(key.startswith("actor/reco/") for key in data), sorted(data)
