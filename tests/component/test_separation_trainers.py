"""verl's one-step-off and fully async trainers hand their batch to verl-bot's step logic: their own methods, on verl's
code, with a `bot` run's batch.

Both trainers are `SeparateRayPPOTrainer`s (`verl.experimental.separation.ray_trainer`), whose `fit_step` computes
the advantages in `_fit_compute_advantage` and the iteration's metrics in `_fit_collect_metrics`, with the functions
that module bound by name at its import (`compute_advantage`, `compute_data_metrics`): verl-bot's wrappers. Those
methods run here on a `DataProto` as the legacy agent loop leaves it (dense rows, their checksums, a failed row),
for a trainer registered the way `RayPPOTrainer.__init__`'s hook registers it. Running the trainers themselves needs
a standalone rollout with a GPU checkpoint engine (refused on the CPU before Ray: tests/component/test_entry_points.py).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from verl.experimental.fully_async_policy.fully_async_trainer import FullyAsyncTrainer
from verl.experimental.one_step_off_policy.ray_trainer import OneStepOffRayTrainer
from verl.experimental.separation.ray_trainer import SeparateRayPPOTrainer

from tests.conftest import compose_verl_config
from tests.harness.batches import legacy_batch
from verl_bot.hooks.legacy import trainer as legacy_trainer

BOT = ["algorithm.adv_estimator=bot", "reward.reward_manager.name=bot"]


def separation_batch():
    """Two groups of the `bot` manager's rollouts: group a's three (the third failed), group b's two."""
    return legacy_batch([[1.0, 1.0], [0.0, 0.0], [9.0, 9.0], [2.0, 2.0], [0.0, 2.0]], ["a", "a", "a", "b", "b"],
                        [False, False, True, False, False])


@pytest.fixture
def trainer():
    """What `SeparateRayPPOTrainer`'s advantage and metrics steps read of the trainer, registered as this process's
    legacy-family trainer of a verl-bot run."""
    config = compose_verl_config([*BOT, "trainer.logger=[console]"])
    data = separation_batch()
    trainer = SimpleNamespace(
        config=config, global_steps=1, total_training_steps=2, metrics={}, timing_raw={"step": 1.0},
        reward_tensor=data.batch["rm_scores"], reward_extra_infos_dict={}, use_critic=False, tokenizer=None,
        resource_pool_manager=SimpleNamespace(get_n_gpus=lambda: 1), data=data,
    )
    legacy_trainer.register(trainer)
    yield trainer
    legacy_trainer._trainer.clear()


def test_verls_async_trainers_inherit_the_separation_trainers_hand_over():
    for cls in (OneStepOffRayTrainer, FullyAsyncTrainer.__ray_actor_class__):  # the latter is a Ray actor class
        assert cls._fit_compute_advantage is SeparateRayPPOTrainer._fit_compute_advantage
        assert cls._fit_collect_metrics is SeparateRayPPOTrainer._fit_collect_metrics


def test_the_separation_trainers_steps_run_verl_bots_step_logic(trainer):
    out = SeparateRayPPOTrainer._fit_compute_advantage(trainer, trainer.data)
    # group a without its failed row: tokens 1,1,0,0 of weight 1/4: mean 0.5, std 0.5 -> A = +1, -1 (BoT's eps 1e-6)
    # group b: tokens 2,2,0,2: mean 1.5, std sqrt(0.75) -> A = (r - 1.5) / 0.866
    b = 1 / np.sqrt(0.75)
    expected = torch.tensor([[1.0, 1.0], [-1.0, -1.0], [0.0, 0.0], [0.5 * b, 0.5 * b], [-1.5 * b, 0.5 * b]])
    torch.testing.assert_close(out.batch["advantages"], expected.float(), atol=1e-4, rtol=0)
    SeparateRayPPOTrainer._fit_collect_metrics(trainer, out)
    assert trainer.metrics["verl_bot/scorer_failed_rows"] == 1.0
    assert trainer.metrics["verl_bot/zero_advantage_rows"] == 1.0
    assert trainer.metrics["reward/scorer_failed/mean"] == pytest.approx(1 / 5)
    assert trainer.metrics["bot/adv_abs_max"] > 0  # the estimator's diagnostics reached the iteration's metrics


def test_a_changed_row_stops_the_separation_trainers_step(trainer):
    trainer.data.batch["rm_scores"] = trainer.data.batch["rm_scores"] * 2  # every row: not what was scored
    trainer.reward_tensor = trainer.data.batch["rm_scores"]
    with pytest.raises(ValueError, match="token rewards of row 0 .* changed between the reward loop"):
        SeparateRayPPOTrainer._fit_compute_advantage(trainer, trainer.data)
