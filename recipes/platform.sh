# shellcheck shell=bash disable=SC2034  # settings for the sourcing recipe
# Sourced by the six paper recipes BEFORE their settings block: where the recipe runs. The CPU platform presets
# its settings there (${VAR:-default}), so that the environment still wins and the recipe's own defaults fill in
# the rest; the recipe's composed overrides stay the recipe's (only sizes, the platform and the model change).
# SMOKE=1 (2 steps at a small batch, then a verdict block) is in recipes/common.sh.
#
#   PLATFORM=gpu|cpu
#                  gpu: NVIDIA GPUs and vLLM (the default). cpu: verl's trainer and verl's vLLM rollout on the CPU
#                  (vLLM's CPU build from `make setup`; verl-bot's CPU platform, verl_bot/cpu/overrides.txt) with
#                  the tiny local model and the data samples shipped in recipes/data/ (nothing downloaded).
#                  SMOKE=1 on a machine without nvidia-smi picks cpu; a full run never falls back to it.
#   START_JUDGE=1  start the judge the task needs here (a `vllm serve` of JUDGE_MODEL_PATH, stopped on exit);
#                  the default for PLATFORM=cpu when no judge URL is given (a tiny local model: it answers at
#                  random, which the reward servers turn into verdicts and flags).

: "${ROOT:?set ROOT before sourcing recipes/platform.sh}"
: "${TASK:?set TASK before sourcing recipes/platform.sh}"
: "${MODEL_TAG:?set MODEL_TAG before sourcing recipes/platform.sh}"
SMOKE=${SMOKE:-0}
if [[ -z "${PLATFORM:-}" ]]; then
    PLATFORM=gpu
    if [[ "${SMOKE}" == 1 ]] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
        PLATFORM=cpu
    fi
fi
[[ "${PLATFORM}" == gpu || "${PLATFORM}" == cpu ]] || {
    echo "recipe: PLATFORM must be gpu or cpu, got '${PLATFORM}'" >&2
    exit 2
}

if [[ "${PLATFORM}" == cpu ]]; then
    CPU_SEED=${CPU_SEED:-0}
    # The tiny local model, warm-started on the run's own train prompts so that it writes the task's format (built
    # when missing, vb_main): React, a ```tsx component (verl_bot/cpu/toy_react.py); AIME, <step i> tags and a
    # <final> answer (the toy_math warm start, verl_bot/cpu/toy_math.py, in the AIME prompt's wording).
    # Of the recipe's own family (MODEL_TAG): its architecture, chat template, EOS and output style (verl_bot/families.py).
    CPU_MODEL_DEFAULT=${ROOT}/outputs/tiny_model_${TASK}_${MODEL_TAG}_s${CPU_SEED}
    MODEL_PATH=${MODEL_PATH:-${CPU_MODEL_DEFAULT}}
    # The data, from recipes/data/ (vb_prepare_data): React's prompt set; for AIME, toy_math problems in AIME's file
    # format (aime_cpu.jsonl: single-digit chains the tiny model can solve; on AIME problems every group would be
    # all wrong, its advantages all 0, and the run would train on nothing).
    DATA_DIR=${DATA_DIR:-${ROOT}/outputs/data/${TASK}_cpu}
    NGPUS_PER_NODE=1                       # one trainer rank (a logical GPU of Ray; verl_bot/cpu/overrides.txt)
    OFFLOAD=False
    ROLLOUT_N=${ROLLOUT_N:-4}
    MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-160}   # the warm-started components are 40-110 tokens
    VAL_N=${VAL_N:-1}
    LR=${LR:-2e-3}                         # the tiny model (the recipes' 5e-7 is for 3B models)
    # GRPO-VPS's cut spacing for responses of ~100 tokens (as recipes/cpu_train.sh; GPU: 64 of thousands)
    VPS_MIN_GAP=${VPS_MIN_GAP:-4}
    VPS_MAX_CUTS=${VPS_MAX_CUTS:-4}
    VPS_CUT_QUANTILE=${VPS_CUT_QUANTILE:-0.25}
    REWARD_TIMEOUT_S=${REWARD_TIMEOUT_S:-120}
    START_JUDGE=${START_JUDGE:-auto}       # recipes/common.sh: 1 when the run needs a judge and none is given
    JUDGE_MAX_TOKENS=${JUDGE_MAX_TOKENS:-64}   # a verdict fits in 64 tokens; the tiny judge would ramble for 512
fi
START_JUDGE=${START_JUDGE:-0}
JUDGE_MAX_TOKENS=${JUDGE_MAX_TOKENS:-}     # tokens per judge answer (empty: the reward server's default, 512)
JUDGE_MODEL_PATH=${JUDGE_MODEL_PATH:-${ROOT}/outputs/tiny_judge_model}   # START_JUDGE=1: built when missing on cpu
JUDGE_PORT=${JUDGE_PORT:-8790}
