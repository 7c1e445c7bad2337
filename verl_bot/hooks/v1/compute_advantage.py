"""Hook: `verl.trainer.ppo.v1.trainer_base.PPOTrainer._compute_advantage` (where v1 hands over its batch).

A run that does not use verl-bot (`verl_bot.launch.activation`) gets verl's method as it is. For one that does,
verl's method runs inside `verl_bot.training.advantage.advantage_call` over the batch read from TransferQueue
(`verl_bot.hooks.v1.batch.TQBatch`): the batch context, the dense-row and failure-rate stops, the token records.
First, a replay buffer built without `replay_buffer`'s hook stops the run (a reward configuration error would
not stop it).
"""

from __future__ import annotations

import functools
from typing import Any

from verl_bot.errors import inert
from verl_bot.hooks.v1.batch import TQBatch
from verl_bot.hooks.v1.replay_buffer import armed
from verl_bot.hooks.wrap import wrap
from verl_bot.launch.activation import in_use
from verl_bot.training.advantage import AdapterHooks, advantage_call

HOOKS = AdapterHooks(
    advantage=("PPOTrainer._compute_advantage", "hooks/v1/compute_advantage.py"),
    dense_rows=("AgentLoopOutput.as_dict", "hooks/v1/agent_loop_output.py"),
    failures=("trainer_base.compute_advantage_for_multi_trajectories", "hooks/v1/multi_trajectory.py"),
)


def check_buffer_armed(trainer: Any) -> None:
    """Stop the run when verl's replay buffer was built without verl-bot's fatal-marker check (its
    `_build_replay_buffer` hook never fired): a reward configuration error would then train on silently."""
    if not armed(getattr(trainer, "replay_buffer", None)):
        raise inert("PPOTrainer._build_replay_buffer", "hooks/v1/replay_buffer.py",
                    "a reward configuration error would not stop the run")


def _make_compute_advantage(original):
    @functools.wraps(original)
    def _compute_advantage(self, batch, metrics, *args, **kwargs):
        if not in_use(self.config):
            return original(self, batch, metrics, *args, **kwargs)
        check_buffer_armed(self)
        return advantage_call(self, TQBatch(batch), lambda: original(self, batch, metrics, *args, **kwargs),
                              metrics, HOOKS)

    return _compute_advantage


def install() -> list[str]:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return [wrap(PPOTrainer, "_compute_advantage", ["self", "batch", "metrics"], _make_compute_advantage)]
