"""The CPU backend alone: verl's own trainer on a CPU, without anything else of verl-bot.

    VERL_PLATFORM=cpu VERL_USE_EXTERNAL_PLUGINS=none VERL_USE_EXTERNAL_MODULES=verl_bot.cpu.backend_only \
        python -m verl.trainer.main_ppo <verl_bot/cpu/overrides.txt> ...

`VERL_USE_EXTERNAL_PLUGINS=none` is verl's switch that keeps it from loading
verl-bot's plugin (no estimator, reward manager, loss, agent loop or hook of
verl-bot's); `VERL_USE_EXTERNAL_MODULES` is verl's other extension point, the
modules `import verl` imports in every process. This one registers only what a
run needs on a CPU (`verl_bot.cpu.register_cpu_backend`): the baseline that a
stock run with the plugin loaded is compared with (tests/e2e/test_cpu_e2e.py,
`test_a_stock_grpo_run_is_the_same_with_the_plugin_loaded`).
"""

from verl_bot.cpu import register_cpu_backend

register_cpu_backend()
