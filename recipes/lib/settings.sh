# shellcheck shell=bash disable=SC2034  # settings the other parts read
# The recipes' shared settings (recipes/common.sh sources this first): every one a ${VAR:-default}, so the environment
# wins and the recipe's own settings block (set before) fills in first. In order: SMOKE=1's presets (2 steps at a
# small batch); the run's knobs (reward calls, batch, rollout, memory, validation, checkpoints, logging, outputs,
# token records); the task table (react | aime: its reward server and port, its judges, its data hint, PURE's step
# scale, whether it needs its judge); which judges the recipe starts (START_JUDGE=auto resolved, STARTED_JUDGES);
# the step PRM's settings (START_PRM).

PY=${PY:-${ROOT}/.venv/bin/python}
ALGO=${ALGO:-bot}
if [[ "${SMOKE}" == 1 ]]; then
    FULL_TOTAL_STEPS=${TOTAL_STEPS} FULL_TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE}   # for the verdict's projection
    SMOKE_BATCH=${SMOKE_BATCH:-4}          # prompts per step (ALGO=reco: 4 mini-batches of one prompt)
    SMOKE_VAL_SAMPLES=${SMOKE_VAL_SAMPLES:-4}
    TRAIN_BATCH_SIZE=${SMOKE_BATCH}
    TOTAL_STEPS=${SMOKE_STEPS:-2}          # again with more: resumes from the last step's checkpoint
    SAVE_FREQ=2                            # the checkpoint a long run writes (verl also saves the last step)
    TEST_FREQ=2                            # validation before the first step and after the last
    REPORT_STEPS=${REPORT_STEPS:-1}        # the token records of step 1: did dense rewards reach the estimator
    [[ -n "${REWARD_URL}" ]] || START_SERVER=1
fi
DRY_RUN=${DRY_RUN:-0}
START_SERVER=${START_SERVER:-0}
SEED=${SEED:-0}
REWARD_URL=${REWARD_URL:-}
REWARD_HOST=${REWARD_HOST:-}                             # empty: 127.0.0.1; NNODES > 1: this node's address
SERVER_START_TIMEOUT_S=${SERVER_START_TIMEOUT_S:-180}   # React warms Node workers and Chromium first
JUDGE_API_KEY_ENV=${JUDGE_API_KEY_ENV:-OPENAI_API_KEY}   # NAME of the env var holding the judges' API key
W_GLOBAL=${W_GLOBAL:-1.0}                                # w_g (paper: 1)
REWARD_TIMEOUT_S=${REWARD_TIMEOUT_S:-300}                # per scorer call (judges make React slow)
RECO_MINI_BATCHES=${RECO_MINI_BATCHES:-4}   # ALGO=reco: PPO updates per step (as verl's defaults 1024/256)
if [[ "${ALGO}" == reco ]]; then   # ReCo's token ratio is 1 on a step's first update: it needs several
    PPO_MINI_BATCH_SIZE=${PPO_MINI_BATCH_SIZE:-$((TRAIN_BATCH_SIZE / RECO_MINI_BATCHES))}
