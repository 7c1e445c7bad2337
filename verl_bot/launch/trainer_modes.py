"""verl 0.9.1's trainer modes and features with verl-bot: what is refused before Ray starts, and why.

`separate_async_problem` (`trainer.v1.trainer_mode=separate_async`: verl's own assertions, checked before Ray
instead of inside the trainer, and the mode refused on the CPU), `legacy_problem` (what verl's legacy trainer,
`trainer.use_v1=false`, cannot do: DAPO's filter, verl 0.9.0's legacy trainer on the CPU), `filter_groups_problem`
(DAPO's dynamic sampling where no group is "without signal" for the estimator) and `lora_problem` (LoRA unmerged on
the CPU `hf` rollout). Asked by `verl_bot.launch.preflight`. Each mode and feature, what runs and what is refused:
docs/verl_setup.md (Trainer modes and features, DAPO's dynamic sampling), docs/verl_versions.md (Trainer paths).
"""

from __future__ import annotations

import importlib.util
from typing import Any


def separate_async_problem(config: Any, on_cpu: bool) -> str | None:
    """Why verl's `separate_async` trainer cannot start with this config (verl's own assertions in
    `PPOTrainerSeparateAsync.__init__`, and the CPU platform's missing checkpoint engine), or None."""
    v1 = config.trainer.get("v1") or {}
    if str(v1.get("trainer_mode", "sync")) != "separate_async":
        return None
    rollout = config.actor_rollout_ref.rollout
    backend = str((rollout.get("checkpoint_engine") or {}).get("backend", "naive"))
    if on_cpu:
        return (
            "trainer.v1.trainer_mode=separate_async needs a checkpoint engine that sends the trainer's weights to "
            "the standalone rollout pool over NCCL, NIXL or Mooncake, and the CPU platform has none; use "
            "trainer.v1.trainer_mode=colocate_async (or sync) on the CPU"
        )
    sync_step = int((v1.get("separate_async") or {}).get("parameter_sync_step", 1))
    batch, mini = int(config.data.train_batch_size), int(config.actor_rollout_ref.actor.ppo_mini_batch_size)
    if batch != sync_step * mini:
        return (
            f"trainer.v1.trainer_mode=separate_async needs data.train_batch_size = "
            f"trainer.v1.separate_async.parameter_sync_step x actor_rollout_ref.actor.ppo_mini_batch_size, got "
            f"{batch} != {sync_step} x {mini}"
        )
    if int(rollout.get("nnodes", 0) or 0) <= 0 or int(rollout.get("n_gpus_per_node", 0) or 0) <= 0:
        return (
            "trainer.v1.trainer_mode=separate_async needs a standalone rollout pool: set "
            "actor_rollout_ref.rollout.nnodes and actor_rollout_ref.rollout.n_gpus_per_node (> 0)"
        )
    if backend == "naive":
        return (
            "trainer.v1.trainer_mode=separate_async needs actor_rollout_ref.rollout.checkpoint_engine.backend=nccl "
            "(or nixl, mooncake): the naive engine syncs colocated replicas only"
        )
    return None


def lora_problem(config: Any) -> str | None:
    """Why LoRA cannot train with this rollout (verl-bot's `hf` rollout takes merged weights only), or None."""
    model = config.actor_rollout_ref.get("model") or {}
    if int(model.get("lora_rank", 0) or 0) <= 0 or str(config.actor_rollout_ref.rollout.get("name")) != "hf":
        return None
    if (model.get("lora") or {}).get("merge", False):
        return None
    return (
        f"actor_rollout_ref.model.lora_rank={model.get('lora_rank')} with verl-bot's hf rollout: it loads merged "
        "weights only; set actor_rollout_ref.model.lora.merge=true or use actor_rollout_ref.rollout.name=vllm"
    )


def legacy_problem(config: Any, on_cpu: bool = False) -> str | None:
    """What verl-bot cannot run on verl's legacy trainers (`RayPPOTrainer` and its subclasses), or None."""
    filter_groups = (config.algorithm.get("filter_groups") or {})
    if filter_groups.get("enable", False):
        return (
            "algorithm.filter_groups.enable=true on a legacy trainer (RayPPOTrainer or a subclass): verl 0.9.1's "
            "legacy trainers have no group filter (DAPO's dynamic sampling runs in the v1 trainer's replay buffer, "
            "where verl-bot drops the groups its estimator cannot learn from), and a recipe trainer's own filter reads "
            "a metric that does not say which groups carry signal; use trainer.use_v1=true"
        )
    import verl

    if on_cpu and verl.__version__ == "0.9.0" and importlib.util.find_spec("flash_attn") is None:
        return (
            "trainer.use_v1=false on the CPU with verl 0.9.0: its legacy trainer unpads the batch with flash-attn "
            "(verl.utils.attention_utils), which has no CPU build (verl 0.9.1 falls back to torch); use verl 0.9.1 "
            "or the v1 trainer"
        )
    return None


def filter_groups_problem(config: Any) -> str | None:
    """Why DAPO's dynamic sampling (`algorithm.filter_groups.enable=true`) cannot keep exactly the groups the run's
    estimator learns from, with the `bot` manager (`verl_bot.hooks.v1.replay_buffer` drops the others), or None."""
    from verl_bot.knobs import enum_name
    from verl_bot.rewards.settings import bot_manager_in_use, manager_settings

    if not (config.algorithm.get("filter_groups") or {}).get("enable", False) or not bot_manager_in_use(config):
        return None
    estimator = enum_name(config.algorithm.adv_estimator)
    if manager_settings(config).layout == "returns":
        return (
            f"algorithm.filter_groups.enable=true with adv_estimator={estimator}: DAPO's dynamic sampling drops the "
            f"groups a group-relative estimator cannot learn from, and {estimator} has no group baseline (it learns "
            "from every group: its returns against a critic or the batch); set algorithm.filter_groups.enable=false"
        )
    if estimator == "vps":
        return (
            "algorithm.filter_groups.enable=true with adv_estimator=vps: GRPO-VPS's belief progress is not in the "
            "rewards the filter reads, so a group of equal G may still carry its signal; set "
            "algorithm.filter_groups.enable=false"
        )
    return None


def trainer_mode_problem(config: Any, path: str) -> str | None:
    """The first trainer mode or feature of `config` that cannot run on trainer path `path` ("v1", "legacy"; see
    docs/verl_setup.md, section Trainer modes and features), or None."""
    on_cpu = str(config.trainer.get("device", "cuda")) == "cpu"  # the CPU platform's runs (verl_bot/cpu/overrides.txt)
    legacy = legacy_problem(config, on_cpu=on_cpu) if path == "legacy" else None
    return (separate_async_problem(config, on_cpu=on_cpu) or lora_problem(config) or legacy
            or filter_groups_problem(config))
