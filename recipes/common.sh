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
#
# Every pre-launch check that fails prints ONE line starting with "recipe:" and exits 2 (DRY_RUN: missing
# inputs only say so, see vb_missing).

: "${ROOT:?set ROOT (the repository root) before sourcing recipes/common.sh}"
: "${TASK:?set TASK (react|aime) before sourcing recipes/common.sh}"
: "${MODEL_TAG:?set MODEL_TAG before sourcing recipes/common.sh}"

PY=${PY:-${ROOT}/.venv/bin/python}
ALGO=${ALGO:-bot}
DRY_RUN=${DRY_RUN:-0}
START_SERVER=${START_SERVER:-0}
SEED=${SEED:-0}
REWARD_URL=${REWARD_URL:-}
REWARD_HOST=${REWARD_HOST:-127.0.0.1}
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
TOTAL_EPOCHS=${TOTAL_EPOCHS:-1000}       # the run ends at TOTAL_STEPS
LOGGER=${LOGGER:-"[console,file]"}       # add wandb: LOGGER='[console,file,wandb]'
PROJECT_NAME=${PROJECT_NAME:-verl_bot}
GSPO_TOKEN=${GSPO_TOKEN:-0}              # ALGO=gspo: 1 = GSPO-token with BoT advantages (dense rewards)
ALGO_TAG=${ALGO}
[[ "${ALGO}" == gspo && "${GSPO_TOKEN}" == 1 ]] && ALGO_TAG=gspo_token
EXPERIMENT_NAME=${EXPERIMENT_NAME:-${TASK}_${MODEL_TAG}_${ALGO_TAG}_s${SEED}}
OUT_DIR=${OUT_DIR:-${ROOT}/outputs/${PROJECT_NAME}/${EXPERIMENT_NAME}}
SERVER_ARGS=${SERVER_ARGS:-}             # extra flags for a server started here (START_SERVER=1), e.g. "--workers 8"
GSPO_CLIP_LOW=${GSPO_CLIP_LOW:-3e-4}     # GSPO paper
GSPO_CLIP_HIGH=${GSPO_CLIP_HIGH:-4e-4}   # GSPO paper
DAPO_CLIP_LOW=${DAPO_CLIP_LOW:-0.2}      # DAPO paper
DAPO_CLIP_HIGH=${DAPO_CLIP_HIGH:-0.28}   # DAPO paper
# DAPO overlong shaping: cache zone L_c. DAPO used 4096 of 20480 (1/5); ours: a quarter of the length.
OVERLONG_BUFFER_LEN=${OVERLONG_BUFFER_LEN:-$((MAX_RESPONSE_LENGTH / 4))}
OVERLONG_PENALTY_FACTOR=${OVERLONG_PENALTY_FACTOR:-1.0}
DAPO_FILTER_METRIC=${DAPO_FILTER_METRIC:-acc}     # reward_extra_info key: the outcome (solved/compiled), as DAPO filters
PURE_TEMPERATURE=${PURE_TEMPERATURE:-0.1}          # PURE paper: softmax temperature of the min-form transform
PURE_OUTCOME_COEF=${PURE_OUTCOME_COEF:-1.0}        # weight of the verifiable reward at EOS (our choice: 1)
# PASS knobs (arXiv 2606.29296 gives none; these are our reconstruction's defaults, README "Knobs")
PASS_FORMAT_COEF=${PASS_FORMAT_COEF:-1.0}          # lambda_f, weight of the standardized format stream
PASS_PROCESS_COEF=${PASS_PROCESS_COEF:-1.0}        # lambda_p, weight of the standardized process density
PASS_DEAD_ZONE=${PASS_DEAD_ZONE:-0.0}              # delta: |S_t| < delta counts as 0 when chunks are formed
PASS_MIN_CHUNK=${PASS_MIN_CHUNK:-1}                # m_min: shorter sign runs join the chunk before them
PASS_DENSITY=${PASS_DENSITY:-suffix}               # suffix | sequence | chunk (Divide-Length)
PASS_OP=${PASS_OP:-grpo}                           # grpo (mean/std) | drgrpo (mean only)
# GRPO-VPS knobs (the paper does not state them; ours, README: GRPO-VPS)
VPS_ALPHA=${VPS_ALPHA:-0.5}                        # weight of the belief progress
VPS_MAX_CUTS=${VPS_MAX_CUTS:-8}                    # probes per rollout = cuts + 1
VPS_MIN_GAP=${VPS_MIN_GAP:-64}                     # tokens between cuts
VPS_CUT_QUANTILE=${VPS_CUT_QUANTILE:-0.1}          # cut candidates: the top 10% surprisal tokens
VPS_SPACE=${VPS_SPACE:-prob}                       # progress of p(answer) (prob) or of log p (log)
RECO_W_MAX=${RECO_W_MAX:-5.0}                      # ReCo: clip of the response weights (a reimplementation's 5)
RECO_PI=${RECO_PI:-self}                           # ReCo: sequence probability normalized within the group (ours)
# Token-credit report (verl_bot/token_records.py): steps whose exact tokens, rewards and advantages are recorded
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
        JUDGE_VARS=(LLM_JUDGE_BASE_URL VLM_JUDGE_BASE_URL)
        JUDGE_WHAT="LLM code judge"
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
        JUDGE_WHAT="step judge"
        # PURE's step value = clip(scale * mean S_t of the step, -1, 1); AIME's S_t is 0.5*e_s/|S|, so 10
        # maps a verdict e_s = +-1 of a 5-step solution to +-1 (our choice).
        PURE_STEP_SCALE=${PURE_STEP_SCALE:-10.0}
        DATA_HINT="Make them (AIME 1983-2024 from the Hugging Face hub): ${PY} ${ROOT}/recipes/data/aime.py --out-dir ${DATA_DIR}"
        # The step judge gives AIME's local signal: needed by the token-level algorithms only.
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

