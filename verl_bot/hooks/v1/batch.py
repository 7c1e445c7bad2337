"""v1's training batch (verl's `KVBatchMeta`: keys into TransferQueue) as a `verl_bot.training.batch.TrainingBatch`.

Every read is one `transfer_queue.kv_batch_get` of the fields asked for; the rows' non-tensor values are read once
per object.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from verl_bot.training.batch import INFO_KEY, MissingFields
from verl_bot.training.failures import session_keys


def column_values(column: Any) -> list:
    """The plain values of a TransferQueue non-tensor column (a LinkedList, NonTensorStack or numpy array)."""
    return [getattr(value, "data", value) for value in list(column)]


def rows_of(column: Any, lengths: Sequence[int] | None = None) -> list[torch.Tensor]:
    """(n_i,) rows of a (B, *) TransferQueue column: a nested tensor's rows (verl's v1 agent loop stores its
    trajectories unpadded), or a padded one's cut to `lengths` (None: whole)."""
    if getattr(column, "is_nested", False):
        return list(column.unbind())
    return [row if lengths is None else row[:n] for row, n in zip(column, lengths or [None] * len(column),
                                                                   strict=True)]


class TQBatch:
    """The batch `meta` (verl's `KVBatchMeta`) of the v1 trainer, read from TransferQueue."""

    def __init__(self, meta: Any):
        self.meta = meta

    def _get(self, names: Sequence[str], rows: Sequence[int] | None = None) -> Any:
        import transfer_queue as tq

        keys = self.meta.keys if rows is None else [self.meta.keys[i] for i in rows]
        try:
            return tq.kv_batch_get(keys=keys, partition_id=self.meta.partition_id, select_fields=list(names))
        except Exception as exc:  # noqa: BLE001 - a missing field surfaces as backend-specific errors
            raise MissingFields(f"TransferQueue has no fields {list(names)}: {type(exc).__name__}: {exc}") from exc

    @functools.cached_property
    def _rows(self) -> list[dict]:
        data = self._get(["extra_fields", "data_source"])
        rows = []
        columns = (column_values(data["extra_fields"]), column_values(data["data_source"]), self.keys())
        for extra, source, key in zip(*columns, strict=True):
            # a key is `{uid}_{session}_{j}`, as verl's replay buffer reads it
            row = {**(extra if isinstance(extra, dict) else {}), "data_source": str(source), "uid": key.split("_")[0]}
            row[INFO_KEY] = row.get(INFO_KEY) if isinstance(row.get(INFO_KEY), dict) else {}
            rows.append(row)
        return rows

    def rows(self) -> list[dict]:
        return self._rows

    def keys(self) -> list[str]:
        return [str(key) for key in self.meta.keys]

    def sessions(self) -> np.ndarray | None:
        return session_keys(self.keys())

    def padding(self) -> torch.Tensor:
        return torch.tensor([bool(tag.get("is_padding", False)) for tag in self.meta.tags], dtype=torch.bool)

    def padded(self, names: Sequence[str]) -> dict[str, torch.Tensor]:
        data = self._get(names).to_padded_tensor()
        return {name: data[name] for name in names}

    def ragged(self, names: Sequence[str], rows: Sequence[int] | None = None) -> dict[str, list[torch.Tensor]]:
        data = self._get([*dict.fromkeys([*names, "response_mask"])], rows)
        mask = data["response_mask"]
        lengths = mask.offsets().diff().tolist() if getattr(mask, "is_nested", False) else None
        if lengths is None:
            lengths = [int(m.sum()) for m in mask]
        return {name: rows_of(data[name], lengths) for name in names}

    def prompts(self, rows: Sequence[int] | None = None) -> list[list[int]]:
        prompts = self._get(["prompts"], rows)["prompts"]
        if getattr(prompts, "is_nested", False):
            return [row.tolist() for row in prompts.unbind()]
        return prompts.tolist()
