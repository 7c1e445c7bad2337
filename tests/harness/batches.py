"""A legacy trainer's batch (`DataProto`) at its advantage step, as verl-bot's agent-loop hook leaves it, written by
hand: the tests of the legacy adapter, of verl's separation trainers and of the inert-hook stops build it here."""

from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDict
from verl import DataProto

from verl_bot.training.rows import DENSE_MARK, row_checksum


def legacy_batch(rewards: list[list[float]], uids: list[str], failed: list[bool] | None = None,
                 marks: list[str] | None | str = "checksums") -> DataProto:
    """Right-padded (B, T) token rewards (`rm_scores`, and verl's `token_level_scores`/`token_level_rewards` copies),
    response masks, one-token prompts, per-row `reward_extra_info` (G = each row's last reward, `scorer_failed`),
    `data_source` "toy", `uid`; `marks`: each row's checksum ("checksums"), the given marks, or none (None). The meta
    holds what verl's `_fit_generate` notes for its throughput metrics."""
    width = max(len(r) for r in rewards)
    failed = failed or [False] * len(rewards)
    scores = torch.zeros(len(rewards), width)
    mask = torch.zeros(len(rewards), width, dtype=torch.int64)
    for i, r in enumerate(rewards):
        scores[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    infos = np.empty(len(rewards), dtype=object)
    infos[:] = [{"score": r[-1], "scorer_failed": float(f)} for r, f in zip(rewards, failed, strict=True)]
    ones = torch.ones(len(rewards), 1, dtype=torch.int64)
    if marks == "checksums":
        marks = [row_checksum(torch.tensor(r)) for r in rewards]
    return DataProto(
        batch=TensorDict({"token_level_rewards": scores, "token_level_scores": scores.clone(),
                          "rm_scores": scores.clone(), "response_mask": mask, "prompts": ones,
                          "responses": mask.clone(), "attention_mask": torch.cat([ones, mask], 1),
                          "old_log_probs": torch.zeros(len(rewards), width)},
                         batch_size=len(rewards)),
        non_tensor_batch={"uid": np.array(uids, dtype=object), "reward_extra_info": infos,
                          "data_source": np.array(["toy"] * len(rewards), dtype=object),
                          **({DENSE_MARK: np.array(marks, dtype=object)} if marks is not None else {})},
        meta_info={"global_token_num": [width + 1] * len(rewards)},
    )
