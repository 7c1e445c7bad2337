"""Hook: `verl.experimental.agent_loop.agent_loop.AgentLoopWorker._compute_score` (the response mask to the scorer).

verl scores a rollout in its agent-loop worker by sending the reward worker the prompt and response ids and
`tool_extra_fields` (each output's `extra_fields`), but not `response_mask`: a multi-turn response (verl's
`ToolAgentLoop`) interleaves generated tokens (mask 1) with tool replies and role headers (mask 0), and the `bot`
manager cannot tell them apart without it. The wrapper puts each output's mask into its `extra_fields` under
`MASK_KEY` for the call (so it travels in `tool_extra_fields`), and takes it out again afterwards: it never
reaches TransferQueue or the trainer. `verl_bot.rewards.manager` reads it (`verl_bot.credit.turns`).

Only for a run whose reward manager is `bot` (any other run: verl's method, unchanged). Installed with
`rollout_failure`, before verl's v1 agent loop makes its Ray actor class of `AgentLoopWorker`.
"""

from __future__ import annotations

import functools

from verl_bot.credit.turns import MASK_KEY
from verl_bot.hooks.wrap import wrap
from verl_bot.rewards.settings import bot_manager_in_use


def _make_wrapper(original):
    @functools.wraps(original)
    async def _compute_score(self, outputs, kwargs, *args, **kw):
        if not bot_manager_in_use(self.config):
            return await original(self, outputs, kwargs, *args, **kw)
        for output in outputs:
            output.extra_fields[MASK_KEY] = [int(v) for v in output.response_mask]
        try:
            return await original(self, outputs, kwargs, *args, **kw)
        finally:
            for output in outputs:
                output.extra_fields.pop(MASK_KEY, None)

    return _compute_score


def install() -> list[str]:
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    return [wrap(AgentLoopWorker, "_compute_score", ["self", "outputs", "kwargs"], _make_wrapper)]
