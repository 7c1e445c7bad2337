"""verl's reward-model path (`reward.reward_model.enable=true`) with the `bot` manager: which configurations work.

Of verl 0.9.1's two ways to serve a reward model, the `bot` manager can use only the separate reward pool
(`enable_resource_pool=true`): there every rollout is scored in the agent loop with its `data_source` and ground
truth, and `verl_bot.hooks.reward_model_path` sends it to the manager, which takes G from the task's verifier and
S from the served step PRM (`prm.url=router`, `verl_bot.rewards.prm`) or lets a GenRM-style custom function call
the router. `reward_model_problem(config)` names the first configuration that cannot work, in one line
(`verl_bot.launch.preflight` raises it before Ray starts). Each refused setting and why: docs/prm.md, section
Through verl's reward-model path.
"""

from __future__ import annotations

from typing import Any

from verl_bot.rewards.prm import ROUTER


def reward_model_problem(config: Any) -> str | None:
    """Why the `bot` manager cannot run with this run's served reward model (one line), or None (none served, or
    one it can use)."""
    reward = config.get("reward") or {}
    reward_model = reward.get("reward_model") or {}
    if not reward_model.get("enable", False):
        return None
    prm = ((reward.get("reward_kwargs") or {}).get("bot") or {}).get("prm") or {}
    uses_prm = prm.get("url") == ROUTER
    if not uses_prm and not (reward.get("custom_reward_function") or {}).get("path"):
        return (
            "reward.reward_model.enable=true with the bot manager needs +reward.reward_kwargs.bot.prm.url=router "
            "(the served model as a step PRM) or a reward.custom_reward_function that calls it "
            "(reward_router_address); verl's own scoring with the model would bypass the bot manager"
        )
    if not reward_model.get("enable_resource_pool", False):
        return (
            "set reward.reward_model.enable_resource_pool=true: the colocated reward model is scored after sampling "
            "with no data_source or ground truth, so the bot manager has no verifier for G"
        )
    rollout = reward_model.get("rollout") or {}
    if uses_prm and rollout.get("name") != "vllm":
        return (
            f"prm.url=router needs reward.reward_model.rollout.name=vllm (the PRM's step scores come from vLLM's "
            f"/pooling API), got {rollout.get('name')}"
        )
    if rollout.get("free_cache_engine", True):
        return (
            "set reward.reward_model.rollout.free_cache_engine=false: the reward pool's engine sleeps from start-up "
            "and nothing wakes it on the bot manager's path"
        )
    if str(config.trainer.get("device", "cuda")) == "cpu" and rollout.get("enable_sleep_mode", True):
        return (
            "set +reward.reward_model.rollout.enable_sleep_mode=false on the CPU: vLLM's CPU platform has no sleep "
            "mode, and the reward pool's engine would fail after Ray started"
        )
    return None
