# shellcheck shell=bash
# Source me: defines the bash array CPU_OVERRIDES, the Hydra overrides of a CPU-only verl run,
# read from their one source of truth, verl_bot/cpu/overrides.txt (explained there), and exports
# VERL_PLATFORM=cpu, which selects verl-bot's CPU platform (see verl_bot/cpu/__init__.py).
#
#   source recipes/cpu_overrides.sh
#   python -m verl.trainer.main_ppo "${CPU_OVERRIDES[@]}" your.override=value ... "$@"
_vb_cpu_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CPU_OVERRIDES_FILE="${CPU_OVERRIDES_FILE:-${_vb_cpu_root}/verl_bot/cpu/overrides.txt}"
CPU_OVERRIDES=()
while IFS= read -r _vb_line || [[ -n "${_vb_line}" ]]; do
    [[ "${_vb_line}" =~ ^[[:space:]]*# ]] && continue
    _vb_line="${_vb_line%% #*}"
    _vb_line="${_vb_line#"${_vb_line%%[![:space:]]*}"}"
    _vb_line="${_vb_line%"${_vb_line##*[![:space:]]}"}"
    [[ -z "${_vb_line}" ]] && continue
    CPU_OVERRIDES+=("${_vb_line}")
done < "${CPU_OVERRIDES_FILE}"
unset _vb_line _vb_cpu_root
export VERL_PLATFORM=cpu
# Ray needs CUDA_VISIBLE_DEVICES unset, not empty, to hand out logical GPUs.
if [[ -n "${CUDA_VISIBLE_DEVICES+x}" && -z "${CUDA_VISIBLE_DEVICES}" ]]; then unset CUDA_VISIBLE_DEVICES; fi
