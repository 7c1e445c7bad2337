# shellcheck shell=bash
# What every recipe runs (sourced with the recipe's name and its arguments): the recipe in Python, in this process,
# `python -m verl_bot.recipes NAME "$@"` (verl_bot/recipes/; docs/recipes.md). Its settings are environment variables;
# PY names the Python environment with verl (default: the repository's .venv).
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=${PY:-${ROOT}/.venv/bin/python}
if [[ ! -x "${PY}" ]]; then
    echo "recipe: no Python at PY=${PY}: run 'make setup' (or set PY to the environment with verl)" >&2
    exit 2
fi
export PY
exec "${PY}" -m verl_bot.recipes "$@"
