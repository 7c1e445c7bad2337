"""Hook: `verl.experimental.reward_loop.reward_loop.RewardLoopWorker.compute_score` (the `bot` manager scores
every rollout, also where verl serves a reward model).

verl 0.9.1's reward-loop worker sends a rollout to its reward manager only when `reward.custom_reward_function.path`
is set or no reward model is served; with `reward.reward_model.enable=true` and no custom function it scores the
rollout itself, one scalar from the served model's `/classify` endpoint (reward_loop.py:145-155, :231-270), and
the `bot` manager is never called. A verl-bot run with a served step PRM (`+reward.reward_kwargs.bot.prm.url=router`)
needs the manager: it takes G from the task's verifier and S from the PRM's `/pooling` rows, through the router
address verl hands it (`verl_bot.rewards.prm`).

The wrapper (reward-loop worker side): with the `bot` manager (`reward.reward_manager.name=bot`) it always calls
the manager's `run_single`; for every other run it calls verl's method unchanged. The start-up checks
(`verl_bot.launch.preflight`, `reward_model_problem`) admit a served reward model with the `bot` manager only in the
configuration where this path is taken and the model is awake: a separate reward pool, the vLLM engine,
`free_cache_engine=false` and `prm.url=router`.
"""

from __future__ import annotations

import functools

from verl_bot.hooks.wrap import wrap
from verl_bot.rewards.settings import bot_manager_in_use


def _make_wrapper(original):
    @functools.wraps(original)
    async def compute_score(self, data, *args, **kwargs):
        if bot_manager_in_use(self.config):
            return await self.reward_manager.run_single(data)
        return await original(self, data, *args, **kwargs)

    return compute_score


def install() -> str:
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    return wrap(RewardLoopWorker, "compute_score", ["self", "data"], _make_wrapper)
