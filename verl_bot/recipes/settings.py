"""A paper recipe's run, from its table (`verl_bot.recipes.tables`) and the environment: every setting in one typed
record, in the order the recipes resolve them.

Where it runs first (`platform_of`: `PLATFORM`, or the CPU for `SMOKE=1` on a machine without NVIDIA GPUs), whose
presets fill in before the recipe's own defaults; then `SMOKE=1`'s sizes (2 steps at `SMOKE_BATCH` prompts, the
full run's sizes kept for the verdict's projection and the node plan); the run's knobs; the task's judges, which of
them the recipe starts (`START_JUDGE=auto`: when the run needs one, none is given by URL and the recipe starts the
reward server, or on the CPU platform), and the step PRM (`START_PRM`: `PRM_MODEL_PATH` without `PRM_URL`).
"""

from __future__ import annotations

import glob
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from verl_bot.recipes.algos import SHORT_RESPONSES, Choice
from verl_bot.recipes.env import ROOT, Env, Refusal
from verl_bot.recipes.tables import JudgeSpec, Recipe

GPU_DEVICE_FILES = "/dev/nvidia[0-9]*"  # the device files of an NVIDIA GPU: this is a GPU node
TINY_JUDGE = ROOT / "outputs" / "tiny_judge_model"  # the CPU platform's judge, built when missing


@dataclass(frozen=True)
class Judge:
    """A judge of the run: its URL (given, or the one a judge the recipe starts gets), its served name, the model,
    GPUs and port of one the recipe starts."""

    spec: JudgeSpec
    url: str
    served: str
    model: str
    gpus: str
    port: int


@dataclass(frozen=True)
class Prm:
    """A step PRM as the local signal S (docs/prm.md): served here from `model_path` (`start`), or at `url`."""

    model_path: str
    url: str
    model: str
    tokenizer: str
    step_tag: str
    transform: str
    scale: str
    combine: str
    port: int
    gpus: str

    @property
    def start(self) -> bool:
        return bool(self.model_path) and not self.url


@dataclass(frozen=True)
class Run:
    """Every setting of one launch of a paper recipe (docs/recipes.md, "Settings")."""

    recipe: Recipe
    algo: str
    platform: str
    smoke: bool
    dry_run: str
    py: str
    model_path: str
    data_dir: str
    train_files: str
    val_files: str
    nnodes: int
    ngpus_per_node: str
    train_gpus: str
    reward_url: str
    start_server: bool
    reward_host: str
    reward_port: int
    server_args: str
    server_start_timeout_s: int
    judges: tuple[Judge, ...]
    started: tuple[int, ...]  # the judges the recipe starts here (indices into `judges`)
    require_judge: bool
    judge_api_key_env: str
    judge_max_tokens: str
    judge_tp: int
    judge_util: str
    judge_start_timeout_s: int
    judge_serve_args: str
    prm: Prm
    lr: str
    train_batch_size: int
    full_train_batch_size: int
    rollout_n: int
    ppo_mini_batch_size: int
    max_prompt_length: int
    max_response_length: int
    total_steps: int
    full_total_steps: int
    w_local: str
    w_global: str
    val_n: str
    kl_loss_coef: str
    temperature: str
    rollout_tp: int
    gpu_memory_utilization: str
    offload: str
    test_freq: str
    save_freq: int
    keep_ckpts: int
    model_params: str
    min_rollouts_per_engine: int
    total_epochs: str
    logger: str
    project_name: str
    experiment_name: str
    out_dir: str
    ckpt_dir: str
    seed: str
    reward_timeout_s: str
    longrope: str
    report_steps: str
    report_groups: str
    smoke_val_samples: str
    cpu_seed: str
    gpu_device_files: str

    @property
    def cpu(self) -> bool:
        return self.platform == "cpu"

    @property
    def cpu_model_default(self) -> str:
        return tiny_model(self.recipe, self.cpu_seed)

    @property
    def choices(self) -> dict[str, Choice]:
        """Where this run differs from a method knob's default: the task's choices, the CPU's short responses."""
        return {**self.recipe.task.choices, **(SHORT_RESPONSES if self.cpu else {})}

    def with_judge_url(self, index: int, url: str) -> Run:
        judges = tuple(replace(j, url=url) if i == index else j for i, j in enumerate(self.judges))
        return replace(self, judges=judges)


def tiny_model(recipe: Recipe, seed: str) -> str:
    """The CPU platform's tiny model of the recipe's family and task (built when missing)."""
    return f"{ROOT}/outputs/tiny_model_{recipe.task.name}_{recipe.family.recipe_tag}_s{seed}"


def _nvidia_smi_lists_a_gpu(env: Env) -> bool:
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60, env=env.values)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return any(line.startswith("GPU") for line in done.stdout.splitlines())


