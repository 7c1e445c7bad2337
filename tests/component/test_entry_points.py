"""verl's entry points before Ray: each task runner's trainer path, what the CPU platform refuses, and the `run_ppo`
hook that checks a verl-bot run on every driver (verl's fully async driver never calls `validate_config`)."""

from __future__ import annotations

import pytest
from verl.experimental.fully_async_policy.fully_async_main import FullyAsyncTaskRunner
from verl.experimental.one_step_off_policy.main_ppo import OneStepTaskRunner
from verl.trainer.main_ppo import TaskRunnerV1

from tests.conftest import compose_verl_config
from verl_bot.errors import VerlBotConfigError
from verl_bot.hooks import driver
from verl_bot.hooks.run_ppo import _make_run_ppo
from verl_bot.launch.entry_points import ENTRIES, entry_problem, runner_name, trainer_path

BOT = ["algorithm.adv_estimator=bot", "reward.reward_manager.name=bot"]


def test_each_task_runner_has_its_trainer_path():
    names = [runner_name(cls) for cls in (TaskRunnerV1, OneStepTaskRunner, FullyAsyncTaskRunner)]
    assert names == ["verl.trainer.main_ppo.TaskRunnerV1",
                     "verl.experimental.one_step_off_policy.main_ppo.OneStepTaskRunner",
                     "verl.experimental.fully_async_policy.fully_async_main.FullyAsyncTaskRunner"]
    assert all(name in ENTRIES for name in names)
    config = compose_verl_config(BOT)  # trainer.use_v1 is true in every one of these configs
    assert [trainer_path(config, name) for name in names] == ["v1", "legacy", "legacy"]
    assert trainer_path(config, "recipe.dapo.main_dapo.TaskRunner") == "legacy"  # a recipe's: a RayPPOTrainer
    assert trainer_path(compose_verl_config(["trainer.use_v1=false"])) == "legacy"


def test_the_cpu_platform_refuses_the_trainers_that_need_a_standalone_rollout():
    cpu, gpu = compose_verl_config([*BOT, "trainer.device=cpu"]), compose_verl_config(BOT)
    one_step = runner_name(OneStepTaskRunner)
    assert entry_problem(cpu, one_step).startswith(
        "python -m verl.experimental.one_step_off_policy.main_ppo with verl-bot on the CPU platform: its actor")
    assert entry_problem(gpu, one_step) is None
    assert entry_problem(cpu, runner_name(TaskRunnerV1)) is None


def test_every_driver_checks_a_verl_bot_run_before_ray(monkeypatch):
    """`run_ppo`'s hook: the start-up checks, then the entry's refusal, before verl's `run_ppo` (which starts Ray)
    runs; a stock run and an accepted one reach it with the same arguments."""
    monkeypatch.setattr(driver, "install", lambda: None)
    started = []
    run_ppo = _make_run_ppo(lambda config, cls, **kwargs: started.append((cls, kwargs)))
    with pytest.raises(VerlBotConfigError, match="fully_async_main with verl-bot on the CPU platform"):
        run_ppo(compose_verl_config([*BOT, "trainer.device=cpu"]), FullyAsyncTaskRunner)
    with pytest.raises(VerlBotConfigError, match="use_kl_in_reward"):  # a check of preflight, for this driver too
        run_ppo(compose_verl_config([*BOT, "algorithm.use_kl_in_reward=true"]), FullyAsyncTaskRunner)
    assert started == []
    run_ppo(compose_verl_config(["algorithm.adv_estimator=grpo"]), FullyAsyncTaskRunner, extra=1)  # not verl-bot's
    run_ppo(compose_verl_config(BOT), OneStepTaskRunner)  # on a GPU node
    assert started == [(FullyAsyncTaskRunner, {"extra": 1}), (OneStepTaskRunner, {})]
