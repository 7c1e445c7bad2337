"""Hook: `verl.trainer.main_ppo.run_ppo` (every verl driver's last step before Ray: the checks of a verl-bot run).

Every driver of verl 0.9.1 calls `run_ppo(config, task_runner_class)`, which starts Ray: `main_ppo` (after its
`validate_config`), verl's one-step-off trainer (whose `validate_config` runs inside Ray) and fully async trainer
(which never calls it), a recipe's driver. For a run that uses verl-bot (`verl_bot.launch.activation`; any other
run gets verl's function as it is): the start-up checks of `verl_bot.hooks.validate_config.start_run` with the
trainer path of its task runner (`verl_bot.launch.entry_points`), unless `validate_config` already ran them on this
config with that path, then what verl-bot cannot do with that task runner; one line, before Ray.
"""

from __future__ import annotations

import functools

from verl_bot.hooks.wrap import wrap


def _make_run_ppo(original):
    @functools.wraps(original)
    def run_ppo(config, task_runner_class, *args, **kwargs):
        from verl_bot.launch.activation import in_use

        if in_use(config):
            from verl_bot.errors import VerlBotConfigError
            from verl_bot.hooks.validate_config import start_run
            from verl_bot.launch.entry_points import entry_problem, runner_name, trainer_path

            runner = runner_name(task_runner_class)
            start_run(config, trainer_path(config, runner))
            problem = entry_problem(config, runner)
            if problem:
                raise VerlBotConfigError(problem)
        return original(config, task_runner_class, *args, **kwargs)

    return run_ppo


def install() -> list[str]:
    import verl.trainer.main_ppo as main_ppo

    return [wrap(main_ppo, "run_ppo", ["config", "task_runner_class"], _make_run_ppo)]
