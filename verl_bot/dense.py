"""Dense per-token rewards through verl 0.9.1's default v1 trainer, without a fork of verl.

verl's reward loop keeps ONE scalar per response: a reward manager's
`run_single` returns `{"reward_score": float, ...}` and verl writes that float
on the last response token. The `bot` reward manager instead returns
`reward_score` as a list of floats, one per response token, and this module
makes that list arrive unchanged in `rm_scores` -> `token_level_scores` ->
`token_level_rewards` on the two paths verl 0.9.1 has:

1. Reward computed inside the agent loop (the default: rule-based or remote
   rewards, no colocated reward model). `AgentLoopWorkerTQ` stores each
   trajectory with `AgentLoopOutput.as_dict()`, which builds `rm_scores` as
   zeros plus the scalar on the last token. We wrap `as_dict` (the ONE patch):
   when `reward_score` is a sequence, the row is that vector (with named streams,
   `{"token_rewards": [...], "streams": {...}}`, each stream becomes one more
   field of the trajectory: `verl_bot.streams`). Everything else
   of the original method runs unchanged, and a scalar `reward_score` takes
   verl's own path untouched, so other reward managers are not affected.
2. Reward computed by a colocated reward model (`RewardLoopManager.compute_rm_score`)
   calls `reward_manager_cls.assemble_rm_scores(data, scores)`, a classmethod
   made to be overridden: `BoTRewardManager.assemble_rm_scores` writes the
   vectors (`assemble_dense_rm_scores` below). No patch. (This path carries no
   named streams: `verl_bot.streams` explains them and says so at the estimator.)

Why here and not elsewhere: the vector has to cross the Ray boundary between
the reward-loop worker and the agent-loop worker, and `reward_score` is the
only field verl carries across it per trajectory; the estimator only ever sees
`token_level_rewards`. Wrapping the one method that turns that field into a
tensor is the narrowest change: no new config, no custom agent loop.

A second, metrics-only wrapper (`PPOTrainer._compute_metrics`) adds
`reward/<key>/mean` for the numeric `reward_extra_info` of the training batch,
which the v1 trainer otherwise logs only during validation.

`install()` checks the verl version and the signatures it wraps, and raises
`VerlApiMismatch` (see `verl_bot.plugin`) when they differ.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from verl_bot.streams import stream_fields

PATCHED_ATTR = "__verl_bot_dense__"
logger = logging.getLogger("verl_bot")


def dense_row(reward_score: Sequence[float], length: int) -> torch.Tensor:
    """Validate one response's token rewards and return them as a (length,) float32 tensor."""
    row = torch.as_tensor(list(reward_score), dtype=torch.float32)
    if row.dim() != 1 or row.numel() != length:
        raise ValueError(
            f"verl-bot dense reward: got {row.numel()} token rewards (shape {tuple(row.shape)}) for a response of "
            f"{length} tokens "
            "(multi-output agent loops, where one reward covers several trajectories, are not supported)"
        )
    return row


def is_dense(reward_score: Any) -> bool:
    """True when a reward manager returned per-token rewards instead of a scalar: a list/tuple/1-D array, or
    `{"token_rewards": [...], "streams": {...}}` (the form with named streams, see `verl_bot.streams`)."""
    if isinstance(reward_score, dict):
        return "token_rewards" in reward_score
    return isinstance(reward_score, list | tuple | np.ndarray | torch.Tensor) and np.ndim(reward_score) == 1


def split_reward_score(reward_score: Any) -> tuple[Sequence[float], dict[str, Sequence[float]]]:
    """(token rewards, named streams) of a dense `reward_score`; streams are {} for the plain list form."""
    if isinstance(reward_score, dict):
        return reward_score["token_rewards"], dict(reward_score.get("streams") or {})
    return reward_score, {}


def assemble_dense_rm_scores(data: Any, scores: list) -> torch.Tensor:
    """Write per-response token rewards into a right-padded `rm_scores`.

    Args:
        data: verl DataProto with `prompts` (B, P), `responses` (B, T), `attention_mask` (B, P+T).
        scores: B entries, each a sequence of token rewards of that response's valid length.

    Returns:
        rm_scores: (B, T) float32, 0 on padding.
    """
    prompt_length = data.batch["prompts"].size(1)
    valid_lengths = data.batch["attention_mask"][:, prompt_length:].sum(dim=1).tolist()
    rm_scores = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
    for i, (score, length) in enumerate(zip(scores, valid_lengths, strict=True)):
        rm_scores[i, :length] = dense_row(split_reward_score(score)[0], length)
    return rm_scores


def _wrap_as_dict(original):
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
        token_rewards, streams = split_reward_score(reward_score)
        length = output["response_mask"].numel()
        output["rm_scores"] = dense_row(token_rewards, length)
        output.update(stream_fields(streams, length))
        return output

    setattr(as_dict, PATCHED_ATTR, True)
    return as_dict


def training_reward_metrics(extra_fields: Sequence[Any]) -> dict[str, float]:
    """`reward/<key>/mean` over the numeric `reward_extra_info` entries of a batch's `extra_fields`."""
    values: dict[str, list[float]] = {}
    for extra in extra_fields:
        info = extra.get("reward_extra_info", {}) if isinstance(extra, dict) else {}
        for key, value in info.items():
            if isinstance(value, bool | int | float | np.number) and math.isfinite(float(value)):
                values.setdefault(key, []).append(float(value))
    return {f"reward/{key}/mean": float(np.mean(v)) for key, v in values.items()}


def _wrap_compute_metrics(original):
    @functools.wraps(original)
    def _compute_metrics(self, batch, metrics, *args, **kwargs):
        result = original(self, batch, metrics, *args, **kwargs)
        try:
            import transfer_queue as tq

            data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
            # a tensordict LinkedList, NonTensorStack or numpy array depending on the backend: list() fits all
            metrics.update(training_reward_metrics(list(data["extra_fields"])))
        except Exception:  # noqa: BLE001 - metrics are never worth a failed training step
            logger.warning("verl-bot: could not add reward/<key>/mean metrics", exc_info=True)
        return result

    setattr(_compute_metrics, PATCHED_ATTR, True)
    return _compute_metrics


def check_signature(fn, expected: list[str], where: str) -> None:
    from verl_bot.plugin import VerlApiMismatch

    params = list(inspect.signature(fn).parameters)[: len(expected)]
    if params != expected:
        raise VerlApiMismatch(f"verl-bot dense plumbing: {where} has parameters {params}, expected {expected}")


def install() -> list[str]:
    """Install the dense-reward wrappers (idempotent); returns the names of the wrapped methods."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from verl_bot.plugin import VerlApiMismatch, check_verl_version

    check_verl_version()
    if "reward_score" not in AgentLoopOutput.model_fields:
        raise VerlApiMismatch("verl-bot dense plumbing: AgentLoopOutput has no 'reward_score' field")
    check_signature(AgentLoopOutput.as_dict, ["self"], "AgentLoopOutput.as_dict")
    check_signature(PPOTrainer._compute_metrics, ["self", "batch", "metrics"], "PPOTrainer._compute_metrics")

    if not getattr(AgentLoopOutput.as_dict, PATCHED_ATTR, False):
        AgentLoopOutput.as_dict = _wrap_as_dict(AgentLoopOutput.as_dict)
    if not getattr(PPOTrainer._compute_metrics, PATCHED_ATTR, False):
        PPOTrainer._compute_metrics = _wrap_compute_metrics(PPOTrainer._compute_metrics)
    return ["AgentLoopOutput.as_dict", "PPOTrainer._compute_metrics"]
