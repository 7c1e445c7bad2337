"""Failed rollouts earn nothing: out of their groups for any estimator (verl's own included), advantage 0.

`advantages_without_failures` wraps the one verl function through which each trainer computes every estimator's
advantages with the whole batch as a `DataProto` (v1: `verl_bot.hooks.v1.multi_trajectory`; legacy:
`verl_bot.hooks.legacy.trainer`): rows the batch context (`verl_bot.training.context`) marks as failed get groups of
their own and zero rewards, then advantage 0; it also puts the batch's `old_log_probs` into the context. Multi-output
agent loops (v1 only, verl's keys `{uid}_{session}_{j}`): each row's session goes into the context
(`BatchContext.sessions`, read by `bot`), verl-bot's other estimators are refused with one line
(`refuse_multi_output`), and a failure fails its whole session. Explained in docs/ALGORITHMS.md, section 8 (and
Multi-output agent loops); docs/run_safety.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from verl_bot.advantage import estimator_spec
from verl_bot.credit.context import current
from verl_bot.errors import VerlBotConfigError

CONTEXT_TENSORS = ("old_log_probs",)
_calls = [0]  # calls of `advantages_without_failures` in a batch context, in this process


def calls() -> int:
    """How often `advantages_without_failures` ran inside a batch context in this process (a trainer adapter checks
    that verl's advantage step went through it: a hook that never fires would leave failed rows their advantages)."""
    return _calls[0]


def session_keys(batch_keys: list[str]) -> np.ndarray | None:
    """(B,) each row's session `{uid}_{session}` from verl's keys `{uid}_{session}_{j}`, or None when every
    session has one row (a key of another form is a session of its own)."""
    sessions = np.array([key.rsplit("_", 1)[0] if key.count("_") >= 2 else key for key in batch_keys], dtype=object)
    return sessions if len(set(sessions.tolist())) < len(sessions) else None


def last_outputs(batch_keys: list[str]) -> list[bool]:
    """(B,) True on each session's last output (the highest `j` of its keys `{uid}_{session}_{j}`), the one whose
    `reward_extra_info` verl copied to the session's earlier outputs; every row when no session has several."""
    sessions = session_keys(batch_keys)
    if sessions is None:
        return [True] * len(batch_keys)
    last: dict[str, tuple[int, int]] = {}
    for row, (key, session) in enumerate(zip(batch_keys, sessions.tolist(), strict=True)):
        j = int(key.rsplit("_", 1)[1]) if key != session else 0
        if session not in last or j > last[session][0]:
            last[session] = (j, row)
    rows = {row for _, row in last.values()}
    return [row in rows for row in range(len(batch_keys))]


def refuse_multi_output(estimator: str, sessions: np.ndarray) -> None:
    """Raise VerlBotConfigError (one line) for a verl-bot estimator other than `bot` on a multi-output batch."""
    names, counts = np.unique(sessions.astype(str), return_counts=True)
    worst = int(counts.argmax())
    raise VerlBotConfigError(
        f"verl-bot: adv_estimator={estimator} does not support multi-output loops (session {names[worst]} has "
        f"{counts[worst]} trajectories); use bot or grpo"
    )


def exclusion_uids(
    uids: np.ndarray, failed: np.ndarray, sessions: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """uids with every failed rollout in a group of its own, and (B,) bool: rows whose advantage must be 0.

    Args:
        uids: (B,) group label of each row.
        failed: (B,) bool, the rows whose scorer failed.
        sessions: (B,) rollout label of each row (a failed row fails its whole session), or None: rows.

    Returns:
        new_uids: (B,) object array; failed rows get `"<uid>#failed<row>"` (`<session>` for sessions).
        zero: (B,) bool; the failed rows and every row of a group with failures left with one valid rollout.
    """
    units = np.arange(len(uids)) if sessions is None else np.asarray(sessions, dtype=object)
    failed = np.isin(units, units[failed]) if sessions is not None else failed.copy()
    new_uids = np.array(uids, dtype=object)
    for row in np.flatnonzero(failed):
        new_uids[row] = f"{uids[row]}#failed{units[row]}"
    zero = failed.copy()
    groups_with_failures = set(np.asarray(uids, dtype=object)[failed].tolist())
    for uid in groups_with_failures:
        members = (np.asarray(uids, dtype=object) == uid) & ~failed
        if len(set(units[members].tolist())) == 1:
            zero |= members
    return new_uids, zero


def advantages_without_failures(compute: Callable[[Any], Any], data: Any, adv_estimator: Any) -> Any:
    """`compute(data)` (verl's advantage function on the step's `DataProto` `data`) with the failed rows of the
    active batch context out of their groups (docs/ALGORITHMS.md, section 8). Without an active context:
    `compute(data)` as it is.

    Every change to `data` and to the result is an assignment of a whole field (never a write through a tensor
    verl handed out), so a batch class whose field access returns copies keeps it.
    """
    ctx = current()
    if ctx is None:
        return compute(data)
    _calls[0] += 1
    for name in CONTEXT_TENSORS:
        if name in data.batch.keys():
            ctx.tensors[name] = data.batch[name]
    estimator = str(getattr(adv_estimator, "value", adv_estimator))
    if ctx.sessions is not None and estimator != "bot" and estimator_spec(estimator) is not None:
        refuse_multi_output(estimator, ctx.sessions)
    failed = ctx.failed.numpy() if ctx.failed is not None else None
    if failed is None or not failed.any():
        return compute(data)

    uids = data.non_tensor_batch["uid"]
    new_uids, zero = exclusion_uids(uids, failed, ctx.sessions)
    rewards = data.batch["token_level_rewards"]
    rows = torch.as_tensor(failed, device=rewards.device)
    data.non_tensor_batch["uid"] = new_uids
    data.batch["token_level_rewards"] = torch.where(rows[:, None], 0.0, rewards)
    try:
        out = compute(data)
    finally:
        data.non_tensor_batch["uid"] = uids
    out.non_tensor_batch["uid"] = uids
    zero_rows = torch.as_tensor(np.flatnonzero(zero), device=rows.device)
    names = ["advantages"] if estimator == "gae" else ["advantages", "returns"]
    for name in names:  # zeroed where it is (the estimator's own output), then assigned: kept by a copying batch too
        out.batch[name] = out.batch[name].index_fill_(0, zero_rows, 0.0)
    ctx.metrics["verl_bot/zero_advantage_rows"] = float(zero.sum())
    return out