fi
PPO_MINI_BATCH_SIZE=${PPO_MINI_BATCH_SIZE:-${TRAIN_BATCH_SIZE}}   # our choice: one update per step (on-policy)
KL_LOSS_COEF=${KL_LOSS_COEF:-0}          # our choice: no KL term (not stated in the paper); >0 turns the KL loss on
TEMPERATURE=${TEMPERATURE:-1.0}          # rollout sampling temperature (verl default)
ROLLOUT_TP=${ROLLOUT_TP:-1}              # vLLM tensor parallel size: 1 for 3-4B models
GPU_MEMORY_UTILIZATION=${GPU_MEMORY_UTILIZATION:-0.6}
OFFLOAD=${OFFLOAD:-False}                # FSDP param + optimizer offload (True for < 80 GB GPUs)
VAL_N=${VAL_N:-1}                        # samples per held-out prompt at validation
TEST_FREQ=${TEST_FREQ:-5}
SAVE_FREQ=${SAVE_FREQ:-25}
KEEP_CKPTS=${KEEP_CKPTS:-2}              # checkpoints kept (verl's max_actor_ckpt_to_keep; 0: all); our choice
MODEL_PARAMS=${MODEL_PARAMS:-}           # parameters, for the checkpoints' size (empty: from the model's config.json)
TRAIN_GPUS=${TRAIN_GPUS:-}               # the trainer's GPUs on this node, nvidia-smi indices (empty: the node plan's)
MIN_ROLLOUTS_PER_ENGINE=${MIN_ROLLOUTS_PER_ENGINE:-16}   # node plan: a step's rollouts each vLLM engine keeps (ours)
TOTAL_EPOCHS=${TOTAL_EPOCHS:-1000}       # the run ends at TOTAL_STEPS
LOGGER=${LOGGER:-"[console,file]"}       # add wandb: LOGGER='[console,file,wandb]'
PROJECT_NAME=${PROJECT_NAME:-verl_bot}
GSPO_TOKEN=${GSPO_TOKEN:-0}              # ALGO=gspo: 1 = GSPO-token with BoT advantages (dense rewards)
ALGO_TAG=${ALGO}
[[ "${ALGO}" == gspo && "${GSPO_TOKEN}" == 1 ]] && ALGO_TAG=gspo_token
SMOKE_TAG=
[[ "${SMOKE}" == 1 ]] && SMOKE_TAG=_smoke
EXPERIMENT_NAME=${EXPERIMENT_NAME:-${TASK}_${MODEL_TAG}_${ALGO_TAG}_s${SEED}${SMOKE_TAG}}
OUT_DIR=${OUT_DIR:-${ROOT}/outputs/${PROJECT_NAME}/${EXPERIMENT_NAME}}
# Checkpoints (12 bytes a parameter: 37 GB for a 3B model) outside the repository; OUT_DIR/ckpt links to them. The
# CPU platform's tiny ones stay in OUT_DIR/ckpt.
[[ "${PLATFORM}" == cpu ]] && CKPT_DIR=${CKPT_DIR:-${OUT_DIR}/ckpt}
CKPT_ROOT=${CKPT_ROOT:-${HOME}/verl_bot_ckpt}
CKPT_DIR=${CKPT_DIR:-${CKPT_ROOT}/${PROJECT_NAME}/${EXPERIMENT_NAME}}
SERVER_ARGS=${SERVER_ARGS:-}             # extra flags for a server started here (START_SERVER=1), e.g. "--workers 8"
LONGROPE=${LONGROPE:-long}               # long | keep: a LongRoPE model with distinct factors (vb_prepare_longrope)
# Token-credit report (verl_bot/observe/token_records.py): steps whose exact tokens, rewards and advantages are recorded
# in ${OUT_DIR}/token_records (e.g. "1,-1": the first and the last; empty: none), and how many prompts per step.
# Then: python -m verl_bot.eval.training_report --run bot=OUT_DIR_BOT --run grpo=OUT_DIR_GRPO --out DIR
REPORT_STEPS=${REPORT_STEPS:-}
REPORT_GROUPS=${REPORT_GROUPS:-4}

case "${TASK}" in
    react)
        DATA_SOURCE=react
        REWARD_PORT=${REWARD_PORT:-8801}
        SERVER_MODULE=reward_servers.react
        LLM_JUDGE_BASE_URL=${LLM_JUDGE_BASE_URL:-}
        LLM_JUDGE_MODEL=${LLM_JUDGE_MODEL:-}
        VLM_JUDGE_BASE_URL=${VLM_JUDGE_BASE_URL:-}
        VLM_JUDGE_MODEL=${VLM_JUDGE_MODEL:-}
        JUDGE_VARS=(LLM_JUDGE_BASE_URL VLM_JUDGE_BASE_URL)     # the judges: their URLs, the first one required,
        JUDGE_NAMES=("LLM judge" "VLM judge")                  # names, and for START_JUDGE=1 their models, GPUs,
        JUDGE_MODEL_VARS=(JUDGE_MODEL_PATH VLM_JUDGE_MODEL_PATH)   # ports and logs (recipes/platform.sh)
        JUDGE_GPU_VARS=(JUDGE_GPUS VLM_JUDGE_GPUS)
        JUDGE_PORT_VARS=(JUDGE_PORT VLM_JUDGE_PORT)
        JUDGE_LOGS=(judge.log vlm_judge.log)
        JUDGE_WHAT="LLM code judge"
        HAS_ANSWER=0                 # no single correct answer: vps and grail refuse (recipes/algos.sh)
        # PURE's step value = clip(scale * mean S_t of the step, -1, 1); React's line penalties are already
        # on that scale (-0.5 ESLint error, -1 compiler line): 1 (our choice).
        PURE_STEP_SCALE=${PURE_STEP_SCALE:-1.0}
        DATA_HINT="Make them: ${PY} ${ROOT}/recipes/data/react.py --out-dir DIR (then TRAIN_FILES/VAL_FILES or DATA_DIR=DIR)"
        # The paper's React reward needs the LLM code judge (compiler + ESLint alone gets hacked).
        # REQUIRE_JUDGE=0: the compiler + ESLint-only ablation (Fig. 4).
        REQUIRE_JUDGE=${REQUIRE_JUDGE:-1}
        ;;
    aime)
        DATA_SOURCE=aime
        REWARD_PORT=${REWARD_PORT:-8802}
        SERVER_MODULE=reward_servers.math
        STEP_JUDGE_BASE_URL=${STEP_JUDGE_BASE_URL:-}
        STEP_JUDGE_MODEL=${STEP_JUDGE_MODEL:-}
        JUDGE_VARS=(STEP_JUDGE_BASE_URL)
        JUDGE_NAMES=("step judge")
        JUDGE_MODEL_VARS=(JUDGE_MODEL_PATH)
        JUDGE_GPU_VARS=(JUDGE_GPUS)
        JUDGE_PORT_VARS=(JUDGE_PORT)
        JUDGE_LOGS=(judge.log)
        JUDGE_WHAT="step judge"
        HAS_ANSWER=1                 # ground truth + <final>: vps and grail run
        # PURE's step value = clip(scale * mean S_t of the step, -1, 1); AIME's S_t is 0.5*e_s/|S|, so 10
        # maps a verdict e_s = +-1 of a 5-step solution to +-1 (our choice).
        PURE_STEP_SCALE=${PURE_STEP_SCALE:-10.0}
        DATA_HINT="Make them (AIME 1983-2024 from the Hugging Face hub): ${PY} ${ROOT}/recipes/data/aime.py --out-dir ${DATA_DIR}"
        # The step judge gives AIME's local signal: needed by the token-level algorithms only, unless a PRM gives it.
        [[ -z "${PRM_MODEL_PATH:-}${PRM_URL:-}" ]] || REQUIRE_JUDGE=${REQUIRE_JUDGE:-0}
        case "${ALGO}" in
            bot | pure | pass) REQUIRE_JUDGE=${REQUIRE_JUDGE:-1} ;;
            *) REQUIRE_JUDGE=${REQUIRE_JUDGE:-0} ;;
        esac
        ;;
    *)
        echo "recipe: TASK must be react or aime, got '${TASK}'" >&2
        exit 2
        ;;
