#!/usr/bin/env bash
# AIME on Qwen2.5-3B-Instruct: BoT-GRPO and the paper's baselines (arXiv 2610.09804, Fig. 5: Pass@k
# over training; reward Eq. 8: 3*correct + 0.5*(1/|S|)*e_s per step + format bonus).
#
#   python recipes/data/aime.py --out-dir ~/data/verl_bot/aime   # once: AIME 1983-2024 from the HF hub
#   START_SERVER=1 ALGO=bot bash recipes/aime_qwen.sh   # the step judge on GPUs 4-7 and the math server started here
#   REWARD_URL=http://127.0.0.1:8802 ALGO=grpo bash recipes/aime_qwen.sh    # GRPO needs no step judge
#   DRY_RUN=1 ALGO=gspo bash recipes/aime_qwen.sh         # print the composed verl config, exit
#   PRM_MODEL_PATH=Qwen/Qwen2.5-Math-PRM-7B START_SERVER=1 bash recipes/aime_qwen.sh  # S: a step PRM (docs/prm.md)
#
# ALGO=bot|grpo|gspo|dapo|pure|pass|reco|vps|grail: recipes/algos.sh; the shared settings and checks: recipes/common.sh.
# Hardware: 1 node x 8 GPUs (80 GB), planned by the recipe (recipes/README.md, "Node plan"); vLLM rollout.
set -xeuo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TASK=aime
MODEL_TAG=qwen
# shellcheck source=recipes/platform.sh
source "${ROOT}/recipes/platform.sh"   # PLATFORM=cpu / SMOKE=1 on a machine without a GPU: CPU presets first
ALGO=${ALGO:-bot}
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-3B-Instruct}     # local dir or HF id; Instruct: our choice (paper: Qwen2.5-3B)
DATA_DIR=${DATA_DIR:-${HOME}/data/verl_bot/aime}       # recipes/data/aime.py: AIME 1983-2024, 80/20 split (paper)
TRAIN_FILES=${TRAIN_FILES:-${DATA_DIR}/train.parquet}
VAL_FILES=${VAL_FILES:-${DATA_DIR}/test.parquet}
NNODES=${NNODES:-1}
NGPUS_PER_NODE=${NGPUS_PER_NODE:-}                     # trainer GPUs a node (empty: the node plan, recipes/README.md)
REWARD_URL=${REWARD_URL:-}                             # math server(s), comma-separated; empty: START_SERVER=1 or :8802
START_SERVER=${START_SERVER:-0}
STEP_JUDGE_BASE_URL=${STEP_JUDGE_BASE_URL:-}           # step judge incl. /v1 (bot, pure, pass); empty: started here
STEP_JUDGE_MODEL=${STEP_JUDGE_MODEL:-}                 # empty: the first model the endpoint lists
JUDGE_API_KEY_ENV=${JUDGE_API_KEY_ENV:-OPENAI_API_KEY} # name of the variable holding the judge's API key
PRM_MODEL_PATH=${PRM_MODEL_PATH:-}                     # a step PRM for S instead of the step judge (bot, pure,
PRM_URL=${PRM_URL:-}                                   # pass; docs/prm.md): served here, or a server already up
LR=${LR:-5e-7}                                         # paper
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-8}                # paper: 8 prompts x 8 rollouts = 64
ROLLOUT_N=${ROLLOUT_N:-8}                              # paper
MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-1024}           # our choice: 267 characters of instructions + the problem
MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-4096}       # our choice
TOTAL_STEPS=${TOTAL_STEPS:-200}                        # our choice (~2 epochs of the 80% train split)
W_LOCAL=${W_LOCAL:-1.0}                                # w_s; the server already weighs steps by 0.5/|S| (Eq. 8)
VAL_N=${VAL_N:-4}                                      # samples per held-out problem: Pass@1/2/4 (paper's k)
MODEL_OVERRIDES=()

# shellcheck source=recipes/common.sh
source "${ROOT}/recipes/common.sh"
vb_main "$@"
