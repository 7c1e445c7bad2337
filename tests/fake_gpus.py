"""A fake `nvidia-smi` for the node plan's tests: the GPUs (and the processes on them) a JSON file describes.

`install(bin_dir)` writes the script; each test points `FAKE_GPUS` at a spec written by `write_spec`. It answers
the recipes' and verl_bot/launch/node_plan.py's queries (`-L`, `--query-gpu=...`, `--query-compute-apps=...`) and fails
on anything else, as a broken driver would.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TOTAL_MIB = 81559  # an 80 GB H100 as nvidia-smi reports it
IDLE_MIB = 81004

SCRIPT = f"""#!{sys.executable}
import json, os, sys
spec = json.load(open(os.environ["FAKE_GPUS"]))
args = sys.argv[1:]
if spec.get("broken"):
    sys.exit(spec["broken"])
if args == ["-L"]:
    for g in spec["gpus"]:
        print(f"GPU {{g['index']}}: NVIDIA H100 80GB HBM3 (UUID: GPU-fake-{{g['index']}})")
elif args and args[0].startswith("--query-gpu="):
    for g in spec["gpus"]:
        print(f"{{g['index']}}, GPU-fake-{{g['index']}}, {{g['total']}}, {{g['free']}}")
elif args and args[0].startswith("--query-compute-apps="):
    for pid, index in spec.get("apps", {{}}).items():
        print(f"{{pid}}, GPU-fake-{{index}}")
else:
    sys.exit(9)
"""


def install(bin_dir: Path) -> Path:
    """Write the fake `nvidia-smi` into `bin_dir` (put it first on PATH)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "nvidia-smi"
    path.write_text(SCRIPT)
    path.chmod(0o755)
    return path


def write_spec(path: Path, n: int = 8, free: dict[int, int] | None = None, apps: dict[int, int] | None = None,
               broken: int = 0) -> Path:
    """`n` GPUs of 80 GB, idle but for `free` (index -> MiB free); `apps`: pid -> GPU index; `broken`: exit code."""
    gpus = [{"index": i, "total": TOTAL_MIB, "free": (free or {}).get(i, IDLE_MIB)} for i in range(n)]
    path.write_text(json.dumps({"gpus": gpus, "apps": {str(p): i for p, i in (apps or {}).items()},
                                "broken": broken}))
    return path
