#!/usr/bin/env bash
# React single-file components on Qwen2.5-3B-Instruct: BoT-GRPO and the paper's baselines
# (arXiv 2610.09804, Fig. 1-4: compile rate and VLM win rate on the held-out prompts).
#
#   START_SERVER=1 ALGO=bot bash recipes/react_qwen.sh   # the judge on GPUs 4-7 and the React server started here
#   REWARD_URL=http://rw1:8801,http://rw2:8801 ALGO=grpo bash recipes/react_qwen.sh trainer.total_training_steps=50
#   SMOKE=1 ALGO=bot bash recipes/react_qwen.sh          # 2 steps, then a verdict (on a machine without GPU: the CPU)
#   DRY_RUN=1 ALGO=dapo bash recipes/react_qwen.sh       # print the composed verl config, exit
#
# ALGO, every setting (environment variables), the checks and the services: docs/recipes.md. Extra Hydra
# overrides go last and win. The recipe itself: verl_bot/recipes/ (tables.py, its task and model).
set -euo pipefail
# shellcheck source=recipes/lib/run.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/run.sh" react_qwen "$@"
