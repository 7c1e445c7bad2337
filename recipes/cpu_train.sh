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
#   TASK=toy_calc: the same problems solved with a calculator tool over two turns, through verl's ToolAgentLoop
#       (a hermes tool call, the tool's reply, a final answer), scored per turn (builtin:toy_calc); the model is
#       warm-started on such chats (--warm-start toy_calc). ALGO=pure is refused with its tool replies.
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
#         shaping (cache zone: a quarter of the response length)
#   vps : verl-bot's GRPO-VPS: GRPO on G plus the progress of the model's belief in the correct answer,
#         probed on the hf rollout server by the vps_single_turn agent loop (needs ground-truth answers)
#   grail: GRAIL, GRPO's advantage times per-token weights from the saliency of the <final> answer (toy_math)
#
# Each ALGO's overrides are the GPU recipes' (recipes/algos.sh); the CPU-only overrides live in
# verl_bot/cpu/overrides.txt (read by recipes/cpu_overrides.sh). Extra overrides go last and win.
set -xeuo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PY:-${ROOT}/.venv/bin/python}
vb_die() {
    { set +x; } 2>/dev/null
    echo "cpu_train.sh: $*" >&2
    exit 2
}
ALGO=${ALGO:-bot}
TASK_OVERRIDES=()
TASK=${TASK:-$([[ "${ALGO}" == vps || "${ALGO}" == grail ]] && echo toy_math || echo toy_lint)}
SEED=${SEED:-0}
STEPS=${STEPS:-30}
# The rollout engine: vllm (verl's vLLM rollout on vLLM's CPU build, as the GPU recipes run) or hf (verl-bot's
# transformers rollout, verl_bot/cpu/hf_rollout.py: about 50 s less start-up per run, same steps).
ROLLOUT=${ROLLOUT:-vllm}
[[ "${ROLLOUT}" == vllm || "${ROLLOUT}" == hf ]] || vb_die "ROLLOUT must be vllm or hf, got '${ROLLOUT}'"
# Attention heads of the tiny model (hidden size 64): 2 (head size 32, the smallest vLLM's CPU attention
# serves); the committed comparison (benchmarks/compare.py) was made with 4 on the hf rollout.
HEADS=${HEADS:-2}
case "${TASK}" in
    toy_lint)
        RUN_NAME=${ALGO}_s${SEED}
        MODEL_DIR=${MODEL_DIR:-${ROOT}/outputs/tiny_model_h${HEADS}_s${SEED}}
        WARM_START=()
        RESPONSE_LENGTH=${RESPONSE_LENGTH:-24}
        LR=${LR:-2e-3}             # our choice for a 100k-parameter model (the paper's 5e-7 is for 3B)
        W_LOCAL=${W_LOCAL:-0.5}    # w_s; G is in [-1, 1], S in {-1, 0}
        PURE_STEP_SCALE=${PURE_STEP_SCALE:-1.0}   # S is already -1 per flagged span (as React's: 1)
        HAS_ANSWER=0               # no answer to probe (vps) or to attribute (grail)
        ;;
    toy_math)
        RUN_NAME=toy_math_${ALGO}_s${SEED}
        MODEL_DIR=${MODEL_DIR:-${ROOT}/outputs/tiny_model_toy_math_h${HEADS}_s${SEED}}
        WARM_START=(--warm-start toy_math)
        RESPONSE_LENGTH=${RESPONSE_LENGTH:-48}  # 4 steps + final = 40 tokens
        LR=${LR:-5e-4}             # a warm-started model: 2e-3 undoes its arithmetic (bot and grpo alike)
        W_LOCAL=${W_LOCAL:-1.0}    # Eq. 8 with w_g = w_s = 1: the scorer already weighs S (0.5 * e_s / |S|)
        PURE_STEP_SCALE=${PURE_STEP_SCALE:-10.0}  # S is 0.5 * e_s / |S|, as AIME's: 10 (recipes/lib/settings.sh)
        HAS_ANSWER=1
        ;;
    toy_calc)
        RUN_NAME=toy_calc_${ALGO}_s${SEED}
        MODEL_DIR=${MODEL_DIR:-${ROOT}/outputs/tiny_model_toy_calc_h${HEADS}_s${SEED}}
        WARM_START=(--warm-start toy_calc)
        RESPONSE_LENGTH=${RESPONSE_LENGTH:-96}  # tool call ~25 + tool context ~14 + final answer 4 tokens
        LR=${LR:-5e-4}             # as toy_math's: at 1e-3 bot and grpo alike lose the warm start's format
        W_LOCAL=${W_LOCAL:-1.0}    # the scorer's turn values are +-0.5 already
        HAS_ANSWER=0               # vps and grail: single-turn agent loops (toy_math)
        # verl's ToolAgentLoop with the calculator as a function tool (verl_bot/cpu/calc_tool.py)
        TASK_OVERRIDES=(
            actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent
            actor_rollout_ref.rollout.multi_turn.enable=true
            actor_rollout_ref.rollout.multi_turn.format=hermes
            "actor_rollout_ref.rollout.multi_turn.function_tool_path=${ROOT}/verl_bot/cpu/calc_tool.py"
            actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3
        )
        ;;
    *) vb_die "TASK must be toy_lint, toy_math or toy_calc, got '${TASK}'" ;;
