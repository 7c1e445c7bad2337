"""verl's command line of a paper recipe (`python -m verl.trainer.main_ppo OVERRIDES...`): the run's settings, the
recipe's model options and the ALGO's overrides as Hydra overrides, then the token records, `SMOKE=1`'s validation
size, the PRM, the judges every node must reach and the CPU platform's overrides; the user's own go last and win
(`verl_bot.recipes.algos.user_wins`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from verl_bot.recipes.settings import Run

TRAINER = ("-m", "verl.trainer.main_ppo")


def files(spec: str) -> list[str]:
    """TRAIN_FILES / VAL_FILES: one path, or several as `[a,b]` or `a,b` (verl's list syntax)."""
    spec = spec.removeprefix("[").removesuffix("]")
    return [part.strip() for part in spec.split(",") if part.strip()]


def hydra_list(spec: str) -> str:
    """A file list as Hydra takes it: `[a,b]` as it is, `a,b` bracketed, one path alone."""
    return f"[{spec}]" if "," in spec and not spec.startswith("[") else spec


def _zero(text: str) -> bool:
    return re.fullmatch(r"0*\.?0*", text) is not None


def overrides(run: Run, algo: Sequence[str], cpu: Sequence[str] = (), ray_tmp: str = "/tmp/ray") -> list[str]:
    """The recipe's Hydra overrides (without the user's): `algo`, the ALGO's; `cpu`, the CPU platform's (its run's
    Ray folder `ray_tmp`)."""
    context = run.max_prompt_length + run.max_response_length
    greedy = run.val_n == "1"
    task = run.recipe.task
    out = [
        f"data.train_files={hydra_list(run.train_files)}",
        f"data.val_files={hydra_list(run.val_files)}",
        f"data.train_batch_size={run.train_batch_size}",
        f"data.max_prompt_length={run.max_prompt_length}",
        f"data.max_response_length={run.max_response_length}",
        "data.filter_overlong_prompts=True",
        "data.truncation=error",
        f"data.seed={run.seed}",
        f"actor_rollout_ref.model.path={run.model_path}",
        "actor_rollout_ref.model.use_remove_padding=True",
        "actor_rollout_ref.model.enable_gradient_checkpointing=True",
        f"actor_rollout_ref.actor.optim.lr={run.lr}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={run.ppo_mini_batch_size}",
        "actor_rollout_ref.actor.use_dynamic_bsz=True",
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={2 * context}",
        f"actor_rollout_ref.actor.use_kl_loss={not _zero(run.kl_loss_coef)}",
        f"actor_rollout_ref.actor.kl_loss_coef={run.kl_loss_coef}",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.actor.entropy_coeff=0",
        f"actor_rollout_ref.actor.fsdp_config.param_offload={run.offload}",
        f"actor_rollout_ref.actor.fsdp_config.optimizer_offload={run.offload}",
        f"actor_rollout_ref.ref.fsdp_config.param_offload={run.offload}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.n={run.rollout_n}",
        f"actor_rollout_ref.rollout.temperature={run.temperature}",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={run.rollout_tp}",
        f"actor_rollout_ref.rollout.gpu_memory_utilization={run.gpu_memory_utilization}",
        f"actor_rollout_ref.rollout.max_model_len={context}",
        f"actor_rollout_ref.rollout.val_kwargs.n={run.val_n}",
        f"actor_rollout_ref.rollout.val_kwargs.do_sample={not greedy}",
        f"actor_rollout_ref.rollout.val_kwargs.temperature={0 if greedy else run.temperature}",
        "algorithm.use_kl_in_reward=False",
        "reward.reward_manager.name=bot",
        # Hydra: a quoted value keeps commas (several URLs, round-robin) and colons as one string
        f'+reward.reward_kwargs.bot.scorers.{task.name}="{run.reward_url}"',
        f"+reward.reward_kwargs.bot.w_global={run.w_global}",
        f"+reward.reward_kwargs.bot.w_local={run.w_local}",
        f"+reward.reward_kwargs.bot.timeout_s={run.reward_timeout_s}",
        f"trainer.logger={run.logger}",
        f"trainer.project_name={run.project_name}",
        f"trainer.experiment_name={run.experiment_name}",
        f"trainer.nnodes={run.nnodes}",
        f"trainer.n_gpus_per_node={run.ngpus_per_node}",
        "trainer.val_before_train=True",
        f"trainer.test_freq={run.test_freq}",
        f"trainer.save_freq={run.save_freq}",
        f"trainer.total_epochs={run.total_epochs}",
        f"trainer.total_training_steps={run.total_steps}",
        f"trainer.default_local_dir={run.ckpt_dir}",
        f"trainer.max_actor_ckpt_to_keep={run.keep_ckpts}",
        f"trainer.max_critic_ckpt_to_keep={run.keep_ckpts}",
        f"trainer.rollout_data_dir={run.out_dir}/rollouts",
        f"trainer.validation_data_dir={run.out_dir}/validation",
        *run.recipe.model_overrides,
        *algo,
    ]
    if run.report_steps:  # the token records (verl_bot/observe/token_records.py)
        out += [f"+algorithm.token_report_steps=[{run.report_steps}]",
                f"+algorithm.token_report_groups={run.report_groups}",
                f"+algorithm.token_report_dir={run.out_dir}/token_records"]
    if run.smoke:
        out.append(f"data.val_max_samples={run.smoke_val_samples}")
    prm = run.prm
    if prm.url:  # S from the PRM (docs/prm.md), G from the math server
        out += [f'+reward.reward_kwargs.bot.prm.url="{prm.url}"', f'+reward.reward_kwargs.bot.prm.model="{prm.model}"',
                f'+reward.reward_kwargs.bot.prm.tokenizer="{prm.tokenizer}"',
                f'+reward.reward_kwargs.bot.prm.step_tag="{prm.step_tag}"',
                f"+reward.reward_kwargs.bot.prm.transform={prm.transform}",
                f"+reward.reward_kwargs.bot.prm.scale={prm.scale}",
                f"+reward.reward_kwargs.bot.prm.combine={prm.combine}"]
    if run.nnodes > 1:  # the judges every node must reach before step 1 (verl_bot/hooks/node_reach.py)
        reach = " ".join(f"{j.spec.url_var}={j.url}" for j in run.judges if j.url)
        out.append(f'+ray_kwargs.ray_init.runtime_env.env_vars.VERL_BOT_REACH_URLS="{reach}"')
    if run.cpu:
        out += [*cpu, f"+ray_kwargs.ray_init._temp_dir={ray_tmp}"]
    return out
