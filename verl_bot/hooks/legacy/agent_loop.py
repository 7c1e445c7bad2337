"""Hook: `verl.experimental.agent_loop.agent_loop.AgentLoopWorker` (legacy trainer: dense rewards into the batch).

verl's legacy agent loop pads each output in `_agent_loop_postprocess` (one float `reward_score`) and stacks a
worker's outputs in `_postprocess` (the scalar on the last token of `rm_scores`). For a run with the `bot` reward
manager (any other run: verl's methods, unchanged) the wrappers carry the dense rewards, streams and checksums into
the batch and stop the run on a fatal marker. `AgentLoopWorkerTQ` (the v1 agent loop) overrides
`_agent_loop_postprocess` and never calls `_postprocess`: these wrappers see the legacy trainer's rollouts only.
The trainer paths: docs/verl_versions.md, section Trainer paths.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from verl_bot.credit.dense import is_dense
from verl_bot.errors import FATAL_KEY, VerlBotConfigError
from verl_bot.hooks.wrap import wrap
from verl_bot.rewards.settings import bot_manager_in_use
from verl_bot.training.rows import DENSE_MARK, dense_fields

DENSE_KEY = "verl_bot_dense_reward"
INFO_KEY = "reward_extra_info"
HELD_INFO_KEY = "verl_bot_reward_extra_info"  # where the dicts wait while verl's method runs (it flattens INFO_KEY)


def _make_agent_loop_postprocess(original):
    """`_agent_loop_postprocess` scores the output first (verl's own `_compute_score`, which it calls next anyway and
    which then does nothing), moves a dense `reward_score` (`verl_bot.credit.dense`) into the output's
    `extra_fields` and leaves a float in its place (verl's padded output is a pydantic model whose `reward_score` is
    one float); an agent loop that returns several outputs (a multi-output loop) stops the run in one line: the
    legacy trainer takes one output a sample."""

    @functools.wraps(original)
    async def _agent_loop_postprocess(self, output, validate, *args, **kwargs):
        if not bot_manager_in_use(self.config):
            return await original(self, output, validate, *args, **kwargs)
        if isinstance(output, list):
            raise VerlBotConfigError(
                f"verl-bot: the agent loop returned {len(output)} outputs for one sample (a multi-output loop): "
                "verl's legacy trainer takes one output a sample; use trainer.use_v1=true"
            )
        await self._compute_score([output], kwargs=kwargs)
        if is_dense(output.reward_score):
            output.extra_fields[DENSE_KEY] = output.reward_score
            output.reward_score = 0.0  # verl's float field; the row is replaced in `_postprocess`
        return await original(self, output, validate, *args, **kwargs)

    return _agent_loop_postprocess


def response_length(item: Any) -> int:
    """The unpadded response length of one padded output (its response attention)."""
    prompt = item.prompt_ids.shape[-1]
    return int(item.attention_mask[0, prompt:].sum())


def hold_infos(inputs: list) -> list[Any]:
    """Take each row's dense reward out of its `extra_fields` and park its `reward_extra_info` under
    `HELD_INFO_KEY`; raises `VerlBotConfigError` with the first fatal marker's message."""
    dense = []
    for item in inputs:
        info = item.extra_fields.pop(INFO_KEY, None)
        if isinstance(info, dict) and info.get(FATAL_KEY):
            raise VerlBotConfigError(str(info[FATAL_KEY]))
        if info is not None:
            item.extra_fields[HELD_INFO_KEY] = info
        dense.append(item.extra_fields.pop(DENSE_KEY, None))
    return dense


def dense_columns(out: Any, inputs: list, dense: list[Any]) -> dict[str, Any]:
    """The stacked batch `out`'s new `rm_scores` (B, T) with each dense row's vector, its `bot_stream_<name>` fields
    (B, T) and the `DENSE_MARK` column (B,): each dense row's checksum, "" for the others. Built anew, to be
    assigned: a batch whose fields are copies keeps them."""
    rm_scores = out.batch["rm_scores"].clone()
    streams: dict[str, torch.Tensor] = {}
    marks = np.array([""] * len(inputs), dtype=object)
    for row, (item, reward_score) in enumerate(zip(inputs, dense, strict=True)):
        if reward_score is None:
            continue
        length = response_length(item)
        fields = dense_fields(reward_score, length, {})
        if "extra_fields" in fields:  # a vector of the wrong length
            raise VerlBotConfigError(str(fields["extra_fields"][INFO_KEY][FATAL_KEY]))
        marks[row] = fields.pop(DENSE_MARK)
        rm_scores[row] = 0.0
        rm_scores[row, :length] = fields.pop("rm_scores")
        for name, values in fields.items():
            streams.setdefault(name, torch.zeros_like(rm_scores))[row, :length] = torch.as_tensor(values)
    return {"rm_scores": rm_scores, **streams, DENSE_MARK: marks}


def _make_postprocess(original):
    """`_postprocess` (verl writes `rm_scores` with the scalar on the last token and flattens each row's
    `reward_extra_info` by the keys of the FIRST row): a row whose `reward_extra_info` carries verl-bot's fatal
    marker (`verl_bot.errors.FATAL_KEY`) stops the run with its message (the legacy trainer propagates the error to
    the driver, whose last line it becomes); the rows' `reward_extra_info` dicts stay one object column (a scorer
    reports its own parts, so rows differ in keys, which verl's flattening and its concatenation of the workers'
    batches refuse); after verl's method, each row's `rm_scores` is its dense vector and each named stream a
    right-padded (B, T) field `bot_stream_<name>` (`verl_bot.training.rows.dense_fields`, the v1 adapter's
    conversion), and the column `verl_bot.training.rows.DENSE_MARK` holds each dense row's checksum, every field
    assigned whole (never written through a tensor verl handed out)."""

    @functools.wraps(original)
    def _postprocess(self, inputs, *args, **kwargs):
        if not bot_manager_in_use(self.config):
            return original(self, inputs, *args, **kwargs)
        dense = hold_infos(inputs)
        out = original(self, inputs, *args, **kwargs)
        held = out.non_tensor_batch.pop(HELD_INFO_KEY, None)
        infos = np.empty(len(inputs), dtype=object)
        held = held if held is not None else [None] * len(inputs)
        infos[:] = [info if isinstance(info, dict) else {} for info in held]
        out.non_tensor_batch[INFO_KEY] = infos
        if any(reward_score is not None for reward_score in dense):
            columns = dense_columns(out, inputs, dense)
            out.non_tensor_batch[DENSE_MARK] = columns.pop(DENSE_MARK)
            for name, values in columns.items():
                out.batch[name] = values
        return out

    return _postprocess


def install() -> list[str]:
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    return [
        wrap(AgentLoopWorker, "_agent_loop_postprocess", ["self", "output", "validate"], _make_agent_loop_postprocess),
        wrap(AgentLoopWorker, "_postprocess", ["self", "inputs"], _make_postprocess),
    ]