# --- algorithms --------------------------------------------------------------------------------------
vb_algo_overrides() {
    case "${ALGO}" in
        bot)
            # BoT-GRPO (the paper): dense r_t = w_g*G + w_s*S_t, per-token advantages, the paper's loss.
            ALGO_OVERRIDES=(
                algorithm.adv_estimator=bot
                actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
                +reward.reward_kwargs.bot.token_level=true
            )
            ;;
        grpo)
            # GRPO: the same global signals, no local ones (one scalar G on the last token).
            # Same loss aggregation as BoT so that only the credit assignment differs (our choice).
            ALGO_OVERRIDES=(
                algorithm.adv_estimator=grpo
                actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
                +reward.reward_kwargs.bot.token_level=false
            )
            ;;
        gspo)
            # GSPO: verl's `gspo` policy loss with the GSPO paper's clip ranges. verl implements the
            # GSPO-token ratio s_i,t = sg[s_i] * pi_t / sg[pi_t]: with GRPO's per-sequence advantages it
            # is GSPO; GSPO_TOKEN=1 pairs it with BoT's per-token advantages (the token-level variant).
            ALGO_OVERRIDES=(
                actor_rollout_ref.actor.policy_loss.loss_mode=gspo
                "actor_rollout_ref.actor.clip_ratio_low=${GSPO_CLIP_LOW}"
                "actor_rollout_ref.actor.clip_ratio_high=${GSPO_CLIP_HIGH}"
                actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
            )
            if [[ "${GSPO_TOKEN}" == 1 ]]; then
                ALGO_OVERRIDES+=(algorithm.adv_estimator=bot +reward.reward_kwargs.bot.token_level=true)
            else
                ALGO_OVERRIDES+=(algorithm.adv_estimator=grpo +reward.reward_kwargs.bot.token_level=false)
            fi
            ;;
        dapo)
            # DAPO, all in verl core: clip-higher, dynamic sampling (the v1 replay buffer drops groups
            # whose G is all equal and refills the batch), token-mean loss, no KL, overlong shaping
            # (verl's keys; the bot reward manager adds the penalty to G, as verl's `dapo` manager does).
            ALGO_OVERRIDES=(
                algorithm.adv_estimator=grpo
                "actor_rollout_ref.actor.clip_ratio_low=${DAPO_CLIP_LOW}"
                "actor_rollout_ref.actor.clip_ratio_high=${DAPO_CLIP_HIGH}"
                actor_rollout_ref.actor.loss_agg_mode=token-mean
                actor_rollout_ref.actor.use_kl_loss=False
                actor_rollout_ref.actor.kl_loss_coef=0.0
                algorithm.use_kl_in_reward=False
                algorithm.filter_groups.enable=True
                "algorithm.filter_groups.metric=${DAPO_FILTER_METRIC}"
                +reward.reward_kwargs.bot.token_level=false
                +reward.reward_kwargs.overlong_buffer_cfg.enable=True
                "+reward.reward_kwargs.overlong_buffer_cfg.len=${OVERLONG_BUFFER_LEN}"
                "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=${OVERLONG_PENALTY_FACTOR}"
                +reward.reward_kwargs.overlong_buffer_cfg.log=True
                "+reward.reward_kwargs.max_resp_len=${MAX_RESPONSE_LENGTH}"
            )
            ;;
        vps)
            # GRPO-VPS: GRPO on the scalar G plus alpha x the progress of the model's belief in the correct answer
            # per segment, probed on the rollout server by the vps_single_turn agent loop (`<final>` template).
            [[ "${TASK}" == react ]] && vb_die "ALGO=vps probes the model's belief in one correct answer" \
                "(reward_model.ground_truth); React prompts have no single correct answer: use it with the AIME recipes"
            ALGO_OVERRIDES=(
                algorithm.adv_estimator=vps
                actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
                +reward.reward_kwargs.bot.token_level=false
                actor_rollout_ref.rollout.agent.default_agent_loop=vps_single_turn
                "+algorithm.vps_alpha=${VPS_ALPHA}"
                "+algorithm.vps_max_cuts=${VPS_MAX_CUTS}"
                "+algorithm.vps_min_gap=${VPS_MIN_GAP}"
                "+algorithm.vps_cut_quantile=${VPS_CUT_QUANTILE}"
                "+algorithm.vps_space=${VPS_SPACE}"
                +algorithm.vps_template=final
            )
            ;;
        pure)
            # PURE: min-form credit over process rewards (verl-bot's `pure` estimator). It reads the bot
            # manager's reward streams (local S_t, step ends, solved), not the composed r_t.
            ALGO_OVERRIDES=(
                algorithm.adv_estimator=pure
                actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
                algorithm.use_kl_in_reward=False
                +reward.reward_kwargs.bot.token_level=true
                "+algorithm.pure_temperature=${PURE_TEMPERATURE}"
                "+algorithm.pure_outcome_coef=${PURE_OUTCOME_COEF}"
                "+algorithm.pure_step_scale=${PURE_STEP_SCALE}"
            )
            ;;
        pass)
            # PASS (verl-bot's reconstruction from the abstract): the bot manager's process (local S_t), outcome
            # (solved) and format streams, each standardized in its group, fused into per-token advantages.
            ALGO_OVERRIDES=(
                algorithm.adv_estimator=pass
                actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
                algorithm.use_kl_in_reward=False
                +reward.reward_kwargs.bot.token_level=true
                "+algorithm.pass_format_coef=${PASS_FORMAT_COEF}"
                "+algorithm.pass_process_coef=${PASS_PROCESS_COEF}"
                "+algorithm.pass_dead_zone=${PASS_DEAD_ZONE}"
                "+algorithm.pass_min_chunk=${PASS_MIN_CHUNK}"
                "+algorithm.pass_density=${PASS_DENSITY}"
                "+algorithm.pass_op=${PASS_OP}"
            )
            ;;
        reco)
            # ReCo: GRPO's advantage on G times response weights 1/(K pi_hat) (verl-bot's `reco` estimator)
            # and the Bernoulli-variance ratio as a token coefficient on verl's PPO loss (`reco` loss); the
            # same loss aggregation as grpo (our choice). RECO_MINI_BATCHES updates per step.
            ALGO_OVERRIDES=(
                algorithm.adv_estimator=reco
                actor_rollout_ref.actor.policy_loss.loss_mode=reco
                actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
                +reward.reward_kwargs.bot.token_level=false
                "+algorithm.reco_w_max=${RECO_W_MAX}"
                "+algorithm.reco_pi=${RECO_PI}"
            )
            ;;
        grail)
            # GRAIL (arXiv 2606.04889): GRPO's advantage times per-token weights from the saliency of the
            # final answer, computed in the actor update (verl-bot's hooks, FSDP2 engine only); the authors'
            # yaml values are the defaults of its knobs (+algorithm.grail_*=...). It needs one final answer
            # per response: AIME's <final>...</final>.
            [[ "${TASK}" == aime ]] || vb_die "ALGO=grail needs one final answer per response (AIME's <final>);" \
                "${TASK} responses have none"
            ALGO_OVERRIDES=(
                algorithm.adv_estimator=grail
                actor_rollout_ref.actor.strategy=fsdp2
                actor_rollout_ref.ref.strategy=fsdp2
                actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
                +reward.reward_kwargs.bot.token_level=false
            )
            ;;
        *)
            vb_die "ALGO must be one of bot, grpo, gspo, dapo, pure, pass, reco, vps, grail; got '${ALGO}'"
            ;;
    esac
}

