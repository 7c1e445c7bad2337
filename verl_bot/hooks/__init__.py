"""Every touch point of verl-bot with verl 0.9.1's internals, one module per wrapped verl method.

A verl upgrade means reading this folder. Each module wraps one method or
module function of verl (looked up and signature-checked by `wrap.wrap`:
`VerlApiMismatch` names what is missing) and says in its docstring what it
changes and why there; `registries` puts verl-bot's names into verl's registries:

    agent_loop_output   AgentLoopOutput.as_dict              dense rm_scores rows, reward streams, fatal marker
    compute_advantage   PPOTrainer._compute_advantage        batch context (streams, failed rows), failure-rate stop,
                                                             token records of chosen steps
                                                             (verl_bot.observe.token_records)
    multi_trajectory    trainer_base.compute_advantage_for_multi_trajectories
                                                             failed rollouts out of their groups, advantage 0
    compute_metrics     PPOTrainer._compute_metrics          reward/<key>/mean, reward/flag/<name>/mean
    tracker_panel       PPOTrainer.step                      every N steps, the token-credit panel and the S_t/A_t
                                                             histograms in wandb and tensorboard
                                                             (verl_bot.observe.panels)
    update_actor        PPOTrainer._update_actor             a verl-bot loss's knobs into the update's extra_info;
                                                             GRAIL: answer-span codes + knobs for the update
    ppo_loss            engine_workers.ppo_loss (worker)     those loss knobs active while the loss runs
    engine_forward_step FSDPEngineWithLMHead.forward_step    GRAIL: token weights times the advantages
    replay_buffer       PPOTrainer._build_replay_buffer      the buffer's samples stop the run on a reward
                                                             configuration error (fatal marker) or a rollout
                                                             engine that is gone (rollout_failure's marker);
                                                             with rollout.full_determinism, a batch's rows in one
                                                             order (bit-equal reruns and resumes)
    rollout_failure     AgentLoopWorker._run_agent_loop      a rollout lost to a dead engine marks its group
    response_mask       AgentLoopWorker._compute_score       the response mask travels to the bot manager
                                                             (multi-turn: which tokens are tool context)
    resume              PPOTrainer.fit (legacy: see legacy/), tracking.FileLogger.__init__
                                                             a resumed run keeps the metrics of its earlier steps
    node_reach          PPOTrainer.init, RayPPOTrainer.init_workers
                                                             on several nodes, every node reaches every reward server
                                                             and judge before any model loads (verl_bot.launch.reach)
    checkpoint_retention PPOTrainer/RayPPOTrainer._save_checkpoint
                                                             the last max_actor_ckpt_to_keep checkpoints, also after
                                                             a resume (verl counts only its own process's)
    weight_sync         vllm_rollout.ServerAdapter._execute_method, BucketedWeightSender._init_socket
                                                             a weight sync the rollout engine fails stops the run
                                                             (any run: see the module)
    reward_model_path   RewardLoopWorker.compute_score       the bot manager scores every rollout, also where verl
                                                             serves a reward model (a step PRM: verl_bot.rewards.prm)
    vllm_pooling_model  vLLMColocateWorkerExtension.monkey_patch_model
                                                             verl's vLLM server starts a pooling model (no logits)
    validate_config     verl.utils.config.validate_config    start-up checks (verl_bot.launch.preflight), then `driver`
    driver              sys.excepthook / atexit               the root cause is the driver's last line
    registries          verl's estimator, policy-loss, reward-manager and agent-loop registries
    cpu_backend         private rollout registry, process-group default, FSDP2 offload policy, the `vllm`
                        distribution name            (only with VERL_PLATFORM=cpu, from verl_bot.cpu)
    vllm_cpu            vLLM's CPU linear layers, verl's shared-memory weight receiver (inside vLLM's
                        processes, only with VERL_PLATFORM=cpu, from vLLM's plugin entry point verl_bot_vllm)

Invisible unless used (`verl_bot.launch.activation`): a wrapper that sees the run's config
calls verl's original with the same arguments and returns its result unchanged
unless the config uses verl-bot; the worker-side wrappers (`agent_loop_output`,
`ppo_loss`, `engine_forward_step`, `multi_trajectory`) act only on data a
verl-bot run put there (a dense reward, verl-bot's keys in `extra_info`, the
batch context), `vllm_pooling_model` only on a model verl's method would fail
on (a pooling model, no `compute_logits`), and `driver` is installed by a
verl-bot run's driver only.

`install()` schedules each step of `PLAN` for the moment verl imports its
module (`on_import`): a process changes only the verl modules it imports.
`touch_points` runs the steps of one trainer path dry (looked up and checked, nothing installed): in a verl-bot
run's driver before Ray, and as `python -m verl_bot.hooks.touch_points` (found / changed / missing).
Every step goes through the process's ledger (`transaction`): if one fails, every
change is undone and one ERROR line says why. Estimators, policy losses and
the streams never import this folder.
"""

