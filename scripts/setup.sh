#!/usr/bin/env bash
# Idempotent setup: creates .venv at the repo root and installs verl-bot with
# its test extra. On a machine without a GPU the CPU build of torch 2.13.0 is
# installed first, so no dependency can pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
"$VPY" -m pip install -q --upgrade pip
if ! "$VPY" -c 'import torch' 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    "$VPY" -m pip install -q torch
  else
    "$VPY" -m pip install -q torch==2.13.0
  fi
fi
"$VPY" -m pip install -q -e ".[test]"
"$VPY" -c 'import verl, verl_bot; print("setup ok: verl", verl.__version__)'
