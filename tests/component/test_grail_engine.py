"""GRAIL inside verl 0.9.1's real FSDP2 training engine (`FSDPEngineWithLMHead`, CPU, gloo, one rank).

One subprocess (the plugin and the CPU backend register there, not in the test session) builds the actor
engine the way verl's worker does (composed config -> ActorConfig -> EngineRegistry -> initialize) and runs
`forward_backward_batch` with verl's `ppo_loss` on hand-made micro-batches in verl's TransferQueue layout:

- the weights the hook computes (packed and padded layouts) equal `grail_weights` of a plain autograd
  reference (one unpadded sequence at a time, the authors' phase 1, on an unwrapped copy of the model);
- parameter gradients with the hook equal those of a run without it whose advantages were multiplied by
  the same weights beforehand: the extra forward/backward leaves the update's gradients untouched (two
  micro-batches with no-sync accumulation; and again with dynamic batching);
- and they differ from plain GRPO's gradients (the weights do reach the loss); the `grail/` metrics come back.

    .venv/bin/python -m pytest -q tests/component/test_grail_engine.py     # ~1 min on 2 cores
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)

SCRIPT = r'''
import json, sys
import torch
import verl_bot.plugin
verl_bot.plugin.register()
from transformers import AutoModelForCausalLM
from verl_bot.advantage.grail import SETTINGS_KEY, SPAN_FIELD, GrailSettings, grail_weights, reweighted_rows
from verl_bot.cpu.actor_engine import actor_batch, build_actor_engine, init_process_group
from verl_bot.advantage.grail_update import micro_batch_weights
from verl_bot.hooks.engine_forward_step import micro_batch_view
sys.path.insert(0, sys.argv[2])
from test_grail import make_sequences, reference_scores

model_dir = sys.argv[1]
init_process_group(int(sys.argv[3]))
engine, loss_fn = build_actor_engine(model_dir, [
    "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=1",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
])  # fp32 compute for exact comparisons: the CPU overrides set FSDP2's mixed precision to fp32

plain = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="sdpa", dtype=torch.float32).train()
seqs, prompts, answers = make_sequences(plain.config.vocab_size, seed=1)
T = 0.7
with torch.no_grad():
    old = [torch.log_softmax(plain(s[None]).logits[0, :-1] / T, -1).gather(-1, s[1:, None])[:, 0][p - 1:]
           for s, p in zip(seqs, prompts)]
adv_rows = [-1.0, -0.5, 1.0, -0.8]
codes = []
for a in answers:
    c = torch.zeros(len(a), dtype=torch.int8)
    idx = a.nonzero().flatten()
    if len(idx):
        c[idx] = 2; c[idx[0]] = 1; c[idx[-1]] = 1; c[int(idx[-1]) + 1:] = 3
    codes.append(c)
settings = GrailSettings(rollout_symmetry="all")

def batch(weights=None, grail=True, packed=True, dynamic=False):
    td = actor_batch(seqs, prompts, adv_rows, old, extra={SPAN_FIELD: codes}, temperature=T, micro_batch_size=2,
                     max_token_len=24, packed=packed, dynamic=dynamic,
                     non_tensor={SETTINGS_KEY: settings.as_dict()} if grail else None)
    if weights is not None:
        td["advantages"] = torch.nested.as_nested_tensor(
            [a * w for a, w in zip(td["advantages"].unbind(), weights)], layout=torch.jagged)
    return td

def grads(td):
    with engine.train_mode():
        engine.optimizer_zero_grad()
        out = engine.forward_backward_batch(td, loss_function=loss_fn, forward_only=False)
        g = {n: p.grad.full_tensor().clone() for n, p in engine.module.named_parameters() if p.grad is not None}
    return g, out

def max_diff(a, b):
    return max(float((a[k] - b[k]).abs().max()) for k in a)

# weights from the engine (one micro-batch of all rows) vs grail_weights of the plain reference
ref_scores = [reference_scores(plain, s, p, a, T, "embeddings") for s, p, a in zip(seqs, prompts, answers)]
width = max(len(c) for c in codes)
pad = lambda rows, v=0: torch.stack([torch.nn.functional.pad(r.float(), (0, width - len(r)), value=v) for r in rows])
mask = pad([torch.ones(len(c)) for c in codes])
ref_w = grail_weights(pad(ref_scores), pad(codes).long(), mask, reweighted_rows(torch.tensor(adv_rows), "all"))
result = {}
for packed in (True, False):
    with engine.train_mode():
        w, stats = micro_batch_weights(micro_batch_view(engine, batch(packed=packed), (SPAN_FIELD,)),
                                       settings.as_dict())
    result[f"weights_diff_{'packed' if packed else 'padded'}"] = float((pad(w) - ref_w).abs().max())
result["weights_not_one"] = float((pad(w) - mask).abs().max())
result["stats"] = stats

g_hook, out = grads(batch())
g_pre, _ = grads(batch(weights=w, grail=False))
g_plain, _ = grads(batch(grail=False))
result["hook_vs_premultiplied"] = max_diff(g_hook, g_pre)
result["hook_vs_plain"] = max_diff(g_hook, g_plain)
result["grad_scale"] = max(float(v.abs().max()) for v in g_hook.values())
result["metrics"] = sorted(out["metrics"])
g_dyn, out_dyn = grads(batch(dynamic=True))
g_dyn_pre, _ = grads(batch(weights=w, grail=False, dynamic=True))
result["dynamic_vs_premultiplied"] = max_diff(g_dyn, g_dyn_pre)
result["dynamic_micro_batches"] = len(out_dyn["metrics"]["grail/w_mean"].values)

# the legacy trainer's layout (responses right-padded, sequences nested): the same weights, the same gradients
def legacy(grail=True, weights=None):
    td = actor_batch(seqs, prompts, adv_rows, old, extra={SPAN_FIELD: codes}, temperature=T, micro_batch_size=2,
                     non_tensor={SETTINGS_KEY: settings.as_dict()} if grail else None, legacy=True)
    if weights is not None:
        td["advantages"] = td["advantages"] * pad(weights)
    return td

with engine.train_mode():
    w_legacy, _ = micro_batch_weights(micro_batch_view(engine, legacy(), (SPAN_FIELD,)), settings.as_dict())
result["legacy_weights_diff"] = float((pad(w_legacy) - ref_w).abs().max())
g_legacy, _ = grads(legacy())
g_legacy_pre, _ = grads(legacy(grail=False, weights=w_legacy))
result["legacy_hook_vs_premultiplied"] = max_diff(g_legacy, g_legacy_pre)
result["legacy_vs_v1"] = max_diff(g_legacy, g_hook)
print("RESULT " + json.dumps(result))
'''


@pytest.fixture(scope="module")
def engine_result(tmp_path_factory, tiny_model_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = tmp_path_factory.mktemp("grail_model")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with torch.no_grad():  # less uniform than the random init: saliency differs visibly between tokens
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    model.save_pretrained(model_dir)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(model_dir)
    script = model_dir / "engine_check.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "VERL_PLATFORM": "cpu"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    port = str(29500 + os.getpid() % 400)
    tests = str(Path(__file__).resolve().parents[1] / "unit")
    proc = subprocess.run([sys.executable, str(script), str(model_dir), tests, port], env=env,
                          capture_output=True, text=True, timeout=540)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_engine_weights_equal_the_plain_autograd_reference(engine_result):
    assert engine_result["weights_diff_packed"] < 1e-4
    assert engine_result["weights_diff_padded"] < 1e-4
    assert engine_result["weights_not_one"] > 0.1  # the weights are not trivially 1


def test_the_legacy_trainers_layout_gives_the_same_weights_and_gradients(engine_result):
    """verl's legacy update sends right-padded response fields (GRAIL's span codes among them): the same weights as
    the reference, gradients equal to advantages pre-multiplied by them, and to the v1 layout's."""
    scale = engine_result["grad_scale"]
    assert engine_result["legacy_weights_diff"] < 1e-4
    assert engine_result["legacy_hook_vs_premultiplied"] <= 1e-6 * scale
    assert engine_result["legacy_vs_v1"] <= 1e-5 * scale


def test_extra_backward_leaves_the_update_gradients_unchanged(engine_result):
    scale = engine_result["grad_scale"]
    assert scale > 0
    assert engine_result["hook_vs_premultiplied"] <= 1e-6 * scale
    assert engine_result["dynamic_vs_premultiplied"] <= 1e-6 * scale
    assert engine_result["hook_vs_plain"] > 1e-3 * scale  # the weights reach the loss


def test_engine_reports_grail_metrics(engine_result):
    assert {"grail/w_mean", "grail/w_cap_share", "grail/answer_rate", "grail/saliency_s"} <= set(
        engine_result["metrics"]
    )
    assert engine_result["stats"]["answer_rate"] == 0.75
    assert engine_result["dynamic_micro_batches"] >= 2
