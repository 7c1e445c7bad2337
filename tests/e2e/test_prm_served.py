"""A tiny step PRM served by vLLM through verl's reward-model path gives the `bot` manager its local signal S.

One start of verl 0.9.1's real trainer on the CPU (`python -m verl.trainer.main_ppo`, tests' `Run`): the policy is
the toy_math warm-started tiny model, G comes from `builtin:toy_math`, and S from a tiny
`Qwen2ForProcessRewardModel` (`verl_bot_demo.tiny_prm`, random weights) that verl itself serves in a separate
reward pool with its own vLLM server on vLLM's CPU build (`reward.reward_model.enable=true`,
`+reward.reward_kwargs.bot.prm.url=router`). This needs both hooks of verl's reward-model path
(`verl_bot.hooks.reward_model_path`: the reward loop calls the `bot` manager; `verl_bot.hooks.vllm_pooling_model`:
verl's vLLM server starts a model without `compute_logits`).

Checked, from the PRM call log (`VERL_BOT_PRM_LOG`) and verl-bot's token records of the step (each rollout's
response ids, token rewards and G: `verl_bot.observe.token_records`):
- every call's probabilities are the tiny PRM's, recomputed by the reference implementation (transformers'
  `Qwen2Model` and the score head) on the logged input ids, to float32 rounding;
- each rollout's token rewards are w_g * G + w_s * S_t with S_t the centred step probability 2q - 1 of the step
  the token belongs to (the steps split at blank lines, the PRM input as Qwen2.5-Math-PRM's; which characters a
  token produced from the tokenizer's decoding alone, tests/harness/manager.py), and G the verifier's score;
- `reward/prm_steps/mean` > 0 and nothing truncated or failed.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from transformers import AutoTokenizer

from tests.harness.manager import token_local
from tests.harness.trainer import PROBE, Run
from verl_bot.rewards.prm import QWEN_PRM_SYSTEM, prm_input_ids, prm_messages, split_steps
from verl_bot_demo.tiny_prm import STEP_TAG, build_prm, load_reference, reference_step_probabilities, step_tag_id

pytestmark = pytest.mark.timeout(900)

SEPARATOR = "\n\n"
FLOAT32_TOLERANCE = 2e-5  # vLLM CPU vs transformers, float32: measured 5.3e-6 at most (16 calls, 65 steps)

@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """The toy_math policy (a short warm start), the tiny PRM, toy_math train/val parquet and the probe."""
    import pandas as pd

    from recipes.data.toy_math import rows
    from verl_bot_demo.tiny_model import build_model

    root = tmp_path_factory.mktemp("prm_served")
    build_model(root / "model", seed=0, warm_start="toy_math", warm_start_kwargs={"steps": 150, "batch_size": 32})
    build_prm(root / "prm")
    pd.DataFrame(rows(16, seed=0, split="train")).to_parquet(root / "train.parquet")
    pd.DataFrame(rows(4, seed=1, split="test")).to_parquet(root / "val.parquet")
    (root / "probe").mkdir()
    (root / "probe" / "vb_probe.py").write_text(PROBE)
    return root


def reward_pool_overrides(prm: Path, tag_id: int) -> list[str]:
    """verl's separate reward pool serving the PRM with its vLLM server, as vLLM's CPU build runs it."""
    rm = "reward.reward_model"
    return [
        f"{rm}.enable=true", f"{rm}.enable_resource_pool=true", f"{rm}.n_gpus_per_node=1", f"{rm}.nnodes=1",
        f"{rm}.model_path={prm}",
        f"{rm}.rollout.name=vllm", f"{rm}.rollout.tensor_model_parallel_size=1", f"{rm}.rollout.dtype=float32",
        f"{rm}.rollout.enforce_eager=true", f"{rm}.rollout.free_cache_engine=false",
        f"+{rm}.rollout.enable_sleep_mode=false", f"{rm}.rollout.max_model_len=1024",
        f"+{rm}.rollout.engine_kwargs.vllm.kv_cache_memory_bytes=33554432",
        f"+{rm}.rollout.engine_kwargs.vllm.pooler_config={{step_tag_id:{tag_id}}}",
        "ray_kwargs.ray_init.num_gpus=2",  # one logical GPU for the trainer, one for the reward pool
    ]


def expected_local(tokenizer, ids: list[int], steps: list, probabilities: list[list[float]]) -> np.ndarray:
    """S_t of a response (T,): each step's centred p_good, 2q - 1, over its characters, averaged per token by the
    slow reference (`token_local` of tests/harness/manager.py: from the tokenizer's decoding alone)."""
    local = [{"start": s.start, "end": s.end, "value": 2.0 * q[1] - 1.0}
             for s, q in zip(steps, probabilities, strict=True)]
    return token_local(tokenizer, ids, local)


def test_a_tiny_prm_served_by_verls_reward_pool_is_the_local_signal(workdir):
    prm_dir = workdir / "prm"
    prm_tok = AutoTokenizer.from_pretrained(prm_dir)
    tag_id = prm_tok.convert_tokens_to_ids(STEP_TAG)
    run = Run(workdir, "prm_router", [
        "algorithm.adv_estimator=bot", "reward.reward_manager.name=bot",
        "data.max_response_length=48",
        "+reward.reward_kwargs.bot.prm.url=router",
        *reward_pool_overrides(prm_dir, tag_id),
        "+algorithm.token_report_steps=[1]", "+algorithm.token_report_groups=0",
    ], model=workdir / "model", steps=1)
    run.cmd.append(f"+algorithm.token_report_dir={run.dir / 'records'}")
    run.env["VERL_BOT_PRM_LOG"] = str(run.dir / "prm_calls.jsonl")
    run.finish(timeout=600)

    # 1. the served PRM's probabilities are the tiny PRM's own (the reference implementation on the same input)
    calls = run.records(run.dir / "prm_calls.jsonl")
    assert len(calls) == 16, len(calls)  # one call per rollout: 4 prompts x 4
    reference = load_reference(prm_dir)
    worst = 0.0
    for call in calls:
        ids = call["request"]["input"]
        expected = reference_step_probabilities(reference, ids, tag_id)
        assert len(call["probabilities"]) == len(expected) == ids.count(tag_id) > 0
        worst = max(worst, float(np.abs(np.array(call["probabilities"]) - np.array(expected)).max()))
    assert worst < FLOAT32_TOLERANCE, worst

    # 2. each rollout's token rewards: G + S_t, S_t the centred probability of the token's step
    policy_tok = AutoTokenizer.from_pretrained(workdir / "model")
    by_input = {tuple(c["request"]["input"]): c["probabilities"] for c in calls}
    records = run.records(run.dir / "records" / "step_1.jsonl")
    assert len(records) == 16
    for record in records:
        text = policy_tok.decode(record["response_ids"], skip_special_tokens=True)
        steps = split_steps(text, SEPARATOR)
        problem = re.search(r"Compute [0-9+-]+\.", record["prompt"]).group(0)  # the user message
        messages = prm_messages(QWEN_PRM_SYSTEM, problem, [s.text for s in steps], STEP_TAG)
        probabilities = by_input[tuple(prm_input_ids(prm_tok, messages))]
        local = expected_local(policy_tok, record["response_ids"], steps, probabilities)
        assert np.any(local != 0)
        np.testing.assert_allclose(record["rewards"], record["info"]["score"] + local, atol=1e-6)

    metrics = [json.loads(ln) for ln in run.metrics.read_text().splitlines() if ln.strip()]
    (data,) = [m["data"] for m in metrics if "actor/pg_loss" in m["data"]]
    assert data["reward/prm_steps/mean"] > 0 and data["reward/prm_truncated/mean"] == 0
    assert data["reward/prm_failed/mean"] == 0 and data["reward/scorer_failed/mean"] == 0


def test_the_tiny_prm_has_vllms_layout_and_its_reference_is_a_softmax_at_the_tags(tmp_path):
    import torch
    from safetensors.torch import load_file

    out = tmp_path / "prm"
    summary = build_prm(out)
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForProcessRewardModel"]  # vLLM gives it two labels itself
    hidden = config["hidden_size"]
    weights = load_file(str(out / "model.safetensors"))
    assert {k.split(".")[0] for k in weights} == {"model", "score"}
    shapes = {k: tuple(v.shape) for k, v in weights.items() if k.startswith("score.")}
    assert shapes == {"score.0.weight": (hidden, hidden), "score.0.bias": (hidden,), "score.2.weight": (2, hidden),
                      "score.2.bias": (2,)}
    tokenizer = AutoTokenizer.from_pretrained(out)
    tag_id = summary["step_tag_id"]
    assert tokenizer(STEP_TAG, add_special_tokens=False)["input_ids"] == [tag_id] == [step_tag_id(out)]

    # by hand: a head whose logits are [0, ln 3] at every token gives [1/4, 3/4] at each of the two tags
    backbone, head = load_reference(out)
    with torch.no_grad():
        head[2].weight.zero_()
        head[2].bias.copy_(torch.tensor([0.0, math.log(3.0)]))
    ids = tokenizer(f"3+4=7{STEP_TAG}7-2=5{STEP_TAG}", add_special_tokens=False)["input_ids"]
    np.testing.assert_allclose(reference_step_probabilities((backbone, head), ids, tag_id), [[0.25, 0.75]] * 2,
                               atol=1e-7)
    # the seeded head spreads the steps' scores (the trainer test's values are not all alike)
    probabilities = reference_step_probabilities(load_reference(out), ids, tag_id)
    assert abs(probabilities[0][1] - probabilities[1][1]) > 0.01
