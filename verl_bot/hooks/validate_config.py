"""Hook: `verl.utils.config.validate_config` (a verl-bot run's start: checks, last words, its one INFO line).

`python -m verl.trainer.main_ppo` calls verl's `validate_config` on the composed config in the driver, before Ray
(verl's one-step-off trainer calls it inside Ray, where `verl_bot.hooks.run_ppo` already checked its driver).
`import verl` has imported `verl.utils.config` before it loads plugins and `main_ppo` imports the name after, so the
wrapper is what it calls: verl's own checks first, then, for a run that uses verl-bot (`verl_bot.launch.activation`;
any other gets verl's function as it is), `start_run` before Ray. The wrapped module is imported by every
`import verl`: this module imports nothing else of verl-bot until a run uses it. What is refused: docs/run_safety.md.
"""

from __future__ import annotations

import functools
import logging
import sys
from typing import Any

from verl_bot.hooks.wrap import wrap

logger = logging.getLogger("verl_bot")


_started: list[tuple[Any, str]] = []  # (config, trainer path) already checked in this process


def start_run(config: Any, path: str) -> None:
    """A run's start, for a config that uses verl-bot on trainer path `path` (once per config and path), in order:

    1. the driver's last words (`verl_bot.hooks.driver`): from here on an uncaught error ends with its root cause as
       the driver's last line;
    2. every touch point of the run's trainer path is checked in the driver (`verl_bot.hooks.touch_points.require`:
       the verl modules the run's processes will import are imported here, so their hooks install and check their
       targets before Ray starts); one changed or missing stops the run in one line naming the installed verl and
       the supported versions;
    3. `verl_bot.launch.preflight.check_config` refuses what cannot work with one clear line (`VerlBotConfigError`);
    4. one INFO line says that verl-bot is in use, and why.
    """
    if any(done is config and done_path == path for done, done_path in _started):
        return
    from verl_bot import __version__
    from verl_bot.hooks import driver
    from verl_bot.hooks.touch_points import require
    from verl_bot.launch.activation import reason
    from verl_bot.launch.preflight import check_config

    driver.install()
    require(config, path)
    check_config(config, path)
    _started.append((config, path))
    from verl_bot.rewards.settings import bot_manager_in_use, layout_line

    manager = f"; {layout_line(config)}" if bot_manager_in_use(config) else ""
    logger.info("verl-bot %s is in use in this run (%s); the %s trainer path%s; VERL_USE_EXTERNAL_PLUGINS=none turns "
                "it off", __version__, reason(config), path, manager)


def before_ray() -> bool:
    """True while this process has not started or joined Ray (a driver before `run_ppo`)."""
    ray = sys.modules.get("ray")
    return ray is None or not ray.is_initialized()


def _make_validate_config(original):
    @functools.wraps(original)
    def validate_config(config, *args, **kwargs):
        from verl_bot.launch.activation import in_use

        result = original(config, *args, **kwargs)
        if in_use(config) and before_ray():
            from verl_bot.launch.entry_points import trainer_path

            start_run(config, trainer_path(config))
        return result

    return validate_config


def install() -> list[str]:
    import verl.utils.config as verl_config

    params = ["config", "use_reference_policy", "use_critic"]
    return [wrap(verl_config, "validate_config", params, _make_validate_config)]
