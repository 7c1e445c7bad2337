"""A verl-bot hook that a changed verl would leave silently inert stops the run at its first use, in one line.

Checked on verl's own objects: the v1 trainer's advantage step must go through verl-bot's failed-row exclusion
(`verl_bot.step.failures`, reached through `compute_advantage_for_multi_trajectories`), and its replay buffer must
carry verl-bot's fatal-marker check (`verl_bot.hooks.v1.replay_buffer.arm`).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from verl import DataProto
from verl.trainer.ppo.v1 import trainer_base

from verl_bot.credit.context import BatchContext, use_context
from verl_bot.errors import VerlBotConfigError
from verl_bot.hooks.v1.compute_advantage import check_buffer_armed, inert
from verl_bot.hooks.v1.replay_buffer import arm
from verl_bot.step import failures


class Buffer:
    """A stand-in with verl's ReplayBuffer method that `arm` wraps on the instance."""

    def _terminal_eviction_reasons(self, global_steps, partition_id):
        return {}


def test_a_replay_buffer_built_past_the_hook_stops_the_run():
    with pytest.raises(VerlBotConfigError, match=r"went past PPOTrainer._build_replay_buffer .* would not stop"):
        check_buffer_armed(SimpleNamespace(replay_buffer=Buffer()))
    check_buffer_armed(SimpleNamespace(replay_buffer=arm(Buffer())))  # armed: passes
    check_buffer_armed(SimpleNamespace(replay_buffer=object()))  # a custom sampler without the method: not checked


def test_verls_v1_advantage_step_goes_through_the_failed_row_exclusion():
    """verl's own compute_advantage_for_multi_trajectories (as verl-bot's plugin left it in this process) counts one
    call inside a batch context; outside one it counts nothing."""
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    data = DataProto(
        batch=TensorDict({"token_level_rewards": rewards, "response_mask": torch.ones(2, 2, dtype=torch.int64)},
                         batch_size=2),
        non_tensor_batch={"uid": np.array(["a", "a"], dtype=object)},
    )
    before = failures.calls()
    trainer_base.compute_advantage_for_multi_trajectories(data, ["a_0_0", "a_1_0"], "grpo")
    assert failures.calls() == before
    with use_context(BatchContext(failed=torch.tensor([False, False]))):
        trainer_base.compute_advantage_for_multi_trajectories(data, ["a_0_0", "a_1_0"], "grpo")
    assert failures.calls() == before + 1


def test_the_stop_names_verls_version_the_target_and_the_hook():
    import verl

    message = str(inert("x.y", "hooks/v1/z.py", "it matters"))
    assert message == (f"verl-bot: verl {verl.__version__}'s trainer went past x.y without verl-bot's hook there "
                       "(verl_bot/hooks/v1/z.py): it matters; `python -m verl_bot.compat` lists what changed")
