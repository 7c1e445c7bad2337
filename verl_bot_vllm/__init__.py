"""vLLM's `vllm.general_plugins` entry point of verl-bot: inert unless verl-bot's CPU backend runs vLLM.

vLLM loads every `vllm.general_plugins` entry point in each of its processes (the API/engine front end,
the engine core, every worker), also in a `vllm serve` that has nothing to do with verl. So this package
imports nothing (not verl, not verl_bot) unless the run selected verl-bot's CPU platform
(`VERL_PLATFORM=cpu`, inherited by vLLM's processes from the verl worker that starts them) and vLLM itself
runs on its CPU platform; then it applies the vLLM patches of `verl_bot.hooks.vllm_cpu`.
"""

from __future__ import annotations

import os


def register() -> None:
    """Entry point (`vllm.general_plugins`); vLLM may call it several times per process (idempotent)."""
    if os.environ.get("VERL_PLATFORM", "").strip().lower() != "cpu":
        return
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    from verl_bot.hooks import vllm_cpu

    vllm_cpu.install()
