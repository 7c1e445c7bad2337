"""Hook: `verl.utils.config.validate_config` (start-up checks before any model loads).

`python -m verl.trainer.main_ppo` calls verl's `validate_config` on the fully
composed config in the driver, before Ray starts. Its module imports the name
after verl has loaded this plugin, so the wrapper is what it calls: verl's own
checks first, then `verl_bot.preflight.check_config`, which refuses what cannot
work with one clear line (`VerlBotConfigError`).
"""

from __future__ import annotations

import functools

from verl_bot.hooks._patch import wrap
from verl_bot.preflight import check_config


def _make_validate_config(original):
    @functools.wraps(original)
    def validate_config(config, *args, **kwargs):
        result = original(config, *args, **kwargs)
        check_config(config)
        return result

    return validate_config


def install() -> list[str]:
    import verl.utils.config as verl_config

    params = ["config", "use_reference_policy", "use_critic"]
    return [wrap(verl_config, "validate_config", params, _make_validate_config)]
