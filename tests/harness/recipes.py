"""The recipes as the tests run them: `bash recipes/<name>.sh` in a clean environment (`base_env`, `run_recipe`), or
in this process as the shell runs it (`node`), on a fake node (tests/fake_gpus.py: 8 idle 80 GB GPUs) with the
React and AIME parquet made from the repository (`data`); a recipe's `DRY_RUN=args` command line and the CPU run's
arguments, as `python -m verl.trainer.main_ppo` gets them."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from huggingface_hub import constants

from tests import fake_gpus
from verl_bot.recipes import cpu_train, launch
from verl_bot.recipes.algos import user_wins
from verl_bot.recipes.env import Env
from verl_bot.recipes.tables import RECIPES as TABLE

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", name="data")
def recipe_data(tmp_path_factory) -> dict:
    """The fixture `data`: verl parquet for both tasks (the React prompt set and the hand-written AIME sample) and the
    fake node."""
    home = tmp_path_factory.mktemp("recipes")
    py = sys.executable
    for cmd in (
        [py, "recipes/data/react.py", "--out-dir", str(home / "react")],
        [py, "recipes/data/aime.py", "--input", "recipes/data/aime_sample.jsonl", "--out-dir", str(home / "aime")],
    ):
        subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    fake_gpus.install(home / "smi")
    fake_gpus.cache_config(home)  # a launch sizes its checkpoints and the actor's weights from the model's config
    # no_aime: a fresh checkout, where the AIME data is not made yet
    return {"home": home, "react": home / "react", "aime": home / "aime", "no_aime": home / "no_aime",
            "idle8": fake_gpus.write_spec(home / "idle8.json")}


def base_env(data: dict, **extra: str) -> dict:
    """A clean environment: nothing the recipes read leaks in from the caller's shell. The node is the recipes' own
    (tests/fake_gpus.py's nvidia-smi: 8 idle 80 GB GPUs, whatever this machine has); the hub is not asked."""
    env = {
        "PATH": f"{data['home'] / 'smi'}:{os.environ['PATH']}",
        "FAKE_GPUS": str(data["idle8"]),
        "HF_HUB_OFFLINE": "1",
        "HOME": str(data["home"]),
        "PY": sys.executable,
        "OUT_DIR": str(data["home"] / "out"),
    }
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_recipe(name: str, env: dict, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """`bash recipes/<name>.sh ARGS` in `env`, as a user types it."""
    return subprocess.run(["bash", str(ROOT / "recipes" / f"{name}.sh"), *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


@dataclass
class Ran:
    """A recipe run in this process: its exit code, stdout lines, stderr."""

    rc: int
    out: list[str]
    err: str


@pytest.fixture(name="node")
def recipe_node(data, monkeypatch, capsys):
    """The fixture `node`, `node(name, *args, **env)`: the recipe run in this process on the fake node (the
    nvidia-smi it asks is on this process's PATH, its `FAKE_GPUS` the run's), as `bash recipes/<name>.sh` runs it
    with `base_env(data, **env)`."""

    def run(name: str, *args: str, **env: str) -> Ran:
        full = base_env(data, **env)
        for key in ("PATH", "FAKE_GPUS"):
            monkeypatch.setenv(key, full[key])
        if "CUDA_VISIBLE_DEVICES" in full:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", full["CUDA_VISIBLE_DEVICES"])
        else:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(data["home"] / ".cache/huggingface/hub"))
        capsys.readouterr()
        rc = launch.main(TABLE[name], full, list(args))
        printed = capsys.readouterr()
        return Ran(rc, printed.out.splitlines(), printed.err)

    return run


def data_env(name: str, data: dict) -> dict:
    """The `DATA_DIR` of the recipe `name`: the React or the AIME parquet of `data`."""
    return {"DATA_DIR": str(data["react" if name.startswith("react") else "aime"])}


def dry_run_args(node, name: str, data: dict, *user: str, **env: str) -> tuple[list[str], str]:
    """The recipe's main_ppo overrides, as printed by DRY_RUN=args, and its stderr."""
    ran = node(name, *user, **{"DRY_RUN": "args", **data_env(name, data), **env})
    assert ran.rc == 0, ran.err[-2000:]
    assert ran.out[:2] == ["-m", "verl.trainer.main_ppo"], ran.out[:3]
    return ran.out[2:], ran.err


def last_line(stderr: str) -> str:
    """The last line of `stderr` that is not blank (a recipe's refusal)."""
    return [line for line in stderr.splitlines() if line.strip()][-1]


def cpu_train_args(algo: str, task: str, *user: str, **env: str) -> list[str]:
    """recipes/cpu_train.sh's main_ppo arguments (its composition, as the run passes them)."""
    run = cpu_train.cpu_run(Env({"ALGO": algo, "TASK": task, **env}), "/tmp/ray")
    return [*user_wins(list(run.overrides), list(user)), *user]
