#!/usr/bin/env bash
# One run of verl 0.9.1's real PPO trainer on a CPU-only machine: a tiny model (built locally, no hub) learns a CPU
# task with one of the ALGOs, each set as the paper recipes set it (verl_bot/recipes/cpu_train.py):
#
#   TASK=toy_lint (default; toy_math for ALGO=vps and grail, which need answers): a global score plus penalties on
#       spans of the response (the shape of the React reward's ESLint part); a randomly initialised model.
#   TASK=toy_math: integer arithmetic chains in the AIME step format, scored like AIME; a warm-started model.
#   TASK=toy_calc: the same problems solved with a calculator tool over two turns (verl's ToolAgentLoop).
#   TASK=toy_turns: the same tool, but the model chooses how many turns it takes (up to 4).
#
#   ALGO=bot STEPS=30 bash recipes/cpu_train.sh [hydra.override=value ...]
#   TASK=toy_math ALGO=bot STEPS=40 bash recipes/cpu_train.sh
#
# ALGO=bot|grpo|gspo|dapo|pure|pass|reco|vps|grail; ROLLOUT=vllm|hf; the settings: docs/recipes.md ("The CPU run").
# The CPU-only overrides live in verl_bot/cpu/overrides.txt. Extra overrides go last and win.
set -euo pipefail
# shellcheck source=recipes/lib/run.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/run.sh" cpu_train "$@"
