"""The legacy trainer's batch (verl's `DataProto`, one per iteration) as a `verl_bot.training.batch.TrainingBatch`.

A row is one rollout, right-padded to the batch's response width; its response length is its response attention.
Only reads: every field verl-bot writes into a `DataProto` is written by assignment of a whole field elsewhere.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from verl_bot.training.batch import INFO_KEY, MissingFields


class ProtoBatch:
    """The legacy trainer's iteration `data` (a `DataProto`)."""

    def __init__(self, data: Any):
        self.data = data

    @functools.cached_property
    def _rows(self) -> list[dict]:
        columns = self.data.non_tensor_batch
        names = list(columns)
        rows = [dict(zip(names, values, strict=True)) for values in zip(*columns.values(), strict=True)]
        if not rows:
            rows = [{} for _ in range(len(self.data))]
        for row in rows:
            row[INFO_KEY] = row.get(INFO_KEY) if isinstance(row.get(INFO_KEY), dict) else {}
        return rows

    @functools.cached_property
    def _lengths(self) -> list[int]:
        width = self.data.batch["prompts"].shape[1]
        return self.data.batch["attention_mask"][:, width:].sum(-1).tolist()

    def rows(self) -> list[dict]:
        return self._rows

    def keys(self) -> list[str]:
        seen: dict[str, int] = {}
        keys = []
        for row in self._rows:
            uid = str(row.get("uid", ""))
            seen[uid] = seen.get(uid, -1) + 1
            keys.append(f"{uid}_{seen[uid]}")
        return keys

    def sessions(self) -> np.ndarray | None:
        return None  # the legacy agent loop takes one output a sample

    def padding(self) -> torch.Tensor:
        return torch.zeros(len(self.data), dtype=torch.bool)  # the legacy trainer adds no padding rows

    def padded(self, names: Sequence[str]) -> dict[str, torch.Tensor]:
        missing = [name for name in names if name not in self.data.batch.keys()]
        if missing:
            raise MissingFields(f"the batch has no fields {missing}")
        return {name: self.data.batch[name] for name in names}

    def ragged(self, names: Sequence[str], rows: Sequence[int] | None = None) -> dict[str, list[torch.Tensor]]:
        rows = range(len(self.data)) if rows is None else rows
        padded = self.padded(names)
        return {name: [padded[name][i, : self._lengths[i]] for i in rows] for name in names}

    def prompts(self, rows: Sequence[int] | None = None) -> list[list[int]]:
        rows = range(len(self.data)) if rows is None else rows
        prompts = self.data.batch["prompts"]
        attention = self.data.batch["attention_mask"][:, : prompts.shape[1]].bool()
        return [prompts[i][attention[i]].tolist() for i in rows]
