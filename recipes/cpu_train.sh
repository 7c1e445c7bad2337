#!/usr/bin/env bash
# One run of verl 0.9.1's real PPO trainer on a CPU-only machine: a tiny Qwen2-style model
# (built locally, no hub) learns a CPU task with ALGO=bot, grpo, pure or grail:
#
#   TASK=toy_lint (default; toy_math for ALGO=grail): a global score plus penalties on spans of the response (the shape of the
#       React reward's ESLint part); a randomly initialised model.
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
#   grail: GRAIL, GRPO's advantage times per-token weights from the saliency of the <final> answer (toy_math)
#
# The CPU-only overrides live in verl_bot/cpu/overrides.txt (read by recipes/cpu_overrides.sh).
set -xeuo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PY:-${ROOT}/.venv/bin/python}
ALGO=${ALGO:-bot}
DEFAULT_TASK=toy_lint
[[ "${ALGO}" == grail ]] && DEFAULT_TASK=toy_math  # GRAIL needs a final answer per response
TASK=${TASK:-${DEFAULT_TASK}}
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
    grail)
        ALGO_OVERRIDES=(
            algorithm.adv_estimator=grail
            actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
            +reward.reward_kwargs.bot.token_level=false
        )
        ;;
    *)
        echo "cpu_train.sh: ALGO must be bot, grpo, pure or grail, got '${ALGO}'" >&2
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
    "actor_rollout_ref.actor.ppo_mini_batch_size=${TRAIN_BATCH}"
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32
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
