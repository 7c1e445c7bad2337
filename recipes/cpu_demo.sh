#!/usr/bin/env bash
# The README's main job: BoT-GRPO vs GRPO through verl 0.9.1's real PPO trainer on this CPU,
# then a report (reward over steps as PNG, rollouts coloured token by token as HTML).
#
#   bash recipes/cpu_demo.sh                 # or: make demo (sets up .venv first)
#   STEPS=40 ALGOS="bot" bash recipes/cpu_demo.sh trainer.total_epochs=2 ...
#
# Every setting below is an environment variable; extra Hydra overrides are passed to both runs.
# One run is recipes/cpu_train.sh (tiny model + toy_lint task; CPU overrides in verl_bot/cpu/overrides.txt).
set -xeuo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PY:-${ROOT}/.venv/bin/python}
DEMO_DIR=${DEMO_DIR:-${ROOT}/outputs/cpu_demo}
ALGOS=${ALGOS:-"bot grpo"}
export STEPS=${STEPS:-20}
export SEED=${SEED:-0}
export W_LOCAL=${W_LOCAL:-0.5}
export MODEL_DIR=${MODEL_DIR:-${ROOT}/outputs/tiny_model_s${SEED}}

RUNS=()
for algo in ${ALGOS}; do
    ALGO="${algo}" OUT_DIR="${DEMO_DIR}/${algo}" bash "${ROOT}/recipes/cpu_train.sh" "$@"
    RUNS+=(--run "${algo}=${DEMO_DIR}/${algo}")
done

"${PY}" -m verl_bot.eval.training_report "${RUNS[@]}" --tokenizer "${MODEL_DIR}" \
    --w-local "${W_LOCAL}" --out "${DEMO_DIR}/report"
