"""A verl-bot hook that a changed verl would leave silently inert stops the run at its first use, in one line.

Checked on verl's own objects: the v1 trainer's advantage step must go through verl-bot's failed-row exclusion
(`verl_bot.training.failures`, reached through `compute_advantage_for_multi_trajectories`), its replay buffer must
carry verl-bot's fatal-marker check (`verl_bot.hooks.v1.replay_buffer.arm`), the `bot` manager's rows must arrive
marked and unchanged (`verl_bot.training.rows`), and an actor update must follow an advantage call of verl-bot's.
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
from tests.harness.batches import legacy_batch
from verl_bot.credit.context import BatchContext, use_context
from verl_bot.errors import VerlBotConfigError, inert
from verl_bot.hooks.legacy.batch import ProtoBatch
from verl_bot.hooks.v1.compute_advantage import HOOKS as V1_HOOKS
from verl_bot.hooks.v1.compute_advantage import check_buffer_armed
from verl_bot.hooks.v1.replay_buffer import arm
from verl_bot.training import failures
from verl_bot.training.actor_update import ADVANTAGE_ATTR, check_advantage_call
from verl_bot.training.advantage import advantage_call
from verl_bot.training.rows import row_checksum


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


BOT_TRAINER = SimpleNamespace(config=compose_verl_config(["algorithm.adv_estimator=bot",
                                                          "reward.reward_manager.name=bot"]),
                              global_steps=1, total_training_steps=2)


@pytest.mark.parametrize("marked", [False, True])
def test_a_dense_step_whose_rows_went_past_the_dense_row_hook_stops_the_run(marked):
    """The `bot` manager's rows reach the advantage step marked by the adapter's hook (v1's here:
    `AgentLoopOutput.as_dict`); a step in which none is went past it (they would hold one scalar per response) and
    stops, naming the hook. Marked rows pass on to verl's computation (here a stand-in that skips the advantage
    function, so the next check, of `multi_trajectory`, is the one that stops)."""
    rewards = [[1.0, 0.5], [0.0]]
    marks = [row_checksum(torch.tensor(r)) for r in rewards] if marked else ["", ""]
    hook = "multi_trajectory.py" if marked else "agent_loop_output.py"
    with pytest.raises(VerlBotConfigError, match=rf"went past .* \(verl_bot/hooks/v1/{hook}\)"):
        batch = ProtoBatch(legacy_batch(rewards, ["u", "u"], marks=marks))
        advantage_call(BOT_TRAINER, batch, lambda: None, {}, V1_HOOKS)


def test_a_row_whose_token_rewards_changed_on_the_way_stops_the_run_naming_it():
    """A data plane that drops or mangles a row's token rewards between the reward loop and the advantage step (a
    batch class handing out copies, an in-place write lost) no longer matches the row's checksum: the step stops,
    naming the row, before any advantage is computed."""
    rewards = [[1.0, 0.5], [0.0, 2.0]]
    marks = [row_checksum(torch.tensor(r)) for r in rewards]
    data = legacy_batch([rewards[0], [0.0, 0.0]], ["u", "u"], marks=marks)  # row 1 lost its 2.0
    calls = []
    with pytest.raises(VerlBotConfigError, match=r"token rewards of row 1 \(uid u, data_source toy, 2 tokens\) "
                                                 r"changed between the reward loop and the advantage step"):
        advantage_call(BOT_TRAINER, ProtoBatch(data), lambda: calls.append(1), {}, V1_HOOKS)
    assert calls == []


class CopyingBatch(dict):
    """A field accessor that hands out copies (as verl's NeoProto's `batch` proxy does): a write into what it
    returns is lost, an assignment of a whole field is kept."""

    def __getitem__(self, key):
        return super().__getitem__(key).clone()


def test_verl_bots_writes_survive_a_batch_class_that_hands_out_copies():
    """verl-bot writes verl's batch fields by assignment: the failed-row exclusion's zeroed advantages survive a
    batch whose fields are copies, where an in-place write (`out.batch["advantages"][rows] = 0`) would be lost."""
    data = SimpleNamespace(
        batch=CopyingBatch(token_level_rewards=torch.tensor([[1.0], [0.0], [5.0]])),
        non_tensor_batch={"uid": np.array(["a", "a", "a"], dtype=object)},
    )

    def compute(d):  # an estimator's output: every row a nonzero advantage
        d.batch["advantages"] = torch.ones(3, 1)
        d.batch["returns"] = torch.ones(3, 1)
        return d

    with use_context(BatchContext(failed=torch.tensor([False, False, True]))):
        out = failures.advantages_without_failures(compute, data, "grpo")
    assert out.batch["advantages"].tolist() == [[1.0], [1.0], [0.0]]
    assert out.batch["token_level_rewards"].tolist() == [[1.0], [0.0], [0.0]]  # the failed row's rewards: 0


def test_an_update_whose_iteration_skipped_the_advantage_call_stops_the_run():
    """A trainer that computes its advantages another way (never handing its batch over where verl-bot's step logic
    runs) stops before its actor update, naming the trainer and the hand-over."""
    trainer = SimpleNamespace(global_steps=3)
    with pytest.raises(VerlBotConfigError, match=r"went past PPOTrainer._compute_advantage .* SimpleNamespace "
                                                 r"computed this iteration's advantages another way"):
        check_advantage_call(trainer, V1_HOOKS.advantage)
    trainer.__dict__[ADVANTAGE_ATTR] = 3
    check_advantage_call(trainer, V1_HOOKS.advantage)  # went through at this iteration: passes
