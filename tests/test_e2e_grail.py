"""End-to-end: `ALGO=grail STEPS=2 bash recipes/cpu_train.sh` through verl 0.9.1's real trainer on the CPU backend.

One trainer start, on the CPU math task `toy_math` (integer chains in the AIME step format, a verifiable
answer in `<final>...</final>`; the script warm-starts the tiny model on worked solutions with wrong steps,
so answers are right or wrong and GRPO's advantages vary). A probe module (loaded by verl in every process through
`VERL_USE_EXTERNAL_MODULES`) wraps the GRAIL loss wrapper of `verl_bot.hooks.engine_forward_step` and records,
per actor micro-batch, the weights and the advantages verl's `ppo_loss` received. The test checks that weights
!= 1 reached the loss (advantages at the loss = advantages x weights): w_max on answer content and
saliency-derived weights on the steps before it, over several micro-batches (dynamic batching), and that the
step metrics carry `grail/...`.

    .venv/bin/python -m pytest -q tests/test_e2e_grail.py     # ~3-5 min on 2 cores (warm start included)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.test_cpu_e2e import Run

pytestmark = pytest.mark.timeout(1200)
ROOT = Path(__file__).resolve().parents[1]

PROBE = '''
"""Test probe: records what GRAIL's loss wrapper hands to verl's ppo_loss, per actor micro-batch."""
import json, os
import verl_bot.plugin
verl_bot.plugin.register()
import verl_bot.hooks.engine_forward_step as efs

_weighted_loss = efs.weighted_loss

def weighted_loss(loss_function, row_weights, stats):
    record = {"weights": [w.tolist() for w in row_weights], "stats": stats}

    def at_verl_loss(model_output, data, dp_group=None):  # stands between the wrapper and verl's ppo_loss
        record["at_loss"] = [a.tolist() for a in data["advantages"].unbind()]
        return loss_function(model_output=model_output, data=data, dp_group=dp_group)

    inner = _weighted_loss(at_verl_loss, row_weights, stats)

    def loss(model_output, data, dp_group=None):
        record["original"] = [a.tolist() for a in data["advantages"].unbind()]
        record["span"] = [s.tolist() for s in data["verl_bot_grail_span"].unbind()]
        out = inner(model_output=model_output, data=data, dp_group=dp_group)
        with open(os.environ["VB_PROBE_FILE"], "a") as f:
            f.write(json.dumps(record) + "\\n")
        return out

    return loss

efs.weighted_loss = weighted_loss
'''


@pytest.fixture(scope="module")
def grail_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e_grail")
    (root / "probe").mkdir()
    (root / "probe" / "vb_probe.py").write_text(PROBE)
    run = Run(root, "grail", [])
    run.cmd = [
        "bash", str(ROOT / "recipes" / "cpu_train.sh"),
        # dynamic batching: several micro-batches per update, rearranged by length
        "actor_rollout_ref.actor.use_dynamic_bsz=True",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=200",
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=200",
    ]
    run.env.update(
        ALGO="grail", STEPS="2", SEED="0", TRAIN_BATCH="4", ROLLOUT_N="4",  # ALGO=grail: TASK=toy_math
        MODEL_DIR=str(root / "model"), DATA_DIR=str(root / "data"), OUT_DIR=str(run.dir),
        PY=sys.executable,
    )
    return run.finish(timeout=1000, tail=8000)


def test_weights_not_one_reach_verls_loss(grail_run):
    records = [json.loads(line) for line in grail_run.probe.read_text().splitlines() if line.strip()]
    assert len(records) >= 4, f"expected several actor micro-batches over 2 steps, got {len(records)}"
    reached, from_saliency = 0, 0
    for rec in records:
        for w, orig, at_loss, span in zip(rec["weights"], rec["original"], rec["at_loss"], rec["span"], strict=True):
            assert len(w) == len(orig) == len(at_loss) == len(span)
            for wt, a, b in zip(w, orig, at_loss, strict=True):
                assert b == pytest.approx(a * wt, rel=1e-6, abs=1e-7)  # what ppo_loss got: A x w
            reached += sum(1 for wt, a in zip(w, orig, strict=True) if wt != 1.0 and a != 0.0)
            # tokens before the answer of a reweighted rollout: clip(1 + 0.5 z, 0.5, 5) from the saliency
            from_saliency += sum(
                1 for wt, code, a in zip(w, span, orig, strict=True) if code == 0 and wt not in (1.0, 5.0) and a != 0
            )
            for wt, code in zip(w, span, strict=True):
                if code == 2:  # answer content
                    assert wt == 5.0
    assert reached > 0, "no weight != 1 on a token with a non-zero advantage reached the loss"
    assert from_saliency > 0, "no saliency-derived weight (before an answer) reached the loss"
    assert any(rec["stats"]["answer_rate"] > 0 for rec in records)
    assert any(rec["stats"]["reweighted_rate"] > 0 for rec in records)


def test_grail_metrics_in_every_step(grail_run):
    metrics = [json.loads(line) for line in grail_run.metrics.read_text().splitlines() if line.strip()]
    steps = {m["step"]: m["data"] for m in metrics if "actor/pg_loss" in m["data"]}
    assert sorted(steps) == [1, 2], metrics
    for data in steps.values():
        assert data["grail/w_mean"] > 0
        assert 0 <= data["grail/w_max_share"] <= 1
        assert data["grail/saliency_s"] > 0
        assert data["grail/span_s"] >= 0
        assert 0 < data["grail/answer_rate"] <= 1
        assert not any(key.startswith("actor/grail/") for key in data)
        assert data["grail/saliency_s"] < data["timing_s/update_actor"]
