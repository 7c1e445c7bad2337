"""The one interface between verl-bot's training-iteration logic and a trainer's batch: `TrainingBatch`.

Each trainer adapter implements it once (`verl_bot.hooks.v1.batch`: v1's TransferQueue batch;
`verl_bot.hooks.legacy.batch`: the legacy trainer's `DataProto`); everything this package adds to a training
iteration reads the batch through it and nothing else. Rows are in the order of the advantage tensors. The readers
below (streams, token records, per-token values) are written once, over the interface.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import torch

from verl_bot.credit.streams import FIELD_PREFIX, StreamsUnavailable

REWARDS = "rm_scores"  # the token rewards as the reward loop produced them (before any KL penalty), both trainers
INFO_KEY = "reward_extra_info"


class MissingFields(KeyError):
    """The batch has none of some fields asked for (its message names them)."""


class TrainingBatch(Protocol):
    """One training iteration's batch, as verl-bot reads it."""

    def rows(self) -> list[dict]:
        """(B,) each row's non-tensor values: `uid`, `data_source`, its agent loop's extra fields and its
        `reward_extra_info` (a dict, `{}` when the row has none)."""

    def keys(self) -> list[str]:
        """(B,) each row's key (v1: verl's `{uid}_{session}_{j}`; legacy: `{uid}_{i}`, the i-th rollout of a group)."""

    def sessions(self) -> np.ndarray | None:
        """(B,) each row's sample `{uid}_{session}` when some sample has several rows (a multi-output agent loop),
        else None."""

    def padding(self) -> torch.Tensor:
        """(B,) bool: the rows verl added to fill the batch."""

    def padded(self, names: Sequence[str]) -> dict[str, torch.Tensor]:
        """Response-aligned fields `names`, each (B, T) right-padded like the token rewards; `MissingFields`."""

    def ragged(self, names: Sequence[str], rows: Sequence[int] | None = None) -> dict[str, list[torch.Tensor]]:
        """Response-aligned fields `names` of the rows `rows` (all: None), each a list of (n_i,) tensors cut to the
        row's response length n_i; `MissingFields`."""

    def prompts(self, rows: Sequence[int] | None = None) -> list[list[int]]:
        """The prompt token ids (no padding) of the rows `rows` (all: None)."""


def streams(batch: TrainingBatch, names: Sequence[str]) -> dict[str, torch.Tensor]:
    """The reward streams `names` of the batch (`bot_stream_<name>`), (B, T) each; `StreamsUnavailable` without."""
    fields = [FIELD_PREFIX + name for name in names]
    try:
        padded = batch.padded(fields)
    except MissingFields as exc:
        raise StreamsUnavailable(
            f"the batch has no reward streams {fields} ({exc}). They are written by verl-bot's `bot` reward manager "
            "(reward.reward_manager.name=bot, token_level=true)"
        ) from exc
    return {name: padded[FIELD_PREFIX + name] for name in names}


def real_rows(batch: TrainingBatch) -> list[int]:
    """The indexes of the rows that are not padding."""
    return [i for i, pad in enumerate(batch.padding().tolist()) if not pad]


def record_rows(batch: TrainingBatch, rows: Sequence[int] | None = None) -> list[dict]:
    """The rows `rows` (all real ones: None) as `verl_bot.observe.token_records.build_records` reads them: uid, key,
    data_source, prompt and response ids, token rewards and advantages (one per response token), info."""
    rows = real_rows(batch) if rows is None else list(rows)
    every, keys = batch.rows(), batch.keys()
    tokens = batch.ragged(["responses", REWARDS, "advantages"], rows)
    prompts = batch.prompts(rows)
    return [
        {
            "uid": str(every[i].get("uid", "")),
            "key": str(keys[i]),
            "data_source": str(every[i].get("data_source", "")),
            "prompt_ids": prompts[n],
            "response_ids": tokens["responses"][n].tolist(),
            "rewards": tokens[REWARDS][n].tolist(),
            "advantages": tokens["advantages"][n].tolist(),
            "info": every[i].get(INFO_KEY) or {},
        }
        for n, i in enumerate(rows)
    ]


def token_values(batch: TrainingBatch, local: Any = None) -> dict[str, np.ndarray]:
    """{"rewards", "advantages"[, "local"]: (N,) float64} of every response token (`response_mask` 1) of the real
    rows; with `local`, a function (rewards (N,), scores (B',), lengths (B',)) -> (N,) S_t that undoes the `bot`
    manager's composition (`verl_bot.training.panel.local_of`), S_t too."""
    rows = real_rows(batch)
    tokens = batch.ragged(["response_mask", REWARDS, "advantages"], rows)
    lengths = np.array([len(t) for t in tokens["response_mask"]], dtype=np.int64)

    def flat(name: str) -> np.ndarray:
        parts = [t.double().numpy() for t in tokens[name]]
        return np.concatenate(parts) if parts else np.zeros(0)

    keep = flat("response_mask") > 0
    values = {"rewards": flat(REWARDS), "advantages": flat("advantages")}
    if local is not None:
        infos = batch.rows()
        scores = np.array([float((infos[i].get(INFO_KEY) or {}).get("score", np.nan)) for i in rows])
        values["local"] = local(values["rewards"], scores, lengths)
    return {name: array[keep] for name, array in values.items()}
