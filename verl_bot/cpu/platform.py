"""A `cpu` platform for verl 0.9.1's `verl.plugin.platform.PlatformRegistry`.

verl's platform detection knows nvidia/huawei/amd only and falls back to nvidia, so on a CPU-only machine
`trainer.device=cpu` silently becomes `cuda`. `PlatformCPU` answers every platform question for "the CPU" (the
device `"cpu"`, gloo, logical Ray GPUs as trainer ranks, a `torch.cuda`-style device module over `torch.cpu`); it is
registered only when selected (`VERL_PLATFORM=cpu`) and never auto-detected. Each answer and why:
docs/cpu_demo.md, section What the CPU backend changes in verl and vLLM, and why.
"""

from __future__ import annotations

import os
import types
from contextlib import contextmanager
from typing import Any

import torch
from verl.plugin.platform.platform_base import PlatformBase


def _memory_info() -> tuple[int, int]:
    """(free, total) host memory in bytes, like `torch.cuda.mem_get_info`."""
    try:
        import psutil

        vm = psutil.virtual_memory()
        return int(vm.available), int(vm.total)
    except Exception:  # psutil is a ray dependency; this is only a fallback
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return int(pages), int(pages)


class _CPUStream:
    """Stand-in for a device stream: every CPU op is synchronous."""

    def synchronize(self) -> None:
        return None

    def wait_stream(self, stream: Any) -> None:
        return None

    def wait_event(self, event: Any) -> None:
        return None

    def record_event(self, event: Any = None) -> Any:
        return event

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False


def _make_device_module() -> types.ModuleType:
    """A `torch.cuda`-shaped module for the CPU (forwards to `torch.cpu` where it has the call)."""
    mod = types.ModuleType("verl_bot_cpu_device")
    for name in dir(torch.cpu):
        if not name.startswith("_"):
            setattr(mod, name, getattr(torch.cpu, name))
    mod.is_available = lambda: True
    mod.current_device = lambda: "cpu"
    mod.device_count = lambda: 1
    mod.set_device = lambda *a, **k: None
    mod.synchronize = lambda *a, **k: None
    mod.empty_cache = lambda: None
    mod.ipc_collect = lambda: None
    mod.set_per_process_memory_fraction = lambda *a, **k: None
    mod.get_device_name = lambda *a, **k: "CPU"
    mod.get_rng_state = lambda *a, **k: torch.get_rng_state()
    mod.set_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
    mod.manual_seed = torch.manual_seed
    mod.manual_seed_all = torch.manual_seed
    mod.mem_get_info = lambda *a, **k: _memory_info()
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
        setattr(mod, name, lambda *a, **k: 0)
    mod.reset_peak_memory_stats = lambda *a, **k: None
    mod.current_stream = lambda *a, **k: _CPUStream()
    mod.Stream = lambda *a, **k: _CPUStream()

    @contextmanager
    def _stream(*a, **k):
        yield

    mod.stream = _stream
    return mod


_DEVICE_MODULE = _make_device_module()


class PlatformCPU(PlatformBase):
    """verl platform for machines without an accelerator (selected with `VERL_PLATFORM=cpu`)."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return _DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Never chosen by auto-detection: only an explicit VERL_PLATFORM=cpu selects it.
        return False

    def current_device(self) -> str:  # type: ignore[override]
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Ray sets it for actors holding logical GPUs; a CPU build of torch ignores it.
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
