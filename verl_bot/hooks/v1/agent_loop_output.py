"""Hook: `verl.experimental.agent_loop.agent_loop.AgentLoopOutput.as_dict` (dense rewards and streams).

verl's v1 agent loop stores each trajectory with `AgentLoopOutput.as_dict()`. When `reward_score` is dense (the `bot`
manager's forms, `verl_bot.credit.dense`), the wrapper makes it the trajectory's `rm_scores` row, with its named
streams and its checksum (`verl_bot.training.rows`); a scalar `reward_score` takes verl's own path untouched, so
every other reward manager behaves exactly as before. The data flow: docs/architecture.md, section Dense plumbing.
"""

from __future__ import annotations

import functools
from typing import Any

from verl_bot.credit.dense import is_dense
from verl_bot.hooks.wrap import wrap
from verl_bot.training.rows import DENSE_MARK, dense_fields


def _make_as_dict(original):
    """verl builds `rm_scores` as zeros plus the scalar `reward_score` on the last token; a dense `reward_score`
    becomes the row itself, its streams fields `bot_stream_<name>` and its checksum `DENSE_MARK`
    (`verl_bot.training.rows.dense_fields`), verl's own method building everything else. A multi-output loop's
    outputs share one `reward_score` (verl copies the last output's): the row is this output's own, by the
    fingerprint of its ids. A missing fingerprint (ids changed after scoring) or a vector or stream of the wrong
    length gives zero rows and the `verl_bot.errors.FATAL_KEY` marker on a copy of `reward_extra_info` (multi-output
    rows share the dict), which stops the run at the next sample (`verl_bot.hooks.v1.replay_buffer`): raising here
    would only tag the group "failure" and let training go on."""

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
