"""A paper recipe's pre-launch checks (docs/recipes.md, "Pre-launch checks"), each refusing in one line: the model,
the data files, the judges and reward servers given by URL (their /health says the judge the task needs is up), the
step PRM, the platform. A missing input (a data file, a model directory) stops a launch, and a `DRY_RUN` says so and
goes on (`missing`).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from collections.abc import Mapping

from verl_bot.recipes.compose import files
from verl_bot.recipes.env import ROOT, Refusal
from verl_bot.recipes.services import at, get
from verl_bot.recipes.settings import Run
from verl_bot.recipes.tables import judge_up

HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def missing(run: Run, message: str) -> None:
    """A missing input: a launch stops here, a dry run says so and goes on."""
    if run.dry_run == "0":
        raise Refusal(message)
    print(f"recipe: {message} (DRY_RUN goes on; a launch stops here)", file=sys.stderr)


def check_model(run: Run) -> None:
    path = run.model_path
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise Refusal(f"MODEL_PATH={path} is a directory without config.json (not a HF model)")
    elif path.startswith(("/", ".", "~")) or os.path.exists(path):
        missing(run, f"MODEL_PATH={path}: no such model directory")
    elif not HUB_ID.fullmatch(path):
        raise Refusal(f"MODEL_PATH={path} is neither a local model directory nor a Hugging Face id (org/name)")


def check_data(run: Run) -> None:
    hint = run.recipe.task.data_hint.format(py=run.py, root=ROOT, data_dir=run.data_dir)
    for what, spec in (("TRAIN_FILES", run.train_files), ("VAL_FILES", run.val_files)):
        paths = files(spec)
        for path in paths:
            if not os.path.isfile(path):
                missing(run, f"{what}: {path} does not exist. {hint}")
        if not paths:
            raise Refusal(f"{what} is empty. {hint}")


def check_judges(run: Run, key: str) -> None:
    """Each judge given by URL answers GET <url>/models (with the judges' key when there is one)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    for judge in run.judges:
        if judge.url and get(at(judge.url, "/models"), 15, headers) is None:
            raise Refusal(f"judge endpoint {judge.spec.url_var}={judge.url} does not answer GET "
                          f"{at(judge.url, '/models')} (start it, e.g. 'vllm serve MODEL --port 8000')")


def check_servers(run: Run) -> None:
    """Each reward server of REWARD_URL answers GET /health with 200, and says the judge the task needs is up."""
    task = run.recipe.task
    for url in files(run.reward_url):
        body = get(at(url, "/health"), 20)
        if body is None:
            raise Refusal(f"reward server {url} does not answer GET /health with 200 (start it: 'python -m "
                          f"{task.server_module} --port {run.reward_port}', or run with START_SERVER=1)")
        if run.require_judge and not judge_up(task, body):
            body = body.rstrip("\n")
            raise Refusal(f"reward server {url} has no working {task.judge_what} (its /health: {body});"
                          f" configure one ({task.judges[0].url_var}), or REQUIRE_JUDGE=0 to run without it")


def check_prm(run: Run) -> None:
    """A PRM (PRM_MODEL_PATH, PRM_URL): AIME, a token-level ALGO, a served name; a PRM_URL given must answer."""
    prm = run.prm
    if not (prm.model_path or prm.url):
        return
    task = run.recipe.task.name
    if task != "aime":
        raise Refusal(f"PRM_MODEL_PATH / PRM_URL: a step PRM scores AIME's steps; the {task} recipes take none")
    if run.algo not in ("bot", "pure", "pass"):
        raise Refusal(f"PRM_MODEL_PATH / PRM_URL with ALGO={run.algo}: the PRM's step scores are the local signal S, "
                      "which only ALGO=bot, pure and pass read")
    if not prm.model:
        raise Refusal(f"PRM_URL={prm.url} needs PRM_MODEL, the name the server serves (and PRM_TOKENIZER when that "
                      "name is not a folder or hub id of the PRM's tokenizer)")
    if prm.start or run.dry_run != "0":
        return
    if get(at(prm.url, "/v1/models"), 15) is None:
        raise Refusal(f"the PRM server PRM_URL={prm.url} does not answer GET /v1/models (start it: vllm serve PRM "
                      "--runner pooling --pooler-config '{\"step_tag_id\": ID}')")


def check_platform(run: Run, env: Mapping[str, str]) -> None:
    """The CPU platform: vLLM's CPU build here. A GPU node: no VERL_PLATFORM=cpu, nvidia-smi, vLLM."""
    has_vllm = importlib.util.find_spec("vllm") is not None
    if run.cpu:
        if not has_vllm:
            raise Refusal(f"PLATFORM=cpu needs vLLM's CPU build in {run.py}: run 'make setup'")
        return
    selected = env.get("VERL_PLATFORM", "")
    if selected.lower() == "cpu":
        raise Refusal(f"VERL_PLATFORM={selected} is set in this GPU run's environment: it would turn verl-bot's CPU "
                      "backend on (training on the CPU); unset it (PLATFORM=cpu runs the recipe on the CPU)")
    if shutil.which("nvidia-smi", path=env.get("PATH")) is None:
        raise Refusal("no nvidia-smi: these recipes need NVIDIA GPUs (the CPU run is recipes/cpu_train.sh)")
    if not has_vllm:
        raise Refusal(f"vllm is not installed in {run.py}: pip install -e '.[gpu]' (docs/recipes.md)")