# React: the prompt set ships with the repository, so the default data files are made when missing.
vb_prepare_data() {
    [[ "${TASK}" == react && "${TRAIN_FILES}" == "${DATA_DIR}/train.parquet" && "${VAL_FILES}" == "${DATA_DIR}/test.parquet" ]] || return 0
    [[ -f "${TRAIN_FILES}" && -f "${VAL_FILES}" ]] && return 0
    "${PY}" "${ROOT}/recipes/data/react.py" --out-dir "${DATA_DIR}" >&2 || vb_die "could not write the React data to ${DATA_DIR}"
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

vb_check_gpus() {
    command -v nvidia-smi >/dev/null || vb_die "no nvidia-smi: these recipes need NVIDIA GPUs (the CPU run is recipes/cpu_train.sh)"
    local n
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    [[ ${n} -ge ${NGPUS_PER_NODE} ]] || vb_die "NGPUS_PER_NODE=${NGPUS_PER_NODE} but this node has ${n} GPU(s)"
    "${PY}" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("vllm") is None)' ||
        vb_die "vllm is not installed in ${PY}: pip install -e '.[gpu]' (recipes/README.md)"
}

# --- reward server -----------------------------------------------------------------------------------
SERVER_PID=
vb_stop_server() {
    if [[ -n "${SERVER_PID}" ]] && kill -0 "${SERVER_PID}" 2>/dev/null; then
        kill "${SERVER_PID}" 2>/dev/null || true
        wait "${SERVER_PID}" 2>/dev/null || true
    fi
}

