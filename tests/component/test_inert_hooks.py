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

from tests.conftest import compose_verl_config
from verl_bot.credit.context import BatchContext, use_context
from verl_bot.errors import VerlBotConfigError
from verl_bot.hooks.compat import inert
from verl_bot.hooks.v1.compute_advantage import _advantage_with_context, check_buffer_armed
from verl_bot.hooks.v1.replay_buffer import arm
from verl_bot.step import failures
from verl_bot.step.rows import DENSE_MARK


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
                       "(verl_bot/hooks/v1/z.py): it matters; `python -m verl_bot.hooks.touch_points` lists the "
                       "touch points")


@pytest.mark.parametrize("marked", [False, True])
def test_a_dense_step_whose_rows_went_past_as_dict_stops_the_run(monkeypatch, marked):
    """The `bot` manager's rows reach the advantage step marked by verl-bot's `AgentLoopOutput.as_dict` hook; a
    step in which none is went past it (they would hold one scalar per response) and stops, naming the hook.
    Marked rows pass on to verl's method (here a stand-in that skips the advantage step, so the next check, of
    `multi_trajectory`, is the one that stops)."""
    import transfer_queue

    def kv_batch_get(keys, partition_id, select_fields):
        extra = {"reward_extra_info": {"score": 1.0}, **({DENSE_MARK: 1} if marked else {})}
        columns = {"extra_fields": [dict(extra) for _ in keys], "data_source": ["toy_lint"] * len(keys)}
        return {name: columns[name] for name in select_fields}

    monkeypatch.setattr(transfer_queue, "kv_batch_get", kv_batch_get)
    trainer = SimpleNamespace(config=compose_verl_config(["algorithm.adv_estimator=bot",
                                                          "reward.reward_manager.name=bot"]),
                              global_steps=1, total_training_steps=2)
    batch = SimpleNamespace(keys=[f"u{i}_0_0" for i in range(4)], partition_id="train", tags=[{}] * 4,
                            extra_info={}, fields=None)
    hook = "multi_trajectory.py" if marked else "agent_loop_output.py"
    with pytest.raises(VerlBotConfigError, match=rf"went past .* \(verl_bot/hooks/v1/{hook}\)"):
        _advantage_with_context(lambda *args, **kwargs: None, trainer, batch, {})
