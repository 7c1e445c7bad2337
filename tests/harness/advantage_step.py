"""verl's own advantage step as the v1 trainer calls it (`compute_advantage_for_multi_trajectories`), on rewards
written in the test, and a batch of two groups of dense rewards with a failed rollout in each."""

import numpy as np
import torch
from tensordict import TensorDict
from verl import DataProto
from verl.trainer.ppo.v1 import trainer_base

from tests.conftest import compose_verl_config


def run_verl(estimator, rewards, mask, uids, algorithm=None, keys=None):
    """verl's `compute_advantage_for_multi_trajectories` as the v1 trainer calls it (its trainer_base global)."""
    data = DataProto(
        batch=TensorDict(
            {"token_level_rewards": rewards.clone(), "token_level_scores": rewards.clone(), "response_mask": mask},
            batch_size=len(rewards),
        ),
        non_tensor_batch={"uid": np.array(uids, dtype=object)},
    )
    cfg = compose_verl_config([f"algorithm.adv_estimator={estimator}", *(algorithm or [])]).algorithm
    keys = keys or [f"{u}_{i}_0" for i, u in enumerate(uids)]
    run = trainer_base.compute_advantage_for_multi_trajectories
    return run(data, batch_keys=keys, adv_estimator=estimator, config=cfg)


def dense_group_batch(seed=0):
    """Random rewards (6, 6) of groups a and b, three rollouts each, right-padded to lengths 5, 3, 4, 6, 2, 5; their
    mask, uids, and one failed rollout in each group."""
    gen = torch.Generator().manual_seed(seed)
    lengths = [5, 3, 4, 6, 2, 5]
    mask = torch.tensor([[1.0 if t < n else 0.0 for t in range(6)] for n in lengths])
    rewards = torch.randn(6, 6, generator=gen) * mask
    uids = ["a", "a", "a", "b", "b", "b"]
    failed = torch.tensor([False, True, False, False, False, True])
    return rewards, mask, uids, failed