def platform_of(env: Env) -> str:
    """`PLATFORM`, else gpu, or cpu for `SMOKE=1` on a machine without NVIDIA GPUs (said on stderr); a GPU node whose
    nvidia-smi lists none (its device files are there) is refused rather than smoked on the CPU."""
    platform = env.get("PLATFORM")
    if not platform:
        platform = "gpu"
        if env.flag("SMOKE") and not _nvidia_smi_lists_a_gpu(env):
            pattern = env.get("GPU_DEVICE_FILES", GPU_DEVICE_FILES)
            devices = sorted(glob.glob(pattern))
            if devices:
                why = "lists no GPU" if shutil.which("nvidia-smi", path=env.get("PATH")) else "is not on PATH"
                raise Refusal(f"SMOKE=1 on a GPU node ({devices[0]}) whose nvidia-smi {why}: the smoke would run on "
                              "the CPU; fix the driver or PATH, or set PLATFORM=cpu to smoke on the CPU")
            platform = "cpu"
            print(f"platform: cpu (SMOKE=1 on a machine without NVIDIA GPUs: no nvidia-smi lists one, no {pattern})",
                  file=sys.stderr)
    if platform not in ("gpu", "cpu"):
        raise Refusal(f"PLATFORM must be gpu or cpu, got '{platform}'")
    return platform


def _judges(recipe: Recipe, env: Env, cpu: bool) -> tuple[Judge, ...]:
    def model(spec: JudgeSpec) -> str:
        if spec.model_var != "JUDGE_MODEL_PATH":
            return env.get(spec.model_var)  # React's VLM judge: none unless named
        return env.get(spec.model_var, TINY_JUDGE if cpu else "Qwen/Qwen2.5-7B-Instruct")

    return tuple(Judge(spec, env.get(spec.url_var), env.get(spec.served_var), model(spec), env.get(spec.gpu_var),
                       env.int(spec.port_var, spec.port)) for spec in recipe.task.judges)


def _prm(env: Env) -> Prm:
    path = env.get("PRM_MODEL_PATH")
    model = env.get("PRM_MODEL", path)  # the served name, sent with each /pooling request
    return Prm(model_path=path, url=env.get("PRM_URL"), model=model, tokenizer=env.get("PRM_TOKENIZER", model),
               step_tag=env.get("PRM_STEP_TAG", "<extra_0>"),  # Qwen2.5-Math-PRM's step tag, one token
               transform=env.get("PRM_TRANSFORM", "centred"), scale=env.get("PRM_SCALE", "1.0"),
               combine=env.get("PRM_COMBINE", "replace"), port=env.int("PRM_PORT", 8010), gpus=env.get("PRM_GPUS"))


