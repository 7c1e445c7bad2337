"""Helpers shared by the estimators: per-group sums, row checks, and which groups carry a signal."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
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


def group_signal(rewards: Sequence[np.ndarray], layout: str) -> tuple[bool, float]:
    """Whether an estimator can learn from a group (DAPO's dynamic sampling keeps only those), from the token
    rewards of its valid rollouts as the `bot` manager laid them out (`verl_bot.rewards.settings.LAYOUTS`).

    dense (BoT, PURE, PASS: every token standardized against the group's bag): the bag of every token reward has
    a spread; scalar (GRPO and the other group estimators on G): the rollouts' rewards differ; returns: the
    rollouts' sums differ, or a token before a rollout's last carries a reward (a local signal).

    Args:
        rewards: one (L_k,) array per valid rollout of the group.
        layout: "dense", "returns" or "scalar".

    Returns:
        (has signal, the value the group collapses to: its first token reward (dense) or first sum (else)).
    """
    rows = [np.asarray(r, dtype=np.float64) for r in rewards]
    if not rows:
        return False, 0.0
    if layout == "dense":
        bag = np.concatenate(rows)
        return len(rows) > 1 and bool(bag.size) and bool(bag.max() > bag.min()), float(bag[0]) if bag.size else 0.0
    sums = np.array([row.sum() for row in rows])
    local = layout == "returns" and any(row[:-1].any() for row in rows)
    return len(rows) > 1 and (bool(sums.max() > sums.min()) or local), float(sums[0])
