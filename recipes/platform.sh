# shellcheck shell=bash disable=SC2034  # settings for the sourcing recipe
# Sourced by the six paper recipes BEFORE their settings block: where the recipe runs. The CPU platform presets
# its settings there (${VAR:-default}), so that the environment still wins and the recipe's own defaults fill in
# the rest; the recipe's composed overrides stay the recipe's (only sizes, the platform and the model change).
# SMOKE=1 (2 steps at a small batch, then a verdict block) is in recipes/lib/settings.sh and recipes/lib/launch.sh.
#
#   PLATFORM=gpu|cpu
#                  gpu: NVIDIA GPUs and vLLM (the default). cpu: verl's trainer and verl's vLLM rollout on the CPU
#                  (vLLM's CPU build from `make setup`; verl-bot's CPU platform, verl_bot/cpu/overrides.txt) with
#                  the tiny local model and the data samples shipped in recipes/data/ (nothing downloaded).
#                  SMOKE=1 on a machine without NVIDIA GPUs (no nvidia-smi listing one, no GPU_DEVICE_FILES) picks
#                  cpu and says so; on a machine with NVIDIA device files whose nvidia-smi is missing or lists no GPU it
#                  refuses instead of smoking on the CPU; a full run never falls back to it.
#   START_JUDGE=1  start the judges the task needs here (a `vllm serve` of JUDGE_MODEL_PATH, and for React of
#                  VLM_JUDGE_MODEL_PATH when set; stopped on exit). auto (the default): when the run needs a judge,
#                  none is given by URL and the recipe starts its reward server (START_SERVER=1, SMOKE=1); on a GPU
#                  node each judge gets its own GPUs of the node plan (JUDGE_GPUS, VLM_JUDGE_GPUS: recipes/lib/node.sh,
#                  verl_bot/launch/node_plan.py), on the CPU a tiny local model (it answers at random, which the reward
#                  servers turn into verdicts and flags) whenever no judge URL is given.

: "${ROOT:?set ROOT before sourcing recipes/platform.sh}"
: "${TASK:?set TASK before sourcing recipes/platform.sh}"
: "${MODEL_TAG:?set MODEL_TAG before sourcing recipes/platform.sh}"
SMOKE=${SMOKE:-0}
GPU_DEVICE_FILES=${GPU_DEVICE_FILES:-/dev/nvidia[0-9]*}   # the device files of an NVIDIA GPU: this is a GPU node
if [[ -z "${PLATFORM:-}" ]]; then
    PLATFORM=gpu
    if [[ "${SMOKE}" == 1 ]] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
        if _vb_device=$(compgen -G "${GPU_DEVICE_FILES}"); then
            { set +x; } 2>/dev/null
            echo "recipe: SMOKE=1 on a GPU node (${_vb_device%%$'\n'*}) whose nvidia-smi" \
                "$(command -v nvidia-smi >/dev/null && echo lists no GPU || echo is not on PATH): the smoke would" \
                "run on the CPU; fix the driver or PATH, or set PLATFORM=cpu to smoke on the CPU" >&2
            exit 2
        fi
        PLATFORM=cpu
        echo "platform: cpu (SMOKE=1 on a machine without NVIDIA GPUs: no nvidia-smi lists one," \
            "no ${GPU_DEVICE_FILES})" >&2
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
    # Of the recipe's own family (MODEL_TAG): its architecture, chat template, EOS and output style (verl_bot/launch/families.py).
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
    JUDGE_MAX_TOKENS=${JUDGE_MAX_TOKENS:-64}   # a verdict fits in 64 tokens; the tiny judge would ramble for 512
    JUDGE_MODEL_PATH=${JUDGE_MODEL_PATH:-${ROOT}/outputs/tiny_judge_model}   # built when missing (recipes/lib/prepare.sh)
    JUDGE_START_TIMEOUT_S=${JUDGE_START_TIMEOUT_S:-180}
fi
START_JUDGE=${START_JUDGE:-auto}           # recipes/lib/settings.sh: auto is 1 when the run needs a judge it must start
JUDGE_MAX_TOKENS=${JUDGE_MAX_TOKENS:-}     # tokens per judge answer (empty: the reward server's default, 512)
# START_JUDGE=1 on a GPU node: the LLM code judge (React) or step judge (AIME), and React's optional VLM judge,
# each a `vllm serve` on its own GPUs (JUDGE_GPUS, VLM_JUDGE_GPUS; empty: the node plan's), a replica per JUDGE_TP
# GPUs, at JUDGE_GPU_MEMORY_UTILIZATION of each (vllm serve's own default, stated).
JUDGE_MODEL_PATH=${JUDGE_MODEL_PATH:-Qwen/Qwen2.5-7B-Instruct}
VLM_JUDGE_MODEL_PATH=${VLM_JUDGE_MODEL_PATH:-}   # e.g. Qwen/Qwen2.5-VL-7B-Instruct (React; empty: no VLM judge)
JUDGE_GPUS=${JUDGE_GPUS:-}
VLM_JUDGE_GPUS=${VLM_JUDGE_GPUS:-}
JUDGE_TP=${JUDGE_TP:-1}
JUDGE_GPU_MEMORY_UTILIZATION=${JUDGE_GPU_MEMORY_UTILIZATION:-0.9}
JUDGE_START_TIMEOUT_S=${JUDGE_START_TIMEOUT_S:-1800}   # a first start downloads the model (15 GB for a 7B)
JUDGE_SERVE_ARGS=${JUDGE_SERVE_ARGS:-}     # extra `vllm serve` flags for the judges started here
JUDGE_PORT=${JUDGE_PORT:-8790}
VLM_JUDGE_PORT=${VLM_JUDGE_PORT:-8791}