def run_of(recipe: Recipe, env: Env, platform: str) -> Run:
    """The run's settings: the environment wins, then the platform's presets, the recipe's and the task's defaults."""
    task, cpu, smoke = recipe.task, platform == "cpu", env.flag("SMOKE")
    algo = env.get("ALGO", "bot")
    seed, cpu_seed, home = env.get("SEED", 0), env.get("CPU_SEED", 0), Path(env.get("HOME", Path.home()))
    data_dir = env.get("DATA_DIR", ROOT / "outputs" / "data" / f"{task.name}_cpu" if cpu
                       else home / "data" / "verl_bot" / task.name)
    batch = env.int("TRAIN_BATCH_SIZE", task.train_batch_size)
    total_steps = env.int("TOTAL_STEPS", task.total_steps)
    reward_url = env.get("REWARD_URL")
    start_server = env.flag("START_SERVER") or (smoke and not reward_url)
    run_batch = env.int("SMOKE_BATCH", 4) if smoke else batch  # ALGO=reco: 4 mini-batches of one prompt
    reco_minis = env.int("RECO_MINI_BATCHES", 4)  # ReCo's token ratio is 1 on a step's first update: several
    mini = env.int("PPO_MINI_BATCH_SIZE", run_batch // reco_minis if algo == "reco" else run_batch)
    prm = _prm(env)
    require = env.get("REQUIRE_JUDGE", int(task.requires_judge(algo, bool(prm.model_path or prm.url)))) == "1"
    judges = _judges(recipe, env, cpu)
    start_judge = env.get("START_JUDGE", "auto")
    if start_judge == "auto":
        start_judge = "1" if require and not judges[0].url and (cpu or (not reward_url and start_server)) else "0"
    started = tuple(i for i, j in enumerate(judges) if start_judge == "1" and not j.url and j.model)
    algo_tag = "gspo_token" if algo == "gspo" and env.flag("GSPO_TOKEN") else algo
    project = env.get("PROJECT_NAME", "verl_bot")
    name = env.get("EXPERIMENT_NAME", f"{task.name}_{recipe.family.recipe_tag}_{algo_tag}_s{seed}"
                                      + ("_smoke" if smoke else ""))
    out_dir = env.get("OUT_DIR", ROOT / "outputs" / project / name)
    ckpt_root = env.get("CKPT_ROOT", home / "verl_bot_ckpt")
    # checkpoints (12 bytes a parameter) outside the repository; the CPU platform's tiny ones in OUT_DIR/ckpt
    ckpt_dir = env.get("CKPT_DIR", f"{out_dir}/ckpt" if cpu else f"{ckpt_root}/{project}/{name}")
    return Run(
        recipe=recipe, algo=algo, platform=platform, smoke=smoke, dry_run=env.get("DRY_RUN", 0),
        py=env.get("PY", ROOT / ".venv" / "bin" / "python"),
        # the CPU platform: the recipe's own family's tiny model, sizes for it (the recipes' 5e-7 is for 3B models)
        model_path=env.get("MODEL_PATH", tiny_model(recipe, cpu_seed) if cpu else recipe.family.base_model),
        data_dir=data_dir,
        train_files=env.get("TRAIN_FILES", f"{data_dir}/train.parquet"),
        val_files=env.get("VAL_FILES", f"{data_dir}/test.parquet"),
        nnodes=env.int("NNODES", 1), ngpus_per_node="1" if cpu else env.get("NGPUS_PER_NODE"),
        train_gpus=env.get("TRAIN_GPUS"), reward_url=reward_url, start_server=start_server,
        reward_host=env.get("REWARD_HOST"), reward_port=env.int("REWARD_PORT", task.reward_port),
        server_args=env.get("SERVER_ARGS"),
        server_start_timeout_s=env.int("SERVER_START_TIMEOUT_S", 180),  # React warms Node workers and Chromium
        judges=judges, started=started, require_judge=require,
        judge_api_key_env=env.get("JUDGE_API_KEY_ENV", "OPENAI_API_KEY"),
        judge_max_tokens=env.get("JUDGE_MAX_TOKENS", 64 if cpu else ""),  # a verdict fits in 64; empty: the server's
        judge_tp=env.int("JUDGE_TP", 1), judge_util=env.get("JUDGE_GPU_MEMORY_UTILIZATION", "0.9"),
        judge_start_timeout_s=env.int("JUDGE_START_TIMEOUT_S", 180 if cpu else 1800),  # a first start downloads
        judge_serve_args=env.get("JUDGE_SERVE_ARGS"), prm=prm,
        lr=env.get("LR", "2e-3" if cpu else "5e-7"),  # the paper's, for 3B models; the tiny model's on the CPU
        train_batch_size=run_batch, full_train_batch_size=batch,
        rollout_n=env.int("ROLLOUT_N", 4 if cpu else 8), ppo_mini_batch_size=mini,
        max_prompt_length=env.int("MAX_PROMPT_LENGTH", 1024),
        max_response_length=env.int("MAX_RESPONSE_LENGTH", 160 if cpu else recipe.max_response_length),
        total_steps=env.int("SMOKE_STEPS", 2) if smoke else total_steps, full_total_steps=total_steps,
        w_local=env.get("W_LOCAL", task.w_local), w_global=env.get("W_GLOBAL", "1.0"),
        val_n=env.get("VAL_N", 1 if cpu else task.val_n), kl_loss_coef=env.get("KL_LOSS_COEF", 0),
        temperature=env.get("TEMPERATURE", "1.0"), rollout_tp=env.int("ROLLOUT_TP", 1),
        gpu_memory_utilization=env.get("GPU_MEMORY_UTILIZATION", "0.6"),
        offload="False" if cpu else env.get("OFFLOAD", "False"),
        # SMOKE=1: validation before the first step and after the last, the checkpoint a long run writes
        test_freq="2" if smoke else env.get("TEST_FREQ", 5), save_freq=2 if smoke else env.int("SAVE_FREQ", 25),
        keep_ckpts=env.int("KEEP_CKPTS", 2), model_params=env.get("MODEL_PARAMS"),
        min_rollouts_per_engine=env.int("MIN_ROLLOUTS_PER_ENGINE", 16), total_epochs=env.get("TOTAL_EPOCHS", 1000),
        logger=env.get("LOGGER", "[console,file]"), project_name=project, experiment_name=name, out_dir=str(out_dir),
        ckpt_dir=ckpt_dir, seed=seed, reward_timeout_s=env.get("REWARD_TIMEOUT_S", 120 if cpu else 300),
        longrope=env.get("LONGROPE", "long"), report_steps=env.get("REPORT_STEPS", 1 if smoke else ""),
        report_groups=env.get("REPORT_GROUPS", 4), smoke_val_samples=env.get("SMOKE_VAL_SAMPLES", 4),
        cpu_seed=cpu_seed, gpu_device_files=env.get("GPU_DEVICE_FILES", GPU_DEVICE_FILES),
    )
