#!/usr/bin/env bash
# One run of verl 0.9.1's real PPO trainer on a CPU-only machine: a tiny Qwen2-style model
# (built locally, no hub) learns a CPU task with one of the ALGOs listed below:
#
#   TASK=toy_lint (default; toy_math for ALGO=vps and grail, which need answers): a global score plus
#       penalties on spans of the response (the shape of the React reward's ESLint part); a randomly
#       initialised model.
#   TASK=toy_math: integer arithmetic chains in the AIME step format, scored like AIME (Eq. 8, rule-based
#       step judge with error propagation); the model is warm-started on worked solutions with wrong steps
#       (python -m verl_bot.cpu.tiny_model DIR --warm-start toy_math).
#
#   ALGO=bot  STEPS=30 bash recipes/cpu_train.sh [hydra.override=value ...]
#   TASK=toy_math ALGO=bot STEPS=40 bash recipes/cpu_train.sh
#
#   bot : algorithm.adv_estimator=bot, dense rewards r_t = G + S_t (bot reward manager)
#   grpo: verl's grpo on the same global score G only (scalar on the last token), as in the paper
#   pure: verl-bot's PURE on the bot manager's reward streams (local S_t per step, solved at EOS)
#   pass: verl-bot's PASS on the streams local S_t (process), solved (outcome) and format (0: toy_lint has none)
#   reco: ReCo on G only: verl's grpo advantage x response weights (reco estimator) and the variance-ratio
#         loss (reco policy loss), with 4 PPO mini-batches per step so that the token part acts
#   gspo: verl's gspo policy loss (sequence ratio, the GSPO paper's clip ranges) with grpo on G only
#   dapo: verl's grpo on G only with DAPO's clip-higher (0.2/0.28), dynamic sampling on the outcome (acc: groups
#         whose rollouts are all solved or all unsolved are dropped and refilled), token-mean loss and overlong
#         shaping (cache zone: a quarter of the response length), as in recipes/common.sh
#   vps : verl-bot's GRPO-VPS: GRPO on G plus the progress of the model's belief in the correct answer,
#         probed on the hf rollout server by the vps_single_turn agent loop (needs ground-truth answers)
#   grail: GRAIL, GRPO's advantage times per-token weights from the saliency of the <final> answer (toy_math)
#
# The CPU-only overrides live in verl_bot/cpu/overrides.txt (read by recipes/cpu_overrides.sh).
set -xeuo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PY:-${ROOT}/.venv/bin/python}
ALGO=${ALGO:-bot}
TASK=${TASK:-$([[ "${ALGO}" == vps || "${ALGO}" == grail ]] && echo toy_math || echo toy_lint)}
SEED=${SEED:-0}
STEPS=${STEPS:-30}
case "${TASK}" in
    toy_lint)
        RUN_NAME=${ALGO}_s${SEED}
        MODEL_DIR=${MODEL_DIR:-${ROOT}/outputs/tiny_model_s${SEED}}
        WARM_START=()
        RESPONSE_LENGTH=${RESPONSE_LENGTH:-24}
        LR=${LR:-2e-3}             # our choice for a 100k-parameter model (the paper's 5e-7 is for 3B)
        W_LOCAL=${W_LOCAL:-0.5}    # w_s; G is in [-1, 1], S in {-1, 0}
        ;;
    toy_math)
        RUN_NAME=toy_math_${ALGO}_s${SEED}
        MODEL_DIR=${MODEL_DIR:-${ROOT}/outputs/tiny_model_toy_math_s${SEED}}
        WARM_START=(--warm-start toy_math)
        RESPONSE_LENGTH=${RESPONSE_LENGTH:-48}  # 4 steps + final = 40 tokens
        LR=${LR:-5e-4}             # a warm-started model: 2e-3 undoes its arithmetic (bot and grpo alike)
        W_LOCAL=${W_LOCAL:-1.0}    # Eq. 8 with w_g = w_s = 1: the scorer already weighs S (0.5 * e_s / |S|)
        ;;
    *)
        echo "cpu_train.sh: TASK must be toy_lint or toy_math, got '${TASK}'" >&2
        exit 2
        ;;
esac
if [[ "${ALGO}" == grail && "${TASK}" != toy_math ]]; then
    echo "cpu_train.sh: ALGO=grail needs a final answer per response (TASK=toy_math); ${TASK} has none" >&2
    exit 2
fi
OUT_DIR=${OUT_DIR:-${ROOT}/outputs/cpu_train/${RUN_NAME}}
DATA_DIR=${DATA_DIR:-${ROOT}/outputs/${TASK}_data}
TRAIN_BATCH=${TRAIN_BATCH:-8}      # prompts per step
ROLLOUT_N=${ROLLOUT_N:-4}          # rollouts per prompt (the group)
TIMEOUT_S=${TIMEOUT_S:-900}
MINI_BATCHES=${MINI_BATCHES:-$([[ "${ALGO}" == reco ]] && echo 4 || echo 1)}   # PPO updates per step
MINI_BATCH=$((TRAIN_BATCH / MINI_BATCHES))   # prompts per update; one micro-batch per update

# shellcheck source=recipes/cpu_overrides.sh
source "${ROOT}/recipes/cpu_overrides.sh"

[[ -f "${MODEL_DIR}/verl_bot_tiny.json" ]] ||
    "${PY}" -m verl_bot.cpu.tiny_model "${MODEL_DIR}" --seed "${SEED}" "${WARM_START[@]}"
[[ -f "${DATA_DIR}/train.parquet" ]] || "${PY}" "${ROOT}/recipes/data/${TASK}.py" --out "${DATA_DIR}"

