"""Helpers shared by the estimators: per-group sums and row checks."""

from __future__ import annotations

import torch


def group_sum(values: torch.Tensor, group: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Sum `values` (N,) into `num_groups` buckets given `group` (N,) ids; returns (num_groups,)."""
    return values.new_zeros(num_groups).index_add_(0, group, values)


def raise_for_rows(what: str, bad_rows: torch.Tensor, index, hint: str = "") -> None:
    """Raise ValueError("<what> in N response(s), rows [...], uid(s) [...]<hint>") if any of `bad_rows` (B,) is set."""
    if bad_rows.any():
        rows = bad_rows.nonzero().flatten().tolist()
        uids = sorted({str(index[r]) for r in rows})
        raise ValueError(f"{what} in {len(rows)} response(s), rows {rows[:8]}, uid(s) {uids[:8]}{hint}")


def last_token_index(response_mask: torch.Tensor) -> torch.Tensor:
    """(B,) index of each row's last valid token (0 for rows without any); response_mask: (B, T)."""
    width = response_mask.shape[1]
    return width - 1 - (response_mask != 0).flip(1).to(torch.uint8).argmax(dim=1)
