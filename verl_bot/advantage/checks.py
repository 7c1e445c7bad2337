"""Input checks shared by the estimators."""

from __future__ import annotations

import torch


def raise_for_rows(what: str, bad_rows: torch.Tensor, index, hint: str = "") -> None:
    """Raise ValueError("<what> in N response(s), rows [...], uid(s) [...]<hint>") if any of `bad_rows` (B,) is set."""
    if bad_rows.any():
        rows = bad_rows.nonzero().flatten().tolist()
        uids = sorted({str(index[r]) for r in rows})
        raise ValueError(f"{what} in {len(rows)} response(s), rows {rows[:8]}, uid(s) {uids[:8]}{hint}")
