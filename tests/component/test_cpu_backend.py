"""CPU backend, fast tests: inert unless selected, what it registers when selected, the rollout server itself.

Registration tests run in subprocesses: registering in this process would
change verl's globals for every other test.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest
import torch

from tests.conftest import hf_server
from tests.conftest import prompt_ids as _prompt_ids

PROBE_STATE = r"""
import json, os
import verl
from verl.plugin.platform import PlatformRegistry
from verl.utils.device import get_device_name, get_resource_name, get_nccl_backend
import verl.utils.distributed as vdist
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.replica import RolloutReplicaRegistry
state = {
    "platforms": sorted(PlatformRegistry.registered_names()),
    "device": get_device_name(),
    "resource": get_resource_name(),
    "backend": get_nccl_backend(),
    "pg_defaults": list(vdist.initialize_global_process_group_ray.__defaults__),
    "rollouts": sorted(k[0] for k in rollout_base._ROLLOUT_REGISTRY),
    "replicas": sorted(RolloutReplicaRegistry._registry),
    "engine_device": os.environ.get("VERL_ENGINE_DEVICE"),
}
try:
    import verl_bot.cpu as cpu
    state["plugin_cpu"] = cpu._done or []
except Exception as e:
    state["plugin_cpu"] = repr(e)
print("STATE=" + json.dumps(state))
"""


def _state(**env_changes: str | None) -> dict:
    env = dict(os.environ)
    for key in ("VERL_PLATFORM", "VERL_ENGINE_DEVICE"):
        env.pop(key, None)
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    out = subprocess.run(
        [sys.executable, "-c", PROBE_STATE], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-4000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("STATE=")][-1]
    return json.loads(line[len("STATE=") :])


def test_inert_when_not_selected():
    """Without VERL_PLATFORM=cpu, importing verl (which loads verl-bot) leaves verl's platform and registries as
    they are without the plugin."""
    with_plugin = _state()
    without_plugin = _state(VERL_USE_EXTERNAL_PLUGINS="none")
    assert with_plugin["plugin_cpu"] == [], with_plugin
    without_plugin.pop("plugin_cpu")
    with_plugin.pop("plugin_cpu")
    assert with_plugin == without_plugin
    assert "cpu" not in with_plugin["platforms"]
    assert "hf" not in with_plugin["rollouts"] and "hf" not in with_plugin["replicas"]
    assert with_plugin["pg_defaults"] == [None, None]
    assert with_plugin["engine_device"] is None


def test_selected_registers_cpu_platform_and_hf_rollout():
    state = _state(VERL_PLATFORM="cpu")
    assert state["device"] == "cpu"
    assert state["resource"] == "GPU"  # trainer ranks are logical Ray GPUs
    assert state["backend"] == "gloo"
    assert "cpu" in state["platforms"]
    assert "hf" in state["rollouts"] and "hf" in state["replicas"]
    assert state["pg_defaults"] == [None, "cpu:gloo"]
    assert state["engine_device"] == "cuda"
    assert "platform:cpu" in state["plugin_cpu"] and "rollout_replica:hf" in state["plugin_cpu"], state


def test_a_cpu_process_that_serves_no_vllm_rollout_does_not_import_vllm():
    """P7: verl's trainer imports its optional checkpoint engines, and the HCCL one (Ascend's) imports vLLM, which
    imports torch's inductor; on the CPU platform that import fails as verl expects of an absent engine."""
    code = r"""
import importlib.util, json, sys
import verl
from verl.trainer.ppo.v1 import trainer_base
import verl.workers.engine_workers
from verl.checkpoint_engine import HCCLCheckpointEngine, CheckpointEngineRegistry
error = CheckpointEngineRegistry._import_errors.get("hccl_checkpoint_engine")
print("STATE=" + json.dumps({"vllm": "vllm" in sys.modules, "installed": importlib.util.find_spec("vllm") is not None,
                             "engine": HCCLCheckpointEngine is not None, "error": str(error)}))
"""
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "VERL_PLATFORM": "cpu"},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    state = json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("STATE="))[len("STATE="):])
    assert state["installed"] and not state["vllm"] and not state["engine"], state
    assert "no HCCL (Ascend) device" in state["error"], state


