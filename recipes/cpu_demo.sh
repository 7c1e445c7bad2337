#!/usr/bin/env bash
# The README's main job (`make demo`, docs/cpu_demo.md): BoT-GRPO vs GRPO through verl 0.9.1's real PPO trainer
# on this CPU, then a report (reward over steps as PNG, the token credit of the last step as HTML).
#
#   bash recipes/cpu_demo.sh                 # or: make demo (sets up .venv first)
#   STEPS=40 ALGOS="bot" bash recipes/cpu_demo.sh trainer.total_epochs=2 ...
#   VERBOSE=1 bash recipes/cpu_demo.sh       # verl's full output on the terminal too
#
# The terminal shows each run's progress (a bar, one line per step: G, solved rate, step time, ETA) and
# the report's paths; verl's full output goes to ${DEMO_DIR}/demo.log (verl_bot/cpu/console.py).
# Every setting below is an environment variable; extra Hydra overrides are passed to both runs.
# One run is recipes/cpu_train.sh (tiny model + toy_lint task; CPU overrides in verl_bot/cpu/overrides.txt).
set -euo pipefail
VERBOSE=${VERBOSE:-0}
[[ "${VERBOSE}" == 1 ]] && set -x

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PY:-${ROOT}/.venv/bin/python}
DEMO_DIR=${DEMO_DIR:-${ROOT}/outputs/cpu_demo}
LOG=${LOG:-${DEMO_DIR}/demo.log}
ALGOS=${ALGOS:-"bot grpo"}
REPORT_STEPS=${REPORT_STEPS:-"1,-1"}   # steps whose tokens the report can show (-1 = the last)
REPORT_GROUPS=${REPORT_GROUPS:-4}      # prompts recorded per step (all their rollouts)
export STEPS=${STEPS:-20}
export SEED=${SEED:-0}
export W_LOCAL=${W_LOCAL:-0.5}
export MODEL_DIR=${MODEL_DIR:-${ROOT}/outputs/tiny_model_s${SEED}}

describe() {
    case "$1" in
        bot) echo "BoT-GRPO, dense token rewards r_t = G + ${W_LOCAL} * S_t" ;;
        grpo) echo "verl's GRPO on the global score G only" ;;
        pure) echo "PURE on the reward streams" ;;
        *) echo "$1" ;;
    esac
}

source "${ROOT}/recipes/signals.sh"   # vb_run_trainer

mkdir -p "${DEMO_DIR}"
: > "${LOG}"
read -r -a algos <<< "${ALGOS}"
echo "verl-bot CPU demo: ${ALGOS// / vs } on toy_lint, ${STEPS} steps each (seed ${SEED}), verl's real trainer"
echo "full output: ${LOG}$([[ "${VERBOSE}" == 1 ]] || echo " (VERBOSE=1 shows it here)")"
CONSOLE_FLAGS=()
[[ "${VERBOSE}" == 1 ]] && CONSOLE_FLAGS+=(--verbose)
RUNS=()
for i in "${!algos[@]}"; do
    algo=${algos[$i]}
    # a stop of this script (SIGTERM, SIGINT, SIGHUP) reaches the console, which stops the trainer
    ALGO="${algo}" OUT_DIR="${DEMO_DIR}/${algo}" vb_run_trainer "${PY}" -m verl_bot.cpu.console "${CONSOLE_FLAGS[@]}" \
        --log "${LOG}" --metrics "${DEMO_DIR}/${algo}/metrics.jsonl" --steps "${STEPS}" \
        --title "[$((i + 1))/${#algos[@]}] ${algo}: $(describe "${algo}")" -- \
        bash "${ROOT}/recipes/cpu_train.sh" \
        "+algorithm.token_report_steps=[${REPORT_STEPS}]" "+algorithm.token_report_groups=${REPORT_GROUPS}" \
        "+algorithm.token_report_dir=${DEMO_DIR}/${algo}/token_records" "$@"
    RUNS+=(--run "${algo}=${DEMO_DIR}/${algo}")
done

"${PY}" -m verl_bot.eval.training_report "${RUNS[@]}" --groups "${REPORT_GROUPS}" --out "${DEMO_DIR}/report" \
    2>> "${LOG}"
