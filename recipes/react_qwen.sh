#!/usr/bin/env bash
# React single-file components on Qwen2.5-3B-Instruct: BoT-GRPO and the paper's baselines
# (arXiv 2610.09804, Fig. 1-4: compile rate and VLM win rate on the held-out prompts).
#
#   START_SERVER=1 ALGO=bot bash recipes/react_qwen.sh   # the judge on GPUs 4-7 and the React server started here
#   REWARD_URL=http://rw1:8801,http://rw2:8801 ALGO=grpo bash recipes/react_qwen.sh trainer.total_training_steps=50
#   DRY_RUN=1 ALGO=dapo bash recipes/react_qwen.sh        # print the composed verl config, exit
#
# ALGO=bot|grpo|gspo|dapo|pure|pass|reco: recipes/algos.sh; the shared settings and checks: recipes/common.sh.
# Hardware: 1 node x 8 GPUs (80 GB), planned by the recipe (recipes/README.md, "Node plan"); vLLM rollout.
set -xeuo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TASK=react
MODEL_TAG=qwen
# shellcheck source=recipes/platform.sh
source "${ROOT}/recipes/platform.sh"   # PLATFORM=cpu / SMOKE=1 on a machine without a GPU: CPU presets first
ALGO=${ALGO:-bot}
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-3B-Instruct}     # local dir or HF id; Instruct: our choice (paper: Qwen2.5-3B)
DATA_DIR=${DATA_DIR:-${HOME}/data/verl_bot/react}      # made from recipes/data/react_prompts.jsonl when missing
TRAIN_FILES=${TRAIN_FILES:-${DATA_DIR}/train.parquet}
VAL_FILES=${VAL_FILES:-${DATA_DIR}/test.parquet}       # the fixed held-out split
NNODES=${NNODES:-1}
NGPUS_PER_NODE=${NGPUS_PER_NODE:-}                     # trainer GPUs a node (empty: the node plan, recipes/README.md)
REWARD_URL=${REWARD_URL:-}                             # React server(s), comma-separated; empty: START_SERVER=1 or :8801
START_SERVER=${START_SERVER:-0}
LLM_JUDGE_BASE_URL=${LLM_JUDGE_BASE_URL:-}             # code judge incl. /v1 (REQUIRE_JUDGE=1); empty: started here
LLM_JUDGE_MODEL=${LLM_JUDGE_MODEL:-}                   # empty: the first model the endpoint lists
VLM_JUDGE_BASE_URL=${VLM_JUDGE_BASE_URL:-}             # optional screenshot judge (the paper's local VLM variant)
VLM_JUDGE_MODEL=${VLM_JUDGE_MODEL:-}
JUDGE_API_KEY_ENV=${JUDGE_API_KEY_ENV:-OPENAI_API_KEY} # name of the variable holding the judges' API key
LR=${LR:-5e-7}                                         # paper
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-16}               # prompts per step: our choice (not stated for React)
ROLLOUT_N=${ROLLOUT_N:-8}                              # rollouts per prompt: our choice (the paper's AIME value)
MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-1024}           # our choice: the longest prompt is 626 characters
MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-3072}       # our choice: a component is ~100-250 lines
TOTAL_STEPS=${TOTAL_STEPS:-150}                        # our choice (paper: BoT passes 80% compile by step ~40)
W_LOCAL=${W_LOCAL:-0.5}                                # w_s: our choice (open in the paper); w_g = 1
MODEL_OVERRIDES=()

# shellcheck source=recipes/common.sh
source "${ROOT}/recipes/common.sh"
vb_main "$@"
