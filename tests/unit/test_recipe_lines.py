"""The recipes compose what the bash recipes composed: a representative set of recipe x ALGO x setting cases, each
against the command line, the one-line refusals and the exit code the bash recipes printed for it.

`tests/fixtures/recipes/command_lines.json` was recorded from the bash recipes (`DRY_RUN=args bash recipes/X.sh`,
`bash recipes/cpu_train.sh` with a PY that printed verl's arguments, refusing launches) before the recipes were
written in Python (`verl_bot/recipes/`), on the fake `nvidia-smi` of tests/fake_gpus.py: {HOME}, {ROOT} and {PY}
stand for the test's home, the repository and this Python. Each case runs here in this process, the paper recipes
through `verl_bot.recipes.launch.main` as `bash recipes/X.sh` calls it, the CPU run through its composition. The whole
comparison (177 cases, with the launches that start the judge and the reward server) was made when they moved.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from huggingface_hub import constants

from tests import fake_gpus
from verl_bot.recipes import launch
from verl_bot.recipes.algos import user_wins
from verl_bot.recipes.cpu_train import cpu_run
from verl_bot.recipes.env import ROOT, Env, Refusal
from verl_bot.recipes.tables import RECIPES

CASES = json.loads((ROOT / "tests" / "fixtures" / "recipes" / "command_lines.json").read_text())
KEPT = ("recipe:", "node plan:", "platform:", "cpu_train.sh:")
MACHINE = [(re.compile(r"\(\d+ GiB free\)"), "(N GiB free)"), (re.compile(r"disk with [\d.]+ GiB free"),
                                                                "disk with N GiB free")]


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """The recorded cases' home: data files where they were (empty: only their presence is read), a local model,
    the recipes' model's config.json in its Hugging Face cache, the fake nvidia-smi's nodes, a failing nvidia-smi,
    device files."""
    home = tmp_path_factory.mktemp("lines")
    for data in ("react", "aime"):
        (home / data).mkdir()
        for name in ("train.parquet", "test.parquet"):
            (home / data / name).write_text("")
    (home / "local_model").mkdir()
    (home / "local_model" / "config.json").write_text("{}")
    fake_gpus.install(home / "smi")
    fake_gpus.cache_config(home)
    for name, spec in {"idle8": {}, "seven": {"n": 7}, "none": {"n": 0}, "broken": {"broken": 9},
                       "busy0": {"free": {0: 8112}, "apps": {4242: 0}}}.items():
        fake_gpus.write_spec(home / f"{name}.json", **spec)
    (home / "nosmi").mkdir()
    (home / "nosmi" / "nvidia-smi").write_text("#!/bin/sh\nexit 127\n")
    (home / "nosmi" / "nvidia-smi").chmod(0o755)
    (home / "dev_listed").mkdir()
    (home / "dev_listed" / "nvidia0").write_text("")
    return home


def filled(text: str, home: Path) -> str:
    return text.replace("{HOME}", str(home)).replace("{ROOT}", str(ROOT)).replace("{PY}", sys.executable)


def machine_free(line: str) -> str:
    for pattern, placeholder in MACHINE:
        line = pattern.sub(placeholder, line)
    return line


@pytest.mark.parametrize("key", sorted(CASES))
def test_the_recipe_composes_what_the_bash_recipe_composed(key, home, monkeypatch, capsys):
    case = CASES[key]
    env = {k: filled(v, home) for k, v in case["env"].items()}
    path = env.pop("PATH", str(home / "smi"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for name, value in {**env, "PATH": f"{path}:{os.environ['PATH']}", "HF_HUB_OFFLINE": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / ".cache" / "huggingface" / "hub"))  # read at import
    if case["recipe"] == "cpu_train":
        try:
            run = cpu_run(Env(os.environ), "/tmp/vbray.X")
            rc, out, lines = 0, [*user_wins(list(run.overrides), case["args"]), *case["args"]], []
        except Refusal as refusal:
            rc, out, lines = 2, [], [f"cpu_train.sh: {refusal}"]
    else:
        rc = launch.main(RECIPES[case["recipe"]], dict(os.environ), list(case["args"]))
        printed = capsys.readouterr()
        out = printed.out.splitlines()
        lines = [machine_free(line) for line in printed.err.splitlines() if line.startswith(KEPT)]
    assert rc == case["rc"]
    assert out == [filled(line, home) for line in case["stdout"]]
    assert lines == [filled(line, home) for line in case["lines"]]
