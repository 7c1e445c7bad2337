"""Hook: `verl.trainer.ppo.v1.trainer_base.compute_advantage_for_multi_trajectories` (failed rollouts earn nothing).

The v1 trainer computes every estimator's advantages through this module
global of `trainer_base`. When the active batch context
(`verl_bot.hooks.compute_advantage`) marks rows whose scorer failed (timeout,
5xx, garbage: no verdict, so no reward to learn from), the wrapper:

1. gives each failed row a group of its own (a fresh uid) and zero token
   rewards, so it takes no part in its group's statistics (mean, std, K,
   leave-one-out baselines) in ANY estimator, verl's own included;
2. calls verl's function;
3. sets the failed rows' advantages to 0 on every token, and their returns
   too (not under GAE, where returns train the critic), and likewise every row
   of a group that failures left with a single valid rollout (no group to
   compare it with: verl's GRPO would hand it its raw score).

So for `bot`/`pure` (and every estimator of this package) the valid rows get
exactly the advantages of their groups without the failed rollouts; for
verl's `grpo` with k >= 2 valid rollouts, exactly GRPO over those k.
It also puts the batch's `old_log_probs` into the context for estimators that
read them.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from verl_bot.context import current
from verl_bot.hooks._patch import wrap

CONTEXT_TENSORS = ("old_log_probs",)


def exclusion_uids(uids: np.ndarray, failed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uids with every failed row in a group of its own, and (B,) bool: rows whose advantage must be 0.

    Args:
        uids: (B,) group label of each row.
        failed: (B,) bool, the rows whose scorer failed.

    Returns:
        new_uids: (B,) object array; failed rows get `"<uid>#failed<row>"`.
        zero: (B,) bool; the failed rows and every row of a group with failures left with one valid row.
    """
    new_uids = np.array(uids, dtype=object)
    for row in np.flatnonzero(failed):
        new_uids[row] = f"{uids[row]}#failed{row}"
    zero = failed.copy()
    groups_with_failures = set(np.asarray(uids, dtype=object)[failed].tolist())
    for uid in groups_with_failures:
        members = (np.asarray(uids, dtype=object) == uid) & ~failed
        if members.sum() == 1:
            zero |= members
    return new_uids, zero


def _make_wrapper(original):
    @functools.wraps(original)
    def compute_advantage_for_multi_trajectories(data, batch_keys, adv_estimator, *args, **kwargs):
        ctx = current()
        if ctx is None:
            return original(data, batch_keys, adv_estimator, *args, **kwargs)
        for name in CONTEXT_TENSORS:
            if name in data.batch.keys():
                ctx.tensors[name] = data.batch[name]
        failed = ctx.failed.numpy() if ctx.failed is not None else None
        if failed is None or not failed.any():
            return original(data, batch_keys, adv_estimator, *args, **kwargs)

        uids = data.non_tensor_batch["uid"]
        new_uids, zero = exclusion_uids(uids, failed)
        rows = torch.as_tensor(failed, device=data.batch["token_level_rewards"].device)
        data.non_tensor_batch["uid"] = new_uids
        data.batch["token_level_rewards"] = torch.where(rows[:, None], 0.0, data.batch["token_level_rewards"])
        try:
            out = original(data, batch_keys, adv_estimator, *args, **kwargs)
        finally:
            data.non_tensor_batch["uid"] = uids
        out.non_tensor_batch["uid"] = uids
        keep = ~torch.as_tensor(zero, device=rows.device)[:, None]
        out.batch["advantages"] = out.batch["advantages"] * keep
        if str(getattr(adv_estimator, "value", adv_estimator)) != "gae":
            out.batch["returns"] = out.batch["returns"] * keep
        ctx.metrics["verl_bot/zero_advantage_rows"] = float(zero.sum())
        return out

    return compute_advantage_for_multi_trajectories


def install() -> list[str]:
    from verl.trainer.ppo.v1 import trainer_base

    return [
        wrap(
            trainer_base,
            "compute_advantage_for_multi_trajectories",
            ["data", "batch_keys", "adv_estimator"],
            _make_wrapper,
        )
    ]
