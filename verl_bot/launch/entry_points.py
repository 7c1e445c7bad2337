"""verl's entry points, the trainer each one runs, and what verl-bot can do with it: checked before Ray.

Every driver of verl 0.9.1 starts Ray through `verl.trainer.main_ppo.run_ppo(config, task_runner_class)`:
`python -m verl.trainer.main_ppo` (its v1 `TaskRunnerV1`, or the legacy `main_ppo_v0.TaskRunner` with
`trainer.use_v1=false`), verl's one-step-off and fully async trainers, and a recipe's or a user's driver with its own
task runner. verl-bot's hook there (`verl_bot.hooks.run_ppo`) runs the start-up checks of a verl-bot run before Ray
on every one of them, with the trainer path of its task runner (`ENTRIES`): v1 (`PPOTrainer`, TransferQueue) or
legacy (`RayPPOTrainer` and its subclasses, one `DataProto` an iteration). An unknown task runner runs on the legacy
path (verl's recipe trainers subclass `RayPPOTrainer`); its trainer gets verl-bot's step logic where it hands its
batch to verl's functions, and an iteration that computes its advantages another way stops before its actor update
(`verl_bot.training.actor_update.check_advantage_call`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Entry:
    """One of verl's task runners: the trainer it builds, its trainer path, why it cannot run on the CPU platform
    (None: it runs there) and the command that starts it."""

    trainer: str
    path: str
    command: str
    cpu_problem: str | None = None


STANDALONE = (
    "its actor (verl's DetachActorWorker) sends the weights to a standalone rollout pool over a checkpoint engine "
    "of NCCL, NIXL or Mooncake, which the CPU platform has none of (verl's naive engine syncs colocated replicas only)"
)
ENTRIES: dict[str, Entry] = {
    "verl.trainer.main_ppo.TaskRunnerV1": Entry("PPOTrainer", "v1", "python -m verl.trainer.main_ppo"),
    "verl.trainer.main_ppo_v0.TaskRunner": Entry(
        "RayPPOTrainer", "legacy", "python -m verl.trainer.main_ppo trainer.use_v1=false"
    ),
    "verl.experimental.one_step_off_policy.main_ppo.OneStepTaskRunner": Entry(
        "OneStepOffRayTrainer", "legacy", "python -m verl.experimental.one_step_off_policy.main_ppo", STANDALONE,
    ),
    "verl.experimental.fully_async_policy.fully_async_main.FullyAsyncTaskRunner": Entry(
        "FullyAsyncTrainer", "legacy", "python -m verl.experimental.fully_async_policy.fully_async_main", STANDALONE,
    ),
}


def runner_name(task_runner_class: Any) -> str:
    """`module.QualName` of a task runner (a Ray actor class, whose `__ray_actor_class__` is the class)."""
    cls = getattr(task_runner_class, "__ray_actor_class__", task_runner_class)
    return f"{cls.__module__}.{cls.__qualname__}"


def trainer_path(config: Any, runner: str | None = None) -> str:
    """The trainer path a run takes: its task runner's (`ENTRIES`; an unknown one: "legacy"), or without a task
    runner (verl's `validate_config`, called before it is known) the config's `trainer.use_v1`."""
    if runner is None:
        return "v1" if config.trainer.get("use_v1", True) else "legacy"
    entry = ENTRIES.get(runner)
    return entry.path if entry is not None else "legacy"


def entry_problem(config: Any, runner: str) -> str | None:
    """Why verl-bot cannot run the task runner `runner` with `config` (one line), or None."""
    entry = ENTRIES.get(runner)
    on_cpu = str(config.trainer.get("device", "cuda")) == "cpu"
    if entry is not None and on_cpu and entry.cpu_problem:
        return f"{entry.command} with verl-bot on the CPU platform: {entry.cpu_problem}"
    return None