case "${ALGO}" in
    bot)
        ALGO_OVERRIDES=(
            algorithm.adv_estimator=bot
            actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
            "+reward.reward_kwargs.bot.w_local=${W_LOCAL}"
        )
        ;;
    grpo)
        ALGO_OVERRIDES=(
            algorithm.adv_estimator=grpo
            actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
            +reward.reward_kwargs.bot.token_level=false
        )
        ;;
    pure)
        ALGO_OVERRIDES=(
            algorithm.adv_estimator=pure
            actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
        )
        ;;
    pass)
        ALGO_OVERRIDES=(
            algorithm.adv_estimator=pass
            actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
        )
        ;;
    reco)
        ALGO_OVERRIDES=(
            algorithm.adv_estimator=reco
            actor_rollout_ref.actor.policy_loss.loss_mode=reco
            actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
            +reward.reward_kwargs.bot.token_level=false
        )
        ;;
    grail)
        ALGO_OVERRIDES=(
            algorithm.adv_estimator=grail
            actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
            +reward.reward_kwargs.bot.token_level=false
        )
        ;;
    gspo)
        ALGO_OVERRIDES=(
            algorithm.adv_estimator=grpo
            actor_rollout_ref.actor.policy_loss.loss_mode=gspo
            actor_rollout_ref.actor.clip_ratio_low=3e-4
            actor_rollout_ref.actor.clip_ratio_high=4e-4
            actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
            +reward.reward_kwargs.bot.token_level=false
        )
        ;;
    dapo)
        ALGO_OVERRIDES=(
            algorithm.adv_estimator=grpo
            actor_rollout_ref.actor.clip_ratio_low=0.2
            actor_rollout_ref.actor.clip_ratio_high=0.28
            actor_rollout_ref.actor.loss_agg_mode=token-mean
            algorithm.filter_groups.enable=True
            algorithm.filter_groups.metric=acc
            +reward.reward_kwargs.bot.token_level=false
            +reward.reward_kwargs.overlong_buffer_cfg.enable=True
            "+reward.reward_kwargs.overlong_buffer_cfg.len=$((RESPONSE_LENGTH / 4))"
            +reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0
            "+reward.reward_kwargs.max_resp_len=${RESPONSE_LENGTH}"
        )
        ;;
    vps)
        # cuts for responses of tens of tokens (the GPU recipes' 64-token gap is for thousands)
        ALGO_OVERRIDES=(
            algorithm.adv_estimator=vps
            actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
            +reward.reward_kwargs.bot.token_level=false
            actor_rollout_ref.rollout.agent.default_agent_loop=vps_single_turn
            "+algorithm.vps_min_gap=${VPS_MIN_GAP:-4}"
            "+algorithm.vps_max_cuts=${VPS_MAX_CUTS:-4}"
            "+algorithm.vps_cut_quantile=${VPS_CUT_QUANTILE:-0.25}"
        )
        ;;
    *)
        echo "cpu_train.sh: ALGO must be bot, grpo, gspo, dapo, pure, pass, reco, vps or grail, got '${ALGO}'" >&2
        exit 2
        ;;
esac

mkdir -p "${OUT_DIR}"
RAY_TMP=$(mktemp -d /tmp/vbray.XXXXXX)  # short path: Ray's socket paths have a length limit
trap 'rm -rf "${RAY_TMP}"' EXIT

RUN_OVERRIDES=(
    "${CPU_OVERRIDES[@]}"
    "+ray_kwargs.ray_init._temp_dir=${RAY_TMP}"
    +ray_kwargs.ray_init.include_dashboard=False
    "data.train_files=${DATA_DIR}/train.parquet"
    "data.val_files=${DATA_DIR}/test.parquet"
    "data.train_batch_size=${TRAIN_BATCH}"
    data.max_prompt_length=64
    "data.max_response_length=${RESPONSE_LENGTH}"
    "data.seed=${SEED}"
    "actor_rollout_ref.model.path=${MODEL_DIR}"
    "actor_rollout_ref.rollout.n=${ROLLOUT_N}"
    "actor_rollout_ref.actor.ppo_mini_batch_size=${MINI_BATCH}"
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$((MINI_BATCH * ROLLOUT_N))"
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32
    actor_rollout_ref.actor.use_kl_loss=False
    "actor_rollout_ref.actor.optim.lr=${LR}"
    algorithm.use_kl_in_reward=False
    reward.reward_manager.name=bot
    "trainer.logger=[console,file]"
    trainer.project_name=verl_bot_cpu
    "trainer.experiment_name=${RUN_NAME}"
    trainer.val_before_train=False
    trainer.test_freq=-1
    trainer.save_freq=-1
    "trainer.total_training_steps=${STEPS}"
    "trainer.default_local_dir=${OUT_DIR}/ckpt"
    "trainer.rollout_data_dir=${OUT_DIR}/rollouts"
)

export VERL_FILE_LOGGER_PATH="${OUT_DIR}/metrics.jsonl"
rm -f "${VERL_FILE_LOGGER_PATH}"
set +e
timeout --kill-after=30 "${TIMEOUT_S}" "${PY}" -m verl.trainer.main_ppo \
    "${RUN_OVERRIDES[@]}" "${ALGO_OVERRIDES[@]}" "$@"
rc=$?
set -e
if [[ ${rc} -eq 124 || ${rc} -eq 137 ]]; then
    echo "cpu_train.sh: no result after ${TIMEOUT_S}s. verl hangs (rather than fails) when Ray is short of" \
        "resources: check the logical CPUs (ray_kwargs.ray_init.num_cpus), the logical GPUs" \
        "(+ray_kwargs.ray_init.num_gpus = trainer.n_gpus_per_node, CUDA_VISIBLE_DEVICES unset) and" \
        "TransferQueue's storage units (verl_bot/cpu/overrides.txt)" >&2
fi
exit "${rc}"