def test_register_is_idempotent_and_version_checked():
    code = r"""
import verl
from verl_bot.cpu import register_cpu_backend
first = register_cpu_backend(); second = register_cpu_backend()
assert first and first == second, (first, second)
import verl_bot.cpu as cpu
cpu._done = None
verl.__version__ = "0.0.0"
try:
    register_cpu_backend()
except RuntimeError as e:
    assert "0.9.1" in str(e) and "0.0.0" in str(e)
    print("OK")
"""
    env = {**os.environ, "VERL_PLATFORM": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]


def test_overrides_one_source_for_python_and_bash():
    from verl_bot.cpu import OVERRIDES_FILE, overrides

    py = overrides()
    assert "actor_rollout_ref.rollout.name=vllm" in py  # verl's vLLM rollout on vLLM's CPU build
    assert overrides(rollout="hf") == [*py, "actor_rollout_ref.rollout.name=hf"]
    assert "transfer_queue.backend.SimpleStorage.num_data_storage_units=1" in py
    assert all(not o.startswith("#") and o == o.strip() and o for o in py)
    repo = OVERRIDES_FILE.parents[2]
    script = 'source recipes/cpu_overrides.sh; printf "%s\\n" "${CPU_OVERRIDES[@]}"; echo "PLATFORM=$VERL_PLATFORM"'
    out = subprocess.run(["bash", "-c", script], cwd=repo, capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert lines[:-1] == py
    assert lines[-1] == "PLATFORM=cpu"


def test_overrides_compose_with_verl_config():
    """Every override names a key verl's trainer config has (Hydra would reject a typo at run time)."""
    from tests.conftest import compose_verl_config
    from verl_bot.cpu import overrides

    cfg = compose_verl_config(overrides() + ["trainer.n_gpus_per_node=2"])
    assert cfg.trainer.device == "cpu"
    assert cfg.actor_rollout_ref.rollout.name == "vllm"
    assert cfg.actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes == 134217728
    assert cfg.ray_kwargs.ray_init.num_gpus == 2  # follows trainer.n_gpus_per_node
    assert compose_verl_config(overrides(rollout="hf")).actor_rollout_ref.rollout.name == "hf"



AMX_CHECK = """
import json, logging, sys
import torch
from vllm.config import CacheConfig, VllmConfig
from vllm.platforms.cpu import CpuPlatform

torch.cpu._is_amx_tile_supported = lambda: True  # as on a processor with AMX tiles
warned = {}
for dtype in sys.argv[1:]:
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("vllm").addHandler(handler)
    config = VllmConfig(cache_config=CacheConfig(mamba_ssm_cache_dtype=dtype))
    CpuPlatform.check_and_update_config(config)
    logging.getLogger("vllm").removeHandler(handler)
    warned[dtype] = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
print(json.dumps(warned))
"""


def test_the_cpu_engines_ask_for_what_vllm_would_reset_on_an_amx_processor():
    """On a processor with AMX, vLLM's CPU platform resets the SSM cache dtype to float32 for every model and warns
    (`make demo` showed it as a warning not known to be harmless). The CPU rollout's engine kwargs and the CPU
    judge's flags ask for float32 themselves: vLLM's own check, with AMX claimed, then keeps them and says
    nothing, and it does warn for vLLM's default."""
    from verl_bot.cpu import overrides
    from verl_bot.recipes.env import Env
    from verl_bot.recipes.services import judge_service
    from verl_bot.recipes.settings import run_of
    from verl_bot.recipes.tables import RECIPES

    rollout = [o.split("=", 1)[1] for o in overrides() if ".engine_kwargs.vllm.mamba_ssm_cache_dtype=" in o]
    argv = judge_service(run_of(RECIPES["aime_qwen"], Env({}), "cpu"), 0).argv  # the CPU judge a recipe starts
    judge = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--mamba-ssm-cache-dtype"]
    assert rollout == ["float32"] and judge == ["float32"], (rollout, judge)
    out = subprocess.run([sys.executable, "-c", AMX_CHECK, "float32", "auto"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    warned = json.loads(out.stdout.splitlines()[-1])
    assert warned["float32"] == []
    assert warned["auto"] == ["Reset SSM cache type to float32 for AMX mamba attention."]

# ------------------------------------------------------------------ the rollout server, in this process
@pytest.fixture(scope="module")
def server(tiny_model_dir):
    return hf_server(tiny_model_dir)


def test_server_generate_batches_and_logprobs_match_forward(server):
    """Concurrent requests of different prompt lengths are batched (left padding); each response's log-probs
    equal a plain forward pass over prompt+response, at temperature 1 and 0.7."""
    prompts = [_prompt_ids(server, t) for t in ["hi", "write a much longer text please, thank you", "ok"]]
    assert len({len(p) for p in prompts}) > 1

    async def run(temperature):
        params = {"temperature": temperature, "top_p": 1.0, "top_k": -1, "logprobs": True}
        return await asyncio.gather(*[server.generate(p, dict(params), f"r{i}") for i, p in enumerate(prompts)])

    for temperature in (1.0, 0.7):
        before = server.num_requests
        outs = asyncio.run(run(temperature))
        assert server.num_requests - before == len(prompts)
        for p, o in zip(prompts, outs, strict=True):
            assert 1 <= len(o.token_ids) <= 12 and len(o.log_probs) == len(o.token_ids)
            ids = torch.tensor([p + o.token_ids])
            with torch.no_grad():
                logits = server.model(ids).logits[0, len(p) - 1 : -1].float() / temperature  # [T, V]
            ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(o.token_ids)[:, None])[:, 0]  # [T]
            assert torch.allclose(ref, torch.tensor(o.log_probs), atol=1e-4), (ref, o.log_probs)
            eos = set(server.eos_token_ids)
            assert not eos.intersection(o.token_ids[:-1])  # stops at the first EOS


def test_full_determinism_makes_the_samples_depend_on_seed_weights_and_prompts_only(tiny_model_dir):
    """verl's `rollout.full_determinism=true`: two servers, the requests in other orders and batch neighbours,
    the same samples of each prompt (the n rollouts of a prompt as a set); another seed, other samples; a
    weight update starts the count again (the seed includes the weights: their training step when verl's sync
    names it, else their version), and a server whose first update is of step 2, as in a run resumed from its
    step-2 checkpoint, samples what a server that got steps 0, 1, 2 samples."""
    texts = ["hi", "write a much longer text please, thank you", "ok"]

    def samples(server, order, n=3):
        prompts = [_prompt_ids(server, texts[i]) for i in order for _ in range(n)]
        params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": False}

        async def run():
            return await asyncio.gather(*[server.generate(p, dict(params), f"r{i}") for i, p in enumerate(prompts)])

        by_prompt: dict[str, list] = {}
        for p, out in zip(prompts, asyncio.run(run()), strict=True):
            by_prompt.setdefault(str(p), []).append(out.token_ids)
        return {k: sorted(v) for k, v in by_prompt.items()}

    first = hf_server(tiny_model_dir, full_determinism=True, seed=7)
    second = hf_server(tiny_model_dir, full_determinism=True, seed=7)
    reference = samples(first, [0, 1, 2])
    assert samples(second, [2, 0, 1]) == reference
    assert len({tuple(map(tuple, v)) for v in reference.values()}) == 3 and any(len({tuple(s) for s in v}) > 1
                                                                              for v in reference.values())
    assert samples(hf_server(tiny_model_dir, full_determinism=True, seed=8), [0, 1, 2]) != reference
    first.finish_weight_update()  # same weights, version 1
    assert samples(first, [1, 2, 0]) != reference and first._occurrences
    for step in (0, 1, 2):  # an uninterrupted run's syncs (the same weights here: the seed is what differs)
        second.finish_weight_update(global_steps=step)
    resumed = hf_server(tiny_model_dir, full_determinism=True, seed=7)
    resumed.finish_weight_update(global_steps=2)  # a resumed run's first sync: the weights of its checkpoint
    at_step_2 = samples(second, [0, 1, 2])
    assert samples(resumed, [2, 1, 0]) == at_step_2 and at_step_2 != reference


def test_server_prompt_logprobs_match_a_teacher_forced_forward(server):
    """`prompt_logprobs` requests (verl's teacher path: max_tokens 1, temperature 1), batched with different
    lengths and with plain generation requests: entry j = log p(token j+1) of a direct forward, last entry a
    dummy; top-k entries are the forward's k best; one new token with its log-prob; max_tokens > 1 generates."""
    texts = ["hi", "write a much longer text please, thank you", "ok ok"]
    seqs = [_prompt_ids(server, t) + [7, 9, 11][: i + 1] for i, t in enumerate(texts)]
    probe = {"max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0, "detokenize": False, "logprobs": True}

    async def run():
        calls = [server.generate(s, dict(probe), f"p{i}") for i, s in enumerate(seqs)]
        calls.append(server.generate(seqs[0], {**probe, "prompt_logprobs": 2}, "top"))
        calls.append(server.generate(seqs[1], {**probe, "max_tokens": 3}, "long"))
        calls.append(server.generate(seqs[2], {"temperature": 1.0, "logprobs": True}, "plain"))
        return await asyncio.gather(*calls)

    *outs, top, long, plain = asyncio.run(run())
    for seq, out in zip(seqs, outs, strict=True):
        with torch.no_grad():
            ref = torch.log_softmax(server.model(torch.tensor([seq])).logits[0].float(), -1)  # [L, V]
        lp = out.extra_fields["prompt_logprobs"]
        assert len(lp) == len(seq) == len(out.extra_fields["prompt_ids"]) and lp[-1] == [0.0]
        expected = ref[:-1].gather(-1, torch.tensor(seq[1:])[:, None])  # [L-1, 1]: token j+1 given tokens <= j
        assert torch.allclose(torch.tensor(lp[:-1]), expected, atol=1e-5)
        assert out.extra_fields["prompt_ids"][:-1] == [[t] for t in seq[1:]]
        assert len(out.token_ids) == 1 and out.log_probs[0] == pytest.approx(float(ref[-1, out.token_ids[0]]), abs=1e-5)
        if seq is seqs[0]:
            values, ids = ref[:-1].topk(2, dim=-1)
            assert torch.allclose(torch.tensor(top.extra_fields["prompt_logprobs"][:-1]), values, atol=1e-5)
            assert top.extra_fields["prompt_ids"][:-1] == ids.tolist() and top.extra_fields["prompt_ids"][-1] == [0, 0]
        if seq is seqs[1]:
            assert torch.allclose(torch.tensor(long.extra_fields["prompt_logprobs"][:-1]), expected, atol=1e-5)
            assert 1 <= len(long.token_ids) <= 3
    assert "prompt_logprobs" not in plain.extra_fields and len(plain.token_ids) >= 1
    with pytest.raises(ValueError, match="no room"):
        asyncio.run(server.generate([5] * server.max_model_len, dict(probe), "too_long"))


def test_server_weight_update_changes_version_checksum_and_outputs(server, tmp_path, monkeypatch):
    log = tmp_path / "rollout.jsonl"
    monkeypatch.setenv("VERL_BOT_HF_ROLLOUT_LOG", str(log))
    status0 = server.get_status()
    sd = {k: v.detach().clone() for k, v in server.model.state_dict().items()}
    # same weights: checksum unchanged, version bumps
    server.update_weights_chunk(list(sd.items()))
    s1 = server.finish_weight_update(global_steps=3)
    assert s1["weight_version"] == status0["weight_version"] + 1 and s1["checksum"] == status0["checksum"]
    # new weights: the model serves them
    new = {k: v + 0.01 for k, v in sd.items()}
    names = list(new)
    server.update_weights_chunk([(n, new[n]) for n in names[:5]])
    server.update_weights_chunk([(n, new[n]) for n in names[5:]])
    s2 = server.finish_weight_update(global_steps=4)
    assert s2["checksum"] != s1["checksum"] and s2["global_steps"] == 4
    for k, v in server.model.state_dict().items():
        assert torch.equal(v, new[k]), k
    events = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert [e["global_steps"] for e in events] == [3, 4]
    with pytest.raises(KeyError, match="does not have"):
        server.update_weights_chunk([("no.such.weight", torch.zeros(1))])
    server._pending.clear()


def test_missing_chat_template_is_refused(tiny_model_dir, tmp_path):
    import shutil

    from omegaconf import OmegaConf

    from verl_bot.cpu.hf_rollout import ChatTemplateMissing, check_chat_template

    model = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model)
    (model / "chat_template.jinja").unlink(missing_ok=True)
    cfg = json.loads((model / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ChatTemplateMissing, match="custom_chat_template"):
        check_chat_template(OmegaConf.create({"path": str(model)}))
    check_chat_template(OmegaConf.create({"path": str(model), "custom_chat_template": "{{ messages }}"}))
    check_chat_template(OmegaConf.create({"path": str(tiny_model_dir)}))


SAMPLER_RANKS = r"""
import json, os, sys
import torch
import verl_bot_vllm
verl_bot_vllm.register()  # what vLLM does in each of its processes (vllm.general_plugins)
from vllm.v1.sample import sampler
from vllm.v1.sample.ops import logprobs as ops
from vllm.v1.sample.ops import topk_topp_sampler as topk
logprobs = torch.log_softmax(torch.randn(5, 50, generator=torch.Generator().manual_seed(0)), dim=-1)
token_ids = torch.tensor([0, 7, 7, 49, 3])
out = sampler.Sampler.gather_logprobs(logprobs, 2, token_ids)
# the CPU sampler's own path for requests without seeds (verl's): one token per row, drawn eagerly
logits = torch.full((3, 50), -1e9)
logits[0, 4] = logits[1, 17] = logits[2, 33] = 0.0  # one possible token per row
drawn, _ = topk.TopKTopPSampler().forward_cpu(logits.clone(), {}, None, None)
print("RANKS=" + json.dumps({
    "eager": sampler.batched_count_greater_than is getattr(ops.batched_count_greater_than,
                                                           "_torchdynamo_orig_callable", None),
    "sample_eager": not hasattr(topk.compiled_random_sample, "_torchdynamo_orig_callable"),
    "ranks": out.selected_token_ranks.tolist(),
    "drawn": drawn.tolist(),
    "inductor_files": sum(len(files) for _, _, files in os.walk(os.environ["TORCHINDUCTOR_CACHE_DIR"])),
}))
"""


def test_vllm_cpu_sampler_ranks_and_draws_tokens_without_compiling_a_kernel(tmp_path):
    """V3 and V4 of verl_bot/hooks/vllm_cpu.py, in a fresh process like vLLM's worker on the CPU platform: the
    sampler's token ranks (what verl's `calculate_log_probs` asks for) come from the eager function and are those
    of a plain count; its draw for requests without seeds (verl's) is the eager exponential race, which draws the
    one possible token of each row; no inductor kernel is written or compiled."""
    env = {**os.environ, "VERL_PLATFORM": "cpu", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    out = subprocess.run([sys.executable, "-c", SAMPLER_RANKS], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    got = json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("RANKS=")][-1][len("RANKS="):])
    logprobs = torch.log_softmax(torch.randn(5, 50, generator=torch.Generator().manual_seed(0)), dim=-1)
    token_ids = torch.tensor([0, 7, 7, 49, 3])
    chosen = logprobs.gather(-1, token_ids[:, None])
    assert got == {"eager": True, "sample_eager": True, "ranks": (logprobs >= chosen).sum(-1).tolist(),
                   "drawn": [4, 17, 33], "inductor_files": 0}
