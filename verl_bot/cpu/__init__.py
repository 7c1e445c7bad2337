"""CPU backend for verl 0.9.1: a `cpu` platform and an `hf` (transformers) rollout.

With these, verl's real trainer (`python -m verl.trainer.main_ppo`) runs on a machine without a GPU. Nothing here
is active unless the CPU platform is selected (`VERL_PLATFORM=cpu`, the variable verl's own platform manager reads):
`register_cpu_backend()` registers the platform (`verl_bot.cpu.platform`) and the rollout
(`verl_bot.cpu.hf_rollout`), sets two environment variables (P3, P4) and installs `verl_bot.hooks.cpu_backend`;
`quiet_known_noise()` silences two known-harmless sources (N1, N2). The Hydra overrides a CPU run needs live,
explained, in ONE file, `verl_bot/cpu/overrides.txt` (`overrides()` reads it for Python,
`recipes/cpu_overrides.sh` for bash). What each change is and why: docs/cpu_demo.md, section What the CPU backend
changes in verl and vLLM, and why.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

from verl_bot.hooks.compat import ALLOW_MISMATCH_ENV, SUPPORTED_VERL, supports
from verl_bot.hooks.transaction import LEDGER

logger = logging.getLogger("verl_bot")

SELECT_ENV = "VERL_PLATFORM"
PLATFORM_NAME = "cpu"
OVERRIDES_FILE = Path(__file__).with_name("overrides.txt")

ROLLOUT_NAME = "hf"

_done: list[str] | None = None
_quieted: list[str] | None = None


def _load_hf_replica():
    """Loader for verl's `RolloutReplicaRegistry` (imports the rollout module only when it is used)."""
    from verl_bot.cpu.hf_rollout import HFReplica

    return HFReplica


def is_selected() -> bool:
    """True when the CPU platform was asked for (`VERL_PLATFORM=cpu`)."""
    return os.environ.get(SELECT_ENV, "").strip().lower() == PLATFORM_NAME


def overrides(path: str | Path | None = None, rollout: str | None = None) -> list[str]:
    """The Hydra overrides of a CPU run, from `overrides.txt` (comments and blank lines dropped).

    `rollout`: the rollout engine, appended as `actor_rollout_ref.rollout.name=<rollout>` (`"hf"`: verl-bot's
    transformers rollout); None keeps the file's, verl's vLLM rollout.
    """
    text = Path(path or OVERRIDES_FILE).read_text()
    out = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if line:
            out.append(line)
    if rollout is not None:
        out.append(f"actor_rollout_ref.rollout.name={rollout}")
    return out


ENGINE_NOTES = r"(torchtitan|veomni|automodel|mindspeed|megatron) engine is not available"
TQ_THREADS_ENV = "TQ_NUM_THREADS"
TQ_DEFAULT_THREADS = 8


def quiet_known_noise() -> list[str]:
    """N1 and N2 (docs/cpu_demo.md), if the CPU platform is selected; returns what was done. Idempotent."""
    global _quieted
    if not is_selected():
        return []
    if _quieted is not None:
        return list(_quieted)
    warnings.filterwarnings("ignore", message=ENGINE_NOTES, category=UserWarning)
    ignore = warnings.filters[0]
    LEDGER.record("warnings-filter:optional-engines", lambda: warnings.filters.remove(ignore))
    done = ["warnings-filter:optional-engines"]
    if TQ_THREADS_ENV not in os.environ:
        try:
            import psutil

            cores = psutil.cpu_count(logical=False) or 0
        except ImportError:  # pragma: no cover - TransferQueue depends on psutil
            cores = 0
        if 0 < cores < TQ_DEFAULT_THREADS:
            LEDGER.setenv(TQ_THREADS_ENV, str(cores), f"env:{TQ_THREADS_ENV}")
            done.append(f"env:{TQ_THREADS_ENV}={cores}")
    _quieted = done
    return list(done)


def _check_version() -> None:
    import verl

    if not supports(verl.__version__) and os.getenv(ALLOW_MISMATCH_ENV) != "1":
        raise RuntimeError(
            f"verl-bot's CPU backend patches verl internals written for verl{SUPPORTED_VERL}; "
            f"found verl=={verl.__version__}. Unset {SELECT_ENV}={PLATFORM_NAME} or install verl{SUPPORTED_VERL}."
        )


def register_cpu_backend() -> list[str]:
    """Register the CPU platform and the `hf` rollout in verl, if selected. Idempotent.

    Returns the names of what was registered or patched (`[]` when `VERL_PLATFORM` is not `cpu`).
    """
    global _done
    if not is_selected():
        return []
    if _done is not None:
        return _done
    _check_version()

    try:
        import torch

        if torch.cuda.is_available():
            logger.warning("%s=%s on a machine with a GPU: training will run on the CPU", SELECT_ENV, PLATFORM_NAME)
    except Exception:  # pragma: no cover - torch is always there with verl
        pass

    done: list[str] = quiet_known_noise()

    # P4 and P3 (docs/cpu_demo.md): Ray sees no GPUs at all under an empty CUDA_VISIBLE_DEVICES; verl registers its
    # FSDP engine for cuda/npu only, and VERL_ENGINE_DEVICE is its own override of the device that picks the class
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        LEDGER.setenv("CUDA_VISIBLE_DEVICES", None, "env:CUDA_VISIBLE_DEVICES(unset-empty)")
        done.append("env:CUDA_VISIBLE_DEVICES(unset-empty)")
    if "VERL_ENGINE_DEVICE" not in os.environ:
        LEDGER.setenv("VERL_ENGINE_DEVICE", "cuda", "env:VERL_ENGINE_DEVICE=cuda")
        done.append("fsdp-engine-class(VERL_ENGINE_DEVICE=cuda: the engine runs on the CPU)")

    from verl_bot.cpu.platform import PlatformCPU
    from verl_bot.hooks import cpu_backend, registries

    # verl_bot.cpu.hf_rollout is imported lazily (by verl, when rollout.name=hf is used), never here: a Ray
    # worker whose first import is that module (to unpickle the server class) imports verl, which loads this
    # plugin; importing the half-initialised module from here would fail.
    done.append(registries.cpu_platform(PLATFORM_NAME, PlatformCPU))
    done.append(registries.rollout_replica(ROLLOUT_NAME, _load_hf_replica))
    done.extend(f"patch:{name}" for name in cpu_backend.install())

    _done = done
    logger.debug("verl-bot CPU backend registered (pid %d): %s", os.getpid(), ", ".join(done))
    return done


__all__ = ["register_cpu_backend", "is_selected", "overrides", "quiet_known_noise", "OVERRIDES_FILE"]
