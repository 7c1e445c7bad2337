"""Hook: `verl.experimental.agent_loop.agent_loop.AgentLoopOutput.as_dict` (dense rewards and streams).

verl's v1 agent loop stores each trajectory with `AgentLoopOutput.as_dict()`,
which builds `rm_scores` as zeros plus the scalar `reward_score` on the last
token. The wrapper: when `reward_score` is dense (a list, or the
`{"token_rewards", "streams"}` form of `verl_bot.credit.dense`), the row is that
vector, and each named stream becomes one more trajectory field
`bot_stream_<name>` (`verl_bot.credit.streams`). Everything else of the original
method runs unchanged; a scalar `reward_score` takes verl's own path untouched,
so every other reward manager behaves exactly as before.

A multi-output agent loop's outputs share one `reward_score` (verl copies the
last output's to the earlier ones): the manager's session form carries every
output's rewards by a fingerprint of its ids (`verl_bot.credit.sessions`), and
the wrapper takes this output's own. A missing fingerprint (ids changed after
scoring), or a vector or stream of the wrong length, is a configuration
error. Raising here would only tag the group "failure" and let training go on,
so the row gets zeros and its `reward_extra_info` (a copy: multi-output rows
share the dict) gets the `verl_bot.errors.FATAL_KEY` marker, which stops the
run at the next sample (`verl_bot.hooks.v1.replay_buffer`).

Each dense row also carries `DENSE_MARK`, the checksum of its token rewards, in its extra fields
(`verl_bot.training.rows`): the advantage step stops a run in which no row has it (a verl that stores trajectories
another way: one scalar per response) or a row's rewards no longer match it.
"""

from __future__ import annotations

import functools
from typing import Any

from verl_bot.credit.dense import is_dense
from verl_bot.hooks.wrap import wrap
from verl_bot.training.rows import DENSE_MARK, dense_fields


def _make_as_dict(original):
    @functools.wraps(original)
    def as_dict(self) -> dict[str, Any]:
        reward_score = self.reward_score
        if not is_dense(reward_score):
            return original(self)
        # Let verl build everything else, with the scalar path switched off for this call.
        self.reward_score = None
        try:
            output = original(self)
        finally:
            self.reward_score = reward_score
        ids = (self.prompt_ids, self.response_ids)
        fields = dense_fields(reward_score, output["response_mask"].numel(), output["extra_fields"], ids)
        mark = fields.pop(DENSE_MARK, None)
        output.update(fields)
        if mark is not None:
            output["extra_fields"] = {**output["extra_fields"], DENSE_MARK: mark}
        return output

    return as_dict


def install() -> list[str]:
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

    from verl_bot.hooks.compat import note

    found = "reward_score" in AgentLoopOutput.model_fields
    note("AgentLoopOutput.reward_score", "found" if found else "missing", "AgentLoopOutput has no 'reward_score' field")
    return [wrap(AgentLoopOutput, "as_dict", ["self"], _make_as_dict)]