esac
# START_JUDGE=auto (recipes/platform.sh): 1 when the run needs a judge and none is given, on a GPU node when the recipe
# starts the reward server that calls it (START_SERVER=1, SMOKE=1), on the CPU platform always (a tiny local judge)
if [[ "${START_JUDGE}" == auto ]]; then
    START_JUDGE=0
    if [[ "${REQUIRE_JUDGE}" == 1 && -z "${!JUDGE_VARS[0]}" ]] &&
        [[ "${PLATFORM}" == cpu || (-z "${REWARD_URL}" && "${START_SERVER}" == 1) ]]; then
        START_JUDGE=1
    fi
fi
# The judges started here (START_JUDGE=1): those without a URL whose model is set (indices into JUDGE_VARS)
STARTED_JUDGES=()
for _vb_i in "${!JUDGE_VARS[@]}"; do
    _vb_url=${JUDGE_VARS[_vb_i]} _vb_model=${JUDGE_MODEL_VARS[_vb_i]}
    if [[ "${START_JUDGE}" == 1 && -z "${!_vb_url}" && -n "${!_vb_model}" ]]; then STARTED_JUDGES+=("${_vb_i}"); fi
done
unset _vb_i _vb_url _vb_model
# A step PRM as the local signal S (docs/prm.md; the AIME recipes set PRM_MODEL_PATH and PRM_URL): served here from
# PRM_MODEL_PATH (START_PRM=1), or the pooling server at PRM_URL
PRM_MODEL_PATH=${PRM_MODEL_PATH:-}
PRM_URL=${PRM_URL:-}
PRM_MODEL=${PRM_MODEL:-${PRM_MODEL_PATH}}                 # the served name, sent with each /pooling request
PRM_TOKENIZER=${PRM_TOKENIZER:-${PRM_MODEL}}              # the PRM's tokenizer (its chat template builds the input)
PRM_STEP_TAG=${PRM_STEP_TAG:-<extra_0>}                   # the step tag (Qwen2.5-Math-PRM's); one token of it
PRM_TRANSFORM=${PRM_TRANSFORM:-centred}                   # step value scale * f(p_good): centred 2q-1, raw, log
PRM_SCALE=${PRM_SCALE:-1.0}
PRM_COMBINE=${PRM_COMBINE:-replace}                       # replace the math server's step spans, or add to them
PRM_PORT=${PRM_PORT:-8010}
PRM_GPUS=${PRM_GPUS:-}                                    # a PRM started here on a GPU node (empty: the node plan's)
START_PRM=0
[[ -n "${PRM_MODEL_PATH}" && -z "${PRM_URL}" ]] && START_PRM=1
ANSWER_TASKS="the AIME recipes"
