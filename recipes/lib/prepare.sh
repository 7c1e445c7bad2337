# shellcheck shell=bash
# What the recipes make before a launch when it is missing (called by vb_main, recipes/lib/launch.sh): the data files
# (React's, from the prompt set the repository ships; on the CPU platform AIME's too), the CPU platform's tiny policy
# and judge models, and the LongRoPE copy of a model whose short and long factors differ (Phi-4-mini-reasoning).

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
