#!/usr/bin/env bash
# The README's main job (`make demo`, docs/cpu_demo.md): BoT-GRPO vs GRPO through verl 0.9.1's real PPO trainer
# on this CPU, then a report (reward over steps as PNG, the token credit of the last step as HTML).
#
#   bash recipes/cpu_demo.sh                 # or: make demo (sets up .venv first)
#   STEPS=40 ALGOS="bot" bash recipes/cpu_demo.sh trainer.total_epochs=2 ...
#   VERBOSE=1 bash recipes/cpu_demo.sh       # verl's full output on the terminal too
#
# The terminal shows each run's progress (a bar, one line per step: G, solved rate, step time, ETA) and the report's
# paths; verl's full output goes to ${DEMO_DIR}/demo.log (verl_bot_demo/console.py). Each run is recipes/cpu_train.sh
# on toy_lint; extra Hydra overrides go to both runs (verl_bot/recipes/demo.py).
set -euo pipefail
# shellcheck source=recipes/lib/run.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/run.sh" cpu_demo "$@"
