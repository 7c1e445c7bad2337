#!/usr/bin/env bash
# AIME on Phi-4-mini-reasoning: BoT-GRPO and the paper's baselines (arXiv 2610.09804, Fig. 6: Pass@k
# over training; reward Eq. 8: 3*correct + 0.5*(1/|S|)*e_s per step + format bonus).
#
#   python recipes/data/aime.py --out-dir ~/data/verl_bot/aime   # once: AIME 1983-2024 from the HF hub
#   START_SERVER=1 ALGO=bot bash recipes/aime_phi.sh   # the step judge on GPUs 4-7 and the math server started here
#   REWARD_URL=http://127.0.0.1:8802 ALGO=grpo bash recipes/aime_phi.sh    # GRPO needs no step judge
#   DRY_RUN=1 ALGO=gspo bash recipes/aime_phi.sh       # print the composed verl config, exit
#   PRM_MODEL_PATH=Qwen/Qwen2.5-Math-PRM-7B START_SERVER=1 bash recipes/aime_phi.sh  # S: a step PRM (docs/prm.md)
#
# ALGO, every setting (environment variables), the checks and the services: docs/recipes.md. Extra Hydra
# overrides go last and win. The recipe itself: verl_bot/recipes/ (tables.py, its task and model).
set -euo pipefail
# shellcheck source=recipes/lib/run.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/run.sh" aime_phi "$@"