vb_start_server() {
    local url="http://${REWARD_HOST}:${REWARD_PORT}" log="${OUT_DIR}/reward_server.log" t0
    [[ -z "$(vb_health "${url}")" ]] || vb_die "START_SERVER=1 but a server already answers at ${url}: use REWARD_URL=${url}"
    mkdir -p "${OUT_DIR}"
    { set +x; } 2>/dev/null
    local key=${!JUDGE_API_KEY_ENV:-}
    (
        cd "${ROOT}" || exit 1
        if [[ "${TASK}" == react ]]; then
            export REACT_LLM_JUDGE_BASE_URL="${LLM_JUDGE_BASE_URL}" REACT_LLM_JUDGE_MODEL="${LLM_JUDGE_MODEL}"
            export REACT_VLM_JUDGE_BASE_URL="${VLM_JUDGE_BASE_URL}" REACT_VLM_JUDGE_MODEL="${VLM_JUDGE_MODEL}"
            [[ -z "${key}" ]] || export REACT_LLM_JUDGE_API_KEY="${key}" REACT_VLM_JUDGE_API_KEY="${key}"
        else
            export MATH_JUDGE_BASE_URL="${STEP_JUDGE_BASE_URL}" MATH_JUDGE_MODEL="${STEP_JUDGE_MODEL}"
            [[ -z "${key}" ]] || export MATH_JUDGE_API_KEY="${key}"
        fi
        local server_argv=()
        read -r -a server_argv <<<"${SERVER_ARGS}"
        exec "${PY}" -m "${SERVER_MODULE}" --host "${REWARD_HOST}" --port "${REWARD_PORT}" "${server_argv[@]}"
    ) >"${log}" 2>&1 &
    SERVER_PID=$!
    set -x
    trap vb_stop_server EXIT
    trap 'exit 130' INT TERM
    t0=${SECONDS}
    until [[ -n "$(vb_health "${url}")" ]]; do
        if ! kill -0 "${SERVER_PID}" 2>/dev/null; then
            tail -n 20 "${log}" >&2 || true
            vb_die "the ${SERVER_MODULE} server exited while starting (log: ${log})"
        fi
        if ((SECONDS - t0 > SERVER_START_TIMEOUT_S)); then
            tail -n 20 "${log}" >&2 || true
            vb_die "the ${SERVER_MODULE} server did not answer /health within ${SERVER_START_TIMEOUT_S}s (log: ${log})"
        fi
        sleep 2
    done
    REWARD_URL=${url}
}

# --- the command line --------------------------------------------------------------------------------
vb_overrides() {
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
        "trainer.default_local_dir=${OUT_DIR}/ckpt"
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
}

vb_main() {
    vb_check_python
    vb_algo_overrides
    vb_check_model
    vb_prepare_data
    vb_check_data
    if [[ "${DRY_RUN}" != 0 ]]; then
        REWARD_URL=${REWARD_URL:-http://${REWARD_HOST}:${REWARD_PORT}}
        vb_overrides
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
        if [[ "${REQUIRE_JUDGE}" == 1 && -z "${!JUDGE_VARS[0]}" ]]; then
            vb_die "START_SERVER=1 needs ${JUDGE_VARS[0]} (the ${JUDGE_WHAT}), or REQUIRE_JUDGE=0 to run without it"
        fi
    else
        REWARD_URL=${REWARD_URL:-http://${REWARD_HOST}:${REWARD_PORT}}
        vb_check_servers
    fi
    vb_check_gpus
    if [[ ${start_server} == 1 ]]; then
        vb_start_server
        vb_check_servers
    fi
    vb_overrides
    mkdir -p "${OUT_DIR}"
    export VERL_FILE_LOGGER_PATH="${OUT_DIR}/metrics.jsonl"
    "${PY}" -m verl.trainer.main_ppo "${OVERRIDES[@]}" "$@"
}
