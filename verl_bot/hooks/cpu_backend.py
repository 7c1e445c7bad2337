"""Hooks of the CPU backend (`verl_bot.cpu`): the verl internals it must change, each narrow.

Installed by `verl_bot.cpu.register_cpu_backend()` only when the CPU platform is
selected (`VERL_PLATFORM=cpu`); on any other run verl is untouched.

P1. `verl.workers.rollout.base._ROLLOUT_REGISTRY[("hf", "async")]` is set to
    `verl_bot.cpu.hf_rollout.HFServerAdapter`. verl builds the rollout object
    inside its actor worker from this private dict (`get_rollout_class`),
    which has no registration function; one new key, no existing key changed.
P2. `verl.utils.distributed.initialize_global_process_group_ray.__defaults__`:
    the default `backend` becomes `"cpu:gloo"` instead of `None`. verl builds
    the backend as `f"cpu:gloo,{device}:{backend}"`, which for device `cpu`
    is `"cpu:gloo,cpu:gloo"` and torch rejects ("Duplicate device type cpu").
    Changing the default on the function object reaches every module that
    imported the function by name; an explicit `backend=` still wins.
P5. `verl.workers.engine.fsdp.transformer_impl.CPUOffloadPolicy` (the module
    global the FSDP2 engine calls) becomes a factory that forces
    `pin_memory=False`. verl gives every forward-only engine (the reference
    policy of a KL loss or KL reward) `CPUOffloadPolicy(pin_memory=True)`,
    and pinning host memory needs an accelerator ("Cannot access accelerator
    device when none is available"); unpinned offload is the same on a CPU.
"""

from __future__ import annotations

import functools

from verl_bot.hooks._ledger import LEDGER
from verl_bot.hooks._on_import import when_imported

ROLLOUT_NAME = "hf"
ROLLOUT_ADAPTER = "verl_bot.cpu.hf_rollout.HFServerAdapter"
PATCHED_ATTR = "__verl_bot_hook__"


def _rollout_registry() -> str:
    from verl.workers.rollout import base as rollout_base

    label = "_ROLLOUT_REGISTRY[hf,async]"
    LEDGER.setitem(rollout_base._ROLLOUT_REGISTRY, (ROLLOUT_NAME, "async"), ROLLOUT_ADAPTER, label)
    return label


def _gloo_default_backend() -> str:
    import verl.utils.distributed as vdist

    fn = vdist.initialize_global_process_group_ray
    if fn.__defaults__ != (None, "cpu:gloo"):
        if fn.__defaults__ != (None, None):
            from verl_bot.compat import VerlApiMismatch

            raise VerlApiMismatch(f"unexpected defaults of initialize_global_process_group_ray: {fn.__defaults__}")
        LEDGER.setattr(fn, "__defaults__", (None, "cpu:gloo"), "initialize_global_process_group_ray.backend")
    return "initialize_global_process_group_ray.backend=cpu:gloo"


def _unpinned_offload_policy() -> str:
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


def install() -> list[str]:
    """Apply P1 and P2, and P5 once verl imports its FSDP engine (idempotent, in the ledger); returns their names."""
    when_imported(FSDP_ENGINE, functools.partial(LEDGER.step, f"CPU backend {P5}", _unpinned_offload_policy))
    return [_rollout_registry(), _gloo_default_backend(), P5]
