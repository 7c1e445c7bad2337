"""Every touch point of verl-bot with verl 0.9.1's internals, one module per wrapped verl method.

A verl upgrade means reading this folder. Each module wraps one method or
module function of verl (signature-checked by `_patch.wrap`, idempotent) and
says in its docstring what it changes and why there:

    agent_loop_output   AgentLoopOutput.as_dict              dense rm_scores rows, reward streams, fatal marker
    compute_advantage   PPOTrainer._compute_advantage        batch context (streams, failed rows), failure-rate stop,
                                                             token records of chosen steps (verl_bot.token_records)
    multi_trajectory    trainer_base.compute_advantage_for_multi_trajectories
                                                             failed rollouts out of their groups, advantage 0
    compute_metrics     PPOTrainer._compute_metrics          reward/<key>/mean, reward/flag/<name>/mean
    update_actor        PPOTrainer._update_actor             a verl-bot loss's knobs into the update's extra_info;
                                                             GRAIL: answer-span codes + knobs for the update
    ppo_loss            engine_workers.ppo_loss (worker)     those loss knobs active while the loss runs
    engine_forward_step FSDPEngineWithLMHead.forward_step    GRAIL: token weights times the advantages
    replay_buffer       ReplayBuffer(Async)._terminal_eviction_reasons
                                                             a reward configuration error stops the run
    rollout_failure     AgentLoopWorker._run_agent_loop                 a rollout lost to a dead engine marks its group
    weight_sync         vllm_rollout.ServerAdapter._execute_method, BucketedWeightSender._init_socket (on import)
                                                             a weight sync the rollout engine fails stops the run
    validate_config     verl.utils.config.validate_config    start-up checks (verl_bot.preflight)
    driver              sys.excepthook / atexit               the root cause is the driver's last line
    cpu_backend         private rollout registry, process-group default, FSDP2 offload policy, the `vllm`
                        distribution name            (only with VERL_PLATFORM=cpu, from verl_bot.cpu)
    vllm_cpu            vLLM's CPU linear layers, verl's shared-memory weight receiver (inside vLLM's
                        processes, only with VERL_PLATFORM=cpu, from vLLM's plugin entry point verl_bot_vllm)
    reward_functions    reads verl's reward functions (the data sources default_compute_score knows,
                        verl's loader of custom_reward_function): nothing wrapped, used by the bot manager

Estimators, policy losses and the streams never import this folder;
`verl_bot.plugin.register()` installs the hooks after checking verl's version
(importing this package imports none of them, so `reward_functions` can be
read on its own).
"""

from __future__ import annotations

import importlib

TRAINER_HOOKS = (
    "rollout_failure",  # first: before any hook imports verl's v1 agent loop (its Ray actor class copies methods)
    "agent_loop_output",
    "compute_advantage",
    "multi_trajectory",
    "compute_metrics",
    "update_actor",
    "ppo_loss",
    "engine_forward_step",
    "replay_buffer",
    "weight_sync",
    "validate_config",
    "driver",
)


def install() -> list[str]:
    """Install every trainer hook (idempotent); returns the names of what was wrapped."""
    from verl_bot.compat import check_verl_version

    check_verl_version()
    return [
        name for hook in TRAINER_HOOKS for name in importlib.import_module(f"verl_bot.hooks.{hook}").install()
    ]
