"""Every touch point of verl-bot with verl 0.9.1's internals: the machinery, the trainer adapters, the worker hooks.

A verl upgrade means reading this folder. Each module wraps verl methods or module functions (looked up and
signature-checked by `wrap.wrap`: `VerlApiMismatch` names what is missing) and says what it changes and why there.
`PLAN` lists every installation: the verl module whose import runs it, the installing function, and the trainer path
it serves ("v1": `trainer.use_v1=true`; "legacy": the legacy `RayPPOTrainer` and its subclasses; "both").
`install()` schedules each for the moment verl imports its module (`on_import`), through the process's ledger
(`transaction`: all or nothing). Estimators, policy losses and the streams never import this folder. The folder's
map: docs/architecture.md, section Layout; invisible unless used, all or nothing: docs/PLUGIN.md.
"""

from __future__ import annotations

import functools
import importlib

from verl_bot.hooks.on_import import when_imported
from verl_bot.hooks.transaction import LEDGER

TRAINER_BASE = "verl.trainer.ppo.v1.trainer_base"
RAY_TRAINER = "verl.trainer.ppo.ray_trainer"
AGENT_LOOP = "verl.experimental.agent_loop.agent_loop"
VLLM_ROLLOUT = "verl.workers.rollout.vllm_rollout"
TRAINER_PATHS = ("v1", "legacy")  # verl's trainers: `trainer.use_v1=true` (PPOTrainer) or false (RayPPOTrainer)
# (the verl module whose import runs it, "verl_bot.hooks module:function", the trainer path it serves)
PLAN: tuple[tuple[str, str, str], ...] = (
    ("verl.utils.config", "validate_config:install", "both"),
    ("verl.trainer.main_ppo", "run_ppo:install", "both"),
    ("verl.trainer.ppo.core_algos", "registries:estimators_and_losses", "both"),
    ("verl.experimental.reward_loop.reward_manager", "registries:reward_manager", "both"),
    ("verl.experimental.agent_loop", "registries:agent_loop", "both"),
    ("verl.experimental.agent_loop", "v1.agent_loop_output:install", "v1"),
    (TRAINER_BASE, "v1.compute_advantage:install", "v1"),
    (TRAINER_BASE, "v1.multi_trajectory:install", "v1"),
    (TRAINER_BASE, "v1.compute_metrics:install", "v1"),
    (TRAINER_BASE, "v1.tracker_panel:install", "v1"),
    (TRAINER_BASE, "v1.update_actor:install", "v1"),
    (TRAINER_BASE, "v1.replay_buffer:install", "v1"),
    (TRAINER_BASE, "resume:install_v1", "v1"),
    (TRAINER_BASE, "node_reach:install_v1", "v1"),
    (TRAINER_BASE, "checkpoint_retention:install_v1", "v1"),
    (TRAINER_BASE, "resume:install_file_logger", "v1"),
    # when verl's agent loop is imported, so before verl's v1 agent loop (verl.trainer.ppo.v1.agent_loop_tq, which
    # imports it) makes its Ray actor class of AgentLoopWorker
    (AGENT_LOOP, "v1.rollout_failure:install", "v1"),
    (AGENT_LOOP, "response_mask:install", "both"),
    (AGENT_LOOP, "legacy.agent_loop:install", "legacy"),
    # before `ray_trainer` (and verl's separation trainer) bind `compute_data_metrics` by name
    ("verl.trainer.ppo.metric_utils", "legacy.trainer:install_metrics", "legacy"),
    (RAY_TRAINER, "legacy.trainer:install", "legacy"),
    (RAY_TRAINER, "legacy.update_actor:install", "legacy"),
    (RAY_TRAINER, "node_reach:install_legacy", "legacy"),
    (RAY_TRAINER, "checkpoint_retention:install_legacy", "legacy"),
    (RAY_TRAINER, "resume:install_file_logger", "legacy"),  # a second time: the legacy trainer's process
    ("verl.experimental.separation.ray_trainer", "legacy.trainer:check_bindings", "legacy"),
    ("verl.workers.engine_workers", "ppo_loss:install", "both"),
    ("verl.workers.engine.fsdp.transformer_impl", "engine_forward_step:install", "both"),
    (f"{VLLM_ROLLOUT}.vllm_rollout", "weight_sync:install_adapter", "both"),
    (f"{VLLM_ROLLOUT}.bucketed_weight_transfer", "weight_sync:install_sender", "both"),
    # before verl's RewardLoopManager makes its Ray actor class of RewardLoopWorker
    ("verl.experimental.reward_loop.reward_loop", "reward_model_path:install", "both"),
    (f"{VLLM_ROLLOUT}.utils", "vllm_pooling_model:install", "both"),
)


def steps_for(path: str) -> list[tuple[str, str]]:
    """The (verl module, installing function) entries of `PLAN` that a run on trainer path `path` ("v1" or
    "legacy") needs."""
    return [(module, step) for module, step, serves in PLAN if serves in (path, "both")]


def run_step(step: str) -> list[str]:
    """Run one step of `PLAN` ("module:function" of this package); returns what it changed."""
    module, function = step.split(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), function)()


INSTALLED: set[str] = set()  # the steps of `PLAN` installed in this process (while `LEDGER.failure` is None)


def install_step(step: str) -> list[str]:
    """Run one step of `PLAN` for real and note it in `INSTALLED`."""
    done = run_step(step)
    INSTALLED.add(step)
    return done


def install() -> None:
    """Schedule every step of `PLAN` (each runs once, in the ledger, when verl imports its module)."""
    for verl_module, step, _ in PLAN:
        if LEDGER.failure is not None:  # a step that ran at once failed: everything is undone, nothing more comes
            return
        what = f"{step.replace(':', '.')} (on import of {verl_module})"
        when_imported(verl_module, functools.partial(LEDGER.step, what, functools.partial(install_step, step)))
