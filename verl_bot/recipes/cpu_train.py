"""One run of verl's real PPO trainer on a CPU-only machine (`bash recipes/cpu_train.sh`): a tiny local model learns a
CPU task with one of the ALGOs, each set as the paper recipes set it (`verl_bot.recipes.algos`; only GRPO-VPS's cut
spacing differs, for responses of tens of tokens).

The tasks (`TASK`): toy_lint (the default; toy_math for vps and grail, which need answers), a global score plus
penalties on spans of the response, on a randomly initialised model; toy_math, arithmetic chains in the AIME step
format scored like AIME, on a model warm-started on worked solutions; toy_calc, the same problems solved with a
calculator tool over two turns (verl's ToolAgentLoop), scored per turn; toy_turns, the same tool, the model choosing
how many turns it takes (up to 4). Every setting is an environment variable;
extra Hydra overrides go last and win.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from verl_bot.cpu import overrides as cpu_overrides
from verl_bot.recipes.algos import SHORT_RESPONSES, Choice, algo_overrides, user_wins
from verl_bot.recipes.env import ROOT, Env, Refusal
from verl_bot.recipes.prepare import TINY_MARK, fresh_metrics
from verl_bot.recipes.supervise import Stopped, Supervisor

TIMED_OUT = (124, 137)  # timeout(1)'s codes: the run ended by TIMEOUT_S


@dataclass(frozen=True)
class CpuTask:
    """A CPU task: its run name's prefix and model folder's infix, the tiny model's warm start, its sizes and
    weights, whether a prompt has one answer (vps, grail), its own overrides and its choices of method knobs."""

    prefix: str
    model: str
    warm_start: tuple[str, ...]
    response_length: int
    lr: str
    w_local: str
    has_answer: bool
    overrides: tuple[str, ...] = ()
    choices: Mapping[str, Choice] = field(default_factory=dict)


def tool_overrides(turns: int) -> tuple[str, ...]:
    """verl's ToolAgentLoop with the calculator as a function tool (verl_bot_demo/calc_tool.py), up to `turns`
    assistant turns."""
    return ("actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
            "actor_rollout_ref.rollout.multi_turn.enable=true", "actor_rollout_ref.rollout.multi_turn.format=hermes",
            f"actor_rollout_ref.rollout.multi_turn.function_tool_path={ROOT}/verl_bot_demo/calc_tool.py",
            f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={turns}")


CPU_TASKS = {
    # a randomly initialised model; lr ours for a 100k-parameter model (the paper's 5e-7 is for 3B); G in [-1, 1] and S
    # in {-1, 0}: w_s 0.5
    "toy_lint": CpuTask("", "", (), 24, "2e-3", "0.5", False),
    # a warm-started model (2e-3 undoes its arithmetic); Eq. 8 with w_g = w_s = 1; S is AIME's scale (PURE: 10)
    "toy_math": CpuTask("toy_math_", "toy_math_", ("--warm-start", "toy_math"), 48, "5e-4", "1.0", True,
                        choices={"PURE_STEP_SCALE": Choice(10.0, "S is 0.5 * e_s / |S|, as AIME's")}),
    # two turns through verl's ToolAgentLoop; the turn values are +-0.5 already; vps and grail take single-turn agent
    # loops
    "toy_calc": CpuTask("toy_calc_", "toy_calc_", ("--warm-start", "toy_calc"), 96, "5e-4", "1.0", False,
                        tool_overrides(3)),
    # toy_calc's tool, but the model chooses its number of turns (answer at once, call, call again): up to 3 calls
    # and their replies + the final answer
    "toy_turns": CpuTask("toy_turns_", "toy_turns_", ("--warm-start", "toy_turns"), 128, "5e-4", "1.0", False,
                         tool_overrides(4)),
}


@dataclass(frozen=True)
class CpuRun:
    """One CPU run: what it makes when missing (model, data) and verl's arguments after `python`."""

    py: str
    model_dir: str
    model_argv: tuple[str, ...]
    data_dir: str
    data_argv: tuple[str, ...]
    out_dir: str
    timeout_s: str
    overrides: tuple[str, ...]


