"""Hook: `verl.trainer.ppo.v1.trainer_base.compute_advantage_for_multi_trajectories` (failed rollouts earn nothing).

The v1 trainer computes every estimator's advantages through this module global of `trainer_base`, with the
batch's row keys `{uid}_{session}_{j}`. The wrapper is `verl_bot.training.failures.advantages_without_failures`:
inside a verl-bot step's batch context, failed rollouts (and multi-output sessions) out of their groups.
"""

from __future__ import annotations

import functools

from verl_bot.hooks.wrap import wrap
from verl_bot.training.failures import advantages_without_failures


def _make_wrapper(original):
    @functools.wraps(original)
    def compute_advantage_for_multi_trajectories(data, batch_keys, adv_estimator, *args, **kwargs):
        return advantages_without_failures(lambda d: original(d, batch_keys, adv_estimator, *args, **kwargs), data,
                                           adv_estimator)

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
