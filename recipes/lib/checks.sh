# shellcheck shell=bash
# The recipes' pre-launch checks (called by vb_main, recipes/lib/launch.sh), and how a check refuses: ONE line
# starting with "recipe:" on stderr and exit 2 (vb_die); a missing input (data file, model directory) is such a line
# for a launch, and a note that goes on for a DRY_RUN (vb_missing). Python and vLLM, the model, the data files (verl's
# list syntax: vb_files), the judges and reward servers given by URL (their /health), the step PRM, the platform.

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

# TRAIN_FILES / VAL_FILES: one path, or several as [a,b] or a,b (verl's list syntax).
vb_files() {
    local spec=$1
    spec=${spec#[}
    spec=${spec%]}
    tr ',' '\n' <<<"${spec}" | sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' -e '/^$/d'
}

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