esac
# recipes/algos.sh's knobs whose GPU defaults assume thousands of tokens, then its ALGO overrides
MAX_RESPONSE_LENGTH=${RESPONSE_LENGTH}
ANSWER_TASKS=TASK=toy_math
VPS_MIN_GAP=${VPS_MIN_GAP:-4}              # cuts for responses of tens of tokens (GPU: 64 of thousands)
VPS_MAX_CUTS=${VPS_MAX_CUTS:-4}
VPS_CUT_QUANTILE=${VPS_CUT_QUANTILE:-0.25}
# shellcheck source=recipes/algos.sh
source "${ROOT}/recipes/algos.sh"
vb_algo_overrides   # refuses an unknown ALGO (or vps/grail on toy_lint) before anything is built

OUT_DIR=${OUT_DIR:-${ROOT}/outputs/cpu_train/${RUN_NAME}}
DATA_DIR=${DATA_DIR:-${ROOT}/outputs/${TASK}_data}
TRAIN_BATCH=${TRAIN_BATCH:-8}      # prompts per step
ROLLOUT_N=${ROLLOUT_N:-4}          # rollouts per prompt (the group)
TIMEOUT_S=${TIMEOUT_S:-900}
MINI_BATCHES=${MINI_BATCHES:-$([[ "${ALGO}" == reco ]] && echo 4 || echo 1)}   # PPO updates per step
MINI_BATCH=$((TRAIN_BATCH / MINI_BATCHES))   # prompts per update; one micro-batch per update

# shellcheck source=recipes/cpu_overrides.sh
source "${ROOT}/recipes/cpu_overrides.sh"
source "${ROOT}/recipes/signals.sh"   # vb_run_trainer, vb_fresh_metrics

[[ -f "${MODEL_DIR}/verl_bot_tiny.json" ]] ||
    "${PY}" -m verl_bot.cpu.tiny_model "${MODEL_DIR}" --seed "${SEED}" --heads "${HEADS}" "${WARM_START[@]}"
[[ -f "${DATA_DIR}/train.parquet" ]] || "${PY}" "${ROOT}/recipes/data/${TASK}.py" --out "${DATA_DIR}"

mkdir -p "${OUT_DIR}"
RAY_TMP=$(mktemp -d /tmp/vbray.XXXXXX)  # short path: Ray's socket paths have a length limit
trap 'rm -rf "${RAY_TMP}"' EXIT

RUN_OVERRIDES=(
    "${CPU_OVERRIDES[@]}"
    "actor_rollout_ref.rollout.name=${ROLLOUT}"
    "+ray_kwargs.ray_init._temp_dir=${RAY_TMP}"
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
    "+reward.reward_kwargs.bot.w_local=${W_LOCAL}"
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

RUN_OVERRIDES+=("${TASK_OVERRIDES[@]}" "${ALGO_OVERRIDES[@]}")
vb_user_wins RUN_OVERRIDES "$@"

export VERL_FILE_LOGGER_PATH="${OUT_DIR}/metrics.jsonl"
vb_fresh_metrics "${OUT_DIR}/ckpt"
set +e
vb_run_trainer timeout --kill-after=30 "${TIMEOUT_S}" "${PY}" -m verl.trainer.main_ppo "${RUN_OVERRIDES[@]}" "$@"
rc=$?
set -e
if [[ ${rc} -eq 124 || ${rc} -eq 137 ]]; then
    echo "cpu_train.sh: no result after ${TIMEOUT_S}s. verl hangs (rather than fails) when Ray is short of" \
        "resources: check the logical CPUs (ray_kwargs.ray_init.num_cpus), the logical GPUs" \
        "(+ray_kwargs.ray_init.num_gpus = trainer.n_gpus_per_node, CUDA_VISIBLE_DEVICES unset) and" \
        "TransferQueue's storage units (verl_bot/cpu/overrides.txt)" >&2
fi
exit "${rc}"
