# shellcheck shell=bash
# Where a GPU run goes on its node (recipes/README.md, "Node plan"): the node plan and its checks (vb_plan_node, through
# the light command verl_bot/launch/node_plan.py), the address a reward server started here listens on
# (vb_reward_host), and the checkpoint folder outside the repository that OUT_DIR/ckpt links to (vb_link_ckpt).

# The node plan (verl_bot/launch/node_plan.py) of a GPU run: NGPUS_PER_NODE and TRAIN_GPUS for the trainer, the GPUs of each
# judge started here, NODE_PLAN (one line, printed); `vb_plan_node check` (a launch) also checks each GPU's free
# memory, the GPUs serving the judges given by URL, the checkpoint disk and, with NNODES > 1, the addresses. One
# "recipe:" line and exit 2 when the run cannot go.
vb_plan_node() {
    local full_batch=${FULL_TRAIN_BATCH_SIZE:-${TRAIN_BATCH_SIZE}} args i var out rc=0 key value
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
