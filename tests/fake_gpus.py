"""A fake `nvidia-smi` for the node plan's tests: the GPUs (and the processes on them) a JSON file describes.

`install(bin_dir)` writes the script; each test points `FAKE_GPUS` at a spec written by `write_spec`. It answers
the recipes' and verl_bot/launch/node_plan.py's queries (`-L`, `--query-gpu=...`, `--query-compute-apps=...`) and fails
on anything else, as a broken driver would. `cache_config` puts the recipes' model's config.json in a test home's
Hugging Face cache, as a download leaves it (the launch's memory and disk checks count its parameters).
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


# Qwen2.5-3B-Instruct's config.json: a launch sizes its checkpoints and the actor's weights from it (`cache_config`)
QWEN25_3B_CONFIG = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 2048,
                    "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16,
                    "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True}


def cache_config(home: Path, repo: str = "Qwen/Qwen2.5-3B-Instruct", config: dict | None = None) -> None:
    """A model's config.json in the Hugging Face cache under `home`, as a download leaves it (no hub asked)."""
    snapshot = home / ".cache/huggingface/hub" / f"models--{repo.replace('/', '--')}"
    (snapshot / "snapshots" / "0").mkdir(parents=True)
    (snapshot / "refs").mkdir()
    (snapshot / "refs" / "main").write_text("0")
    (snapshot / "snapshots" / "0" / "config.json").write_text(json.dumps(config or QWEN25_3B_CONFIG))