from __future__ import annotations

import functools
import importlib

from verl_bot.hooks.on_import import when_imported
from verl_bot.hooks.transaction import LEDGER

TRAINER_BASE = "verl.trainer.ppo.v1.trainer_base"
VLLM_ROLLOUT = "verl.workers.rollout.vllm_rollout"
# (the verl module whose import runs the step, "verl_bot.hooks module:function" of the step)
PLAN: tuple[tuple[str, str], ...] = (
    ("verl.utils.config", "validate_config:install"),
    ("verl.trainer.ppo.core_algos", "registries:estimators_and_losses"),
    ("verl.experimental.reward_loop.reward_manager", "registries:reward_manager"),
    ("verl.experimental.agent_loop", "registries:agent_loop"),
    ("verl.experimental.agent_loop", "v1.agent_loop_output:install"),
    (TRAINER_BASE, "v1.compute_advantage:install"),
    (TRAINER_BASE, "v1.multi_trajectory:install"),
    (TRAINER_BASE, "v1.compute_metrics:install"),
    (TRAINER_BASE, "v1.tracker_panel:install"),
    (TRAINER_BASE, "v1.update_actor:install"),
    (TRAINER_BASE, "v1.replay_buffer:install"),
    (TRAINER_BASE, "resume:install_v1"),
    (TRAINER_BASE, "node_reach:install_v1"),
    (TRAINER_BASE, "checkpoint_retention:install_v1"),
    (TRAINER_BASE, "resume:install_file_logger"),
    # when verl's agent loop is imported, so before verl's v1 agent loop (verl.trainer.ppo.v1.agent_loop_tq, which
    # imports it) makes its Ray actor class of AgentLoopWorker
    ("verl.experimental.agent_loop.agent_loop", "v1.rollout_failure:install"),
    ("verl.experimental.agent_loop.agent_loop", "response_mask:install"),
    ("verl.experimental.agent_loop.agent_loop", "legacy.agent_loop:install"),
    ("verl.trainer.ppo.ray_trainer", "legacy.trainer:install"),
    ("verl.trainer.ppo.ray_trainer", "legacy.update_actor:install"),
    ("verl.trainer.ppo.ray_trainer", "node_reach:install_legacy"),
    ("verl.trainer.ppo.ray_trainer", "checkpoint_retention:install_legacy"),
    ("verl.trainer.ppo.ray_trainer", "resume:install_file_logger"),  # a second time: the legacy trainer's process
    ("verl.workers.engine_workers", "ppo_loss:install"),
    ("verl.workers.engine.fsdp.transformer_impl", "engine_forward_step:install"),
    (f"{VLLM_ROLLOUT}.vllm_rollout", "weight_sync:install_adapter"),
    (f"{VLLM_ROLLOUT}.bucketed_weight_transfer", "weight_sync:install_sender"),
    # before verl's RewardLoopManager makes its Ray actor class of RewardLoopWorker
    ("verl.experimental.reward_loop.reward_loop", "reward_model_path:install"),
    (f"{VLLM_ROLLOUT}.utils", "vllm_pooling_model:install"),
)


TRAINER_PATHS = ("v1", "legacy")  # verl's trainers: `trainer.use_v1=true` (PPOTrainer) or false (RayPPOTrainer)
TRAINER_MODULES = {TRAINER_BASE: "v1", "verl.trainer.ppo.ray_trainer": "legacy"}  # imported by that trainer only


def trainer_path(verl_module: str, step: str) -> str:
    """The trainer path an entry of `PLAN` belongs to: its step's subfolder ("v1", "legacy"), else the suffix of
    its function (`install_v1`, `install_legacy`: a module of this folder that serves both trainers), else the
    trainer whose module runs it (`TRAINER_MODULES`), else "both"."""
    module, function = step.split(":")
    folder = module.split(".")[0] if "." in module else ""
    suffix = function.rsplit("_", 1)[-1]
    for path in (folder, suffix, TRAINER_MODULES.get(verl_module)):
        if path in TRAINER_PATHS:
            return path
    return "both"


def steps_for(path: str) -> list[tuple[str, str]]:
    """The (verl module, step) entries of `PLAN` that a run on trainer path `path` ("v1" or "legacy") needs."""
    return [(module, step) for module, step in PLAN if trainer_path(module, step) in (path, "both")]


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
    for verl_module, step in PLAN:
        if LEDGER.failure is not None:  # a step that ran at once failed: everything is undone, nothing more comes
            return
        what = f"{step.replace(':', '.')} (on import of {verl_module})"
        when_imported(verl_module, functools.partial(LEDGER.step, what, functools.partial(install_step, step)))