def cpu_run(env: Env, ray_tmp: str) -> CpuRun:
    """The run the environment asks for (refused in one line when it cannot run), its Ray folder `ray_tmp`."""
    rollout = env.get("ROLLOUT", "vllm")  # hf: verl-bot's transformers rollout (verl_bot/cpu/hf_rollout.py)
    if rollout not in ("vllm", "hf"):
        raise Refusal(f"ROLLOUT must be vllm or hf, got '{rollout}'")
    algo = env.get("ALGO", "bot")
    name = env.get("TASK", "toy_math" if algo in ("vps", "grail") else "toy_lint")
    if name not in CPU_TASKS:
        *others, last = CPU_TASKS
        raise Refusal(f"TASK must be {', '.join(others)} or {last}, got '{name}'")
    task, py, seed = CPU_TASKS[name], env.get("PY", ROOT / ".venv" / "bin" / "python"), env.get("SEED", 0)
    heads = env.get("HEADS", 2)  # 2: head size 32, the smallest vLLM's CPU attention serves
    length = env.int("RESPONSE_LENGTH", task.response_length)
    algo_part = algo_overrides(algo, env, task=name, has_answer=task.has_answer, answer_tasks="TASK=toy_math",
                               max_response_length=length, choices={**SHORT_RESPONSES, **task.choices})
    run_name = f"{task.prefix}{algo}_s{seed}"
    out_dir = env.get("OUT_DIR", ROOT / "outputs" / "cpu_train" / run_name)
    model_dir = env.get("MODEL_DIR", ROOT / "outputs" / f"tiny_model_{task.model}h{heads}_s{seed}")
    data_dir = env.get("DATA_DIR", ROOT / "outputs" / f"{name}_data")
    batch, rollout_n = env.int("TRAIN_BATCH", 8), env.int("ROLLOUT_N", 4)
    mini = batch // env.int("MINI_BATCHES", 4 if algo == "reco" else 1)  # prompts an update: ReCo needs several
    ours = [
        *cpu_overrides(), f"actor_rollout_ref.rollout.name={rollout}", f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
        f"data.train_files={data_dir}/train.parquet", f"data.val_files={data_dir}/test.parquet",
        f"data.train_batch_size={batch}", "data.max_prompt_length=64", f"data.max_response_length={length}",
        f"data.seed={seed}", f"actor_rollout_ref.model.path={model_dir}", f"actor_rollout_ref.rollout.n={rollout_n}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={mini * rollout_n}",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32", "actor_rollout_ref.actor.use_kl_loss=False",
        f"actor_rollout_ref.actor.optim.lr={env.get('LR', task.lr)}", "algorithm.use_kl_in_reward=False",
        "reward.reward_manager.name=bot", f"+reward.reward_kwargs.bot.w_local={env.get('W_LOCAL', task.w_local)}",
        "trainer.logger=[console,file]", "trainer.project_name=verl_bot_cpu", f"trainer.experiment_name={run_name}",
        "trainer.val_before_train=False", "trainer.test_freq=-1", "trainer.save_freq=-1",
        f"trainer.total_training_steps={env.get('STEPS', 30)}", f"trainer.default_local_dir={out_dir}/ckpt",
        f"trainer.rollout_data_dir={out_dir}/rollouts", *task.overrides, *algo_part,
    ]
    return CpuRun(
        py=py, model_dir=model_dir,
        model_argv=(py, "-m", "verl_bot_demo.tiny_model", model_dir, "--seed", seed, "--heads", heads,
                    *task.warm_start),
        data_dir=data_dir, data_argv=(py, f"{ROOT}/recipes/data/{name}.py", "--out", data_dir), out_dir=out_dir,
        timeout_s=env.get("TIMEOUT_S", 900), overrides=tuple(ours),
    )


def main(environ: Mapping[str, str], user: list[str]) -> int:
    """Run `bash recipes/cpu_train.sh USER...`; its exit code (2 and one `cpu_train.sh:` line: refused)."""
    env = Env(environ)
    child_env = {k: v for k, v in environ.items() if not (k == "CUDA_VISIBLE_DEVICES" and not v)}  # Ray: unset
    child_env["VERL_PLATFORM"] = "cpu"  # verl-bot's CPU platform (verl_bot/cpu/__init__.py)
    try:
        with tempfile.TemporaryDirectory(prefix="vbray.", dir="/tmp") as ray_tmp, Supervisor() as sup:
            run = cpu_run(env, ray_tmp)
            for made, argv in ((Path(run.model_dir, TINY_MARK), run.model_argv),
                               (Path(run.data_dir, "train.parquet"), run.data_argv)):
                if not made.is_file() and (rc := sup.run(argv, env=child_env)):
                    return rc
            Path(run.out_dir).mkdir(parents=True, exist_ok=True)
            metrics = f"{run.out_dir}/metrics.jsonl"
            fresh_metrics(f"{run.out_dir}/ckpt", metrics)
            trainer = ["timeout", "--kill-after=30", run.timeout_s, run.py, "-m", "verl.trainer.main_ppo",
                       *user_wins(list(run.overrides), user), *user]
            rc = sup.run(trainer, env=child_env | {"VERL_FILE_LOGGER_PATH": metrics})
    except Refusal as refusal:
        print(f"cpu_train.sh: {refusal}", file=sys.stderr)
        return 2
    except Stopped as stop:
        return stop.code
    if rc in TIMED_OUT:
        print(f"cpu_train.sh: no result after {run.timeout_s}s. verl hangs (rather than fails) when Ray is short of "
              "resources: check the logical CPUs (ray_kwargs.ray_init.num_cpus), the logical GPUs "
              "(+ray_kwargs.ray_init.num_gpus = trainer.n_gpus_per_node, CUDA_VISIBLE_DEVICES unset) and "
              "TransferQueue's storage units (verl_bot/cpu/overrides.txt)", file=sys.stderr)
    return rc
