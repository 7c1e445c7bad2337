# shellcheck shell=bash
# Sourced by recipes/{react,aime}_{qwen,smollm,phi}.sh: what the paper's recipes have in common.
#
# A recipe sets TASK (react|aime), MODEL_TAG and its ${VAR:-default} settings block, an array
# MODEL_OVERRIDES (model-specific Hydra overrides), sources this file, then calls `vb_main "$@"`.
# Everything below is a ${VAR:-default} too: any of it can be set in the environment.
#
#   ALGO=bot|grpo|gspo|dapo|pure|pass|reco|vps|grail   the algorithm (recipes/README.md: what each one sets; vps, grail: AIME only)
#   DRY_RUN=1      print the fully composed verl config (main_ppo --cfg job) and exit; needs no data,
#                  reward server, judge or GPU: a missing data file or model directory is one "recipe:"
#                  line on stderr (a real launch stops there), the server/judge/GPU checks are skipped
#   DRY_RUN=args   print the command line (one argument a line) and exit, without starting Python
#                  (tests compose these in one process); same checks as DRY_RUN=1
#   START_SERVER=1 no REWARD_URL given: start the task's reward server here (stopped on exit)
#   SMOKE=1        2 steps at a small batch (SMOKE_BATCH prompts, validation on SMOKE_VAL_SAMPLES held-out
#                  prompts before the first and after the last step, a checkpoint at step 2, the token records of
#                  step 1), the reward server started here unless REWARD_URL is set, then one verdict block
#                  (python -m verl_bot.launch.smoke): what a GPU user runs in the first ten minutes on a node; on a
#                  machine without a GPU the same command runs on the CPU platform. Output: OUT_DIR=..._smoke.
#                  SMOKE_STEPS=N: N steps instead of 2 (the last one checkpointed); the same command with a larger N
#                  resumes from that checkpoint and trains on.
#   PLATFORM=cpu, START_JUDGE=1: recipes/platform.sh (sourced by the recipe before its settings)
#   PRM_MODEL_PATH=PRM / PRM_URL=http://HOST:PORT   (AIME, ALGO=bot|pure|pass) S from a step PRM (docs/prm.md): served
#                  here with `vllm serve PRM --runner pooling` (on PRM_GPUS of the node plan; stopped on exit), or the
#                  server at PRM_URL (PRM_MODEL: its served name); the step judge is then not required
#
# On a GPU node the recipe owns the node: the node plan (vb_plan_node, verl_bot/launch/node_plan.py) gives the trainer the
# most GPUs its batch splits over evenly (NGPUS_PER_NODE, TRAIN_GPUS), the judges it starts the rest (JUDGE_GPUS,
# VLM_JUDGE_GPUS), and checks, before anything starts, each GPU's free memory, the GPUs of judges given by URL, the
# checkpoint disk (KEEP_CKPTS checkpoints in CKPT_DIR, outside the repository) and, with NNODES > 1, the addresses.
#
# Every pre-launch check that fails prints ONE line starting with "recipe:" and exits 2 (DRY_RUN: missing
# inputs only say so, see vb_missing).

: "${ROOT:?set ROOT (the repository root) before sourcing recipes/common.sh}"
: "${TASK:?set TASK (react|aime) before sourcing recipes/common.sh}"
: "${MODEL_TAG:?set MODEL_TAG before sourcing recipes/common.sh}"

# The parts, one concern a file (recipes/README.md, "Files"), sourced in this order:
#   recipes/lib/settings.sh   the shared ${VAR:-default} settings after the recipe's own: SMOKE=1's presets, the task
#                             table (react | aime), the judges started here, the step PRM's settings
#   recipes/algos.sh          what each ALGO sets (ALGO_OVERRIDES; shared with recipes/cpu_train.sh)
#   recipes/signals.sh        how the trainer runs (vb_run_trainer: a stop of the script stops it)
#   recipes/lib/checks.sh     the pre-launch checks and their one-line refusal (vb_die, vb_missing)
#   recipes/lib/prepare.sh    what is made when missing: data, the CPU platform's tiny models, the LongRoPE copy
#   recipes/lib/node.sh       the node plan (vb_plan_node), the reward server's address, the checkpoint folder
#   recipes/lib/services.sh   the reward server, judges and PRM started here (vllm serve), stopped on exit
#   recipes/lib/compose.sh    verl's command line (vb_overrides)
#   recipes/lib/launch.sh     vb_main: the checks, DRY_RUN, the services, the trainer, SMOKE=1's verdict, in order

# shellcheck source=recipes/lib/settings.sh
source "${ROOT}/recipes/lib/settings.sh"
# shellcheck source=recipes/algos.sh
source "${ROOT}/recipes/algos.sh"   # the ALGO overrides and knobs (shared with recipes/cpu_train.sh)
source "${ROOT}/recipes/signals.sh"  # vb_run_trainer, vb_fresh_metrics
# shellcheck source=recipes/lib/checks.sh
source "${ROOT}/recipes/lib/checks.sh"
# shellcheck source=recipes/lib/prepare.sh
source "${ROOT}/recipes/lib/prepare.sh"
# shellcheck source=recipes/lib/node.sh
source "${ROOT}/recipes/lib/node.sh"
# shellcheck source=recipes/lib/services.sh
source "${ROOT}/recipes/lib/services.sh"
# shellcheck source=recipes/lib/compose.sh
source "${ROOT}/recipes/lib/compose.sh"
# shellcheck source=recipes/lib/launch.sh
source "${ROOT}/recipes/lib/launch.sh"
