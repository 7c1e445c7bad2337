#!/usr/bin/env bash
# Idempotent setup (make setup; .ci/run and `make demo`/`make test` call it first):
#  - .venv at the repo root with verl-bot, its math + test extras and verl 0.9.1; on a machine
#    without a GPU the CPU build of torch 2.13.0 goes in first, so nothing can pull a CUDA build;
#  - Debian packages the tests use (shellcheck; chromium via the React server's setup);
#  - the React reward server's locked Node dependencies (reward_servers/react/setup.sh).
#  pip's and apt's own output goes to outputs/setup.log (printed only when a step fails).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
PIP=(.venv/bin/python -m pip install -q --disable-pip-version-check)
mkdir -p outputs
LOG=outputs/setup.log
: > "${LOG}"

# run a step with its output in the log; on failure show the log's end and stop
logged() {
    if ! "$@" >> "${LOG}" 2>&1; then
        tail -n 40 "${LOG}" >&2
        echo "setup: '$*' failed (full output: ${LOG})" >&2
        exit 1
    fi
}

if [[ ! -x .venv/bin/python ]]; then
    "${PY}" -m venv .venv
fi
if ! .venv/bin/python -c 'import torch' 2>/dev/null; then
    if command -v nvidia-smi >/dev/null 2>&1; then
        logged "${PIP[@]}" torch
    else
        logged "${PIP[@]}" torch==2.13.0
    fi
fi
logged "${PIP[@]}" -e ".[test]"

if ! command -v shellcheck >/dev/null 2>&1; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        logged apt-get update -qq
        DEBIAN_FRONTEND=noninteractive logged apt-get install -y -qq shellcheck
    else
        echo "setup: shellcheck missing (apt-get install shellcheck)" >&2
        exit 1
    fi
fi
if [[ -f reward_servers/react/setup.sh ]]; then
    logged bash reward_servers/react/setup.sh
    tail -n 1 "${LOG}"
fi
# importing verl prints its start-up notes (optional engines, no accelerator): shown only when the import fails
if ! check=$(.venv/bin/python -c 'import verl, verl_bot; print("setup ok: verl", verl.__version__, "verl-bot", verl_bot.__version__)' 2>&1); then
    echo "${check}" >&2
    echo "setup: verl or verl-bot does not import (see above)" >&2
    exit 1
fi
echo "${check##*$'\n'}"
