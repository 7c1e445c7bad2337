"""Hook: `verl.experimental.reward_loop.reward_loop.RewardLoopWorker.compute_score` (the `bot` manager scores
every rollout, also where verl serves a reward model).

verl 0.9.1's reward-loop worker sends a rollout to its reward manager only when `reward.custom_reward_function.path`
is set or no reward model is served; otherwise it scores the rollout itself, one scalar from the served model's
`/classify` endpoint (reward_loop.py:145-155, :231-270), and the `bot` manager is never called. With the `bot`
manager the wrapper always calls the manager's `run_single` (G from the task's verifier, S from the served step
PRM); every other run gets verl's method unchanged. The one configuration the start-up checks admit:
docs/prm.md, section Through verl's reward-model path.
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
