# shellcheck shell=bash
# verl's command line (python -m verl.trainer.main_ppo OVERRIDES...): vb_overrides composes the Hydra overrides of the
# run from the settings (recipes/lib/settings.sh), the recipe's MODEL_OVERRIDES and the ALGO's ALGO_OVERRIDES
# (recipes/algos.sh), the token records, SMOKE=1's validation size, the PRM, the judges every node must reach and the
# CPU platform's overrides; the user's own overrides ("$@") win over every one of them (vb_user_wins).

vb_hydra_list() {
    local spec=$1
    if [[ "${spec}" == \[* ]]; then echo "${spec}"; elif [[ "${spec}" == *,* ]]; then echo "[${spec}]"; else echo "${spec}"; fi
}

vb_overrides() {   # "$@": the user's overrides (they win, vb_user_wins)
    # Hydra: a quoted value keeps commas (several URLs, round-robin) and colons as one string.
    OVERRIDES=(
        "data.train_files=$(vb_hydra_list "${TRAIN_FILES}")"
        "data.val_files=$(vb_hydra_list "${VAL_FILES}")"
        "data.train_batch_size=${TRAIN_BATCH_SIZE}"
        "data.max_prompt_length=${MAX_PROMPT_LENGTH}"
        "data.max_response_length=${MAX_RESPONSE_LENGTH}"
        data.filter_overlong_prompts=True
        data.truncation=error
        "data.seed=${SEED}"
        "actor_rollout_ref.model.path=${MODEL_PATH}"
        actor_rollout_ref.model.use_remove_padding=True
        actor_rollout_ref.model.enable_gradient_checkpointing=True
        "actor_rollout_ref.actor.optim.lr=${LR}"
        "actor_rollout_ref.actor.ppo_mini_batch_size=${PPO_MINI_BATCH_SIZE}"
        actor_rollout_ref.actor.use_dynamic_bsz=True
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$((2 * (MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH)))"
        "actor_rollout_ref.actor.use_kl_loss=$([[ "${KL_LOSS_COEF}" =~ ^0*\.?0*$ ]] && echo False || echo True)"
        "actor_rollout_ref.actor.kl_loss_coef=${KL_LOSS_COEF}"
        actor_rollout_ref.actor.kl_loss_type=low_var_kl
        actor_rollout_ref.actor.entropy_coeff=0
        "actor_rollout_ref.actor.fsdp_config.param_offload=${OFFLOAD}"
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=${OFFLOAD}"
        "actor_rollout_ref.ref.fsdp_config.param_offload=${OFFLOAD}"
        actor_rollout_ref.rollout.name=vllm
        "actor_rollout_ref.rollout.n=${ROLLOUT_N}"
        "actor_rollout_ref.rollout.temperature=${TEMPERATURE}"
        "actor_rollout_ref.rollout.tensor_model_parallel_size=${ROLLOUT_TP}"
        "actor_rollout_ref.rollout.gpu_memory_utilization=${GPU_MEMORY_UTILIZATION}"
        "actor_rollout_ref.rollout.max_model_len=$((MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH))"
        "actor_rollout_ref.rollout.val_kwargs.n=${VAL_N}"
        "actor_rollout_ref.rollout.val_kwargs.do_sample=$([[ "${VAL_N}" == 1 ]] && echo False || echo True)"
        "actor_rollout_ref.rollout.val_kwargs.temperature=$([[ "${VAL_N}" == 1 ]] && echo 0 || echo "${TEMPERATURE}")"
        algorithm.use_kl_in_reward=False
        reward.reward_manager.name=bot
        "+reward.reward_kwargs.bot.scorers.${DATA_SOURCE}=\"${REWARD_URL}\""
        "+reward.reward_kwargs.bot.w_global=${W_GLOBAL}"
        "+reward.reward_kwargs.bot.w_local=${W_LOCAL}"
        "+reward.reward_kwargs.bot.timeout_s=${REWARD_TIMEOUT_S}"
        "trainer.logger=${LOGGER}"
        "trainer.project_name=${PROJECT_NAME}"
        "trainer.experiment_name=${EXPERIMENT_NAME}"
        "trainer.nnodes=${NNODES}"
        "trainer.n_gpus_per_node=${NGPUS_PER_NODE}"
        trainer.val_before_train=True
        "trainer.test_freq=${TEST_FREQ}"
        "trainer.save_freq=${SAVE_FREQ}"
        "trainer.total_epochs=${TOTAL_EPOCHS}"
        "trainer.total_training_steps=${TOTAL_STEPS}"
        "trainer.default_local_dir=${CKPT_DIR}"
        "trainer.max_actor_ckpt_to_keep=${KEEP_CKPTS}"
        "trainer.max_critic_ckpt_to_keep=${KEEP_CKPTS}"
        "trainer.rollout_data_dir=${OUT_DIR}/rollouts"
        "trainer.validation_data_dir=${OUT_DIR}/validation"
        "${MODEL_OVERRIDES[@]}"
        "${ALGO_OVERRIDES[@]}"
    )
    if [[ -n "${REPORT_STEPS}" ]]; then
        OVERRIDES+=(
            "+algorithm.token_report_steps=[${REPORT_STEPS}]"
            "+algorithm.token_report_groups=${REPORT_GROUPS}"
            "+algorithm.token_report_dir=${OUT_DIR}/token_records"
        )
    fi
    [[ "${SMOKE}" == 1 ]] && OVERRIDES+=("data.val_max_samples=${SMOKE_VAL_SAMPLES}")
    if [[ -n "${PRM_URL}" ]]; then   # S from the PRM (docs/prm.md), G from the math server
        OVERRIDES+=(
            "+reward.reward_kwargs.bot.prm.url=\"${PRM_URL}\""
            "+reward.reward_kwargs.bot.prm.model=\"${PRM_MODEL}\""
            "+reward.reward_kwargs.bot.prm.tokenizer=\"${PRM_TOKENIZER}\""
            "+reward.reward_kwargs.bot.prm.step_tag=\"${PRM_STEP_TAG}\""
            "+reward.reward_kwargs.bot.prm.transform=${PRM_TRANSFORM}"
            "+reward.reward_kwargs.bot.prm.scale=${PRM_SCALE}"
            "+reward.reward_kwargs.bot.prm.combine=${PRM_COMBINE}"
        )
    fi
    if [[ "${NNODES}" -gt 1 ]]; then   # the judges every node must reach before step 1 (verl_bot/hooks/node_reach.py)
        local var reach=()
        for var in "${JUDGE_VARS[@]}"; do
            [[ -z "${!var}" ]] || reach+=("${var}=${!var}")
        done
        OVERRIDES+=("+ray_kwargs.ray_init.runtime_env.env_vars.VERL_BOT_REACH_URLS=\"${reach[*]}\"")
    fi
    if [[ "${PLATFORM}" == cpu ]]; then
        # shellcheck source=recipes/cpu_overrides.sh
        source "${ROOT}/recipes/cpu_overrides.sh"   # CPU_OVERRIDES; exports VERL_PLATFORM=cpu
        OVERRIDES+=("${CPU_OVERRIDES[@]}" "+ray_kwargs.ray_init._temp_dir=${RAY_TMP:-/tmp/ray}")
    fi
    vb_user_wins OVERRIDES "$@"
}
