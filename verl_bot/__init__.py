"""verl-bot: BoT-GRPO and token-level rewards for verl (loaded through the `verl.plugins` entry point).

`import verl` comes first: verl then loads this package's entry point and `verl_bot.plugin.register()` runs before
any submodule of verl_bot executes, so importing a submodule directly (say `verl_bot.advantage.bot`) can never
re-enter a half-initialised module through verl's plugin loader (what `register()` installs later waits until no
verl-bot module is half imported: `verl_bot.hooks.on_import`). Except in the command-line tools that need nothing of
verl (`LIGHT_COMMANDS`, run as `python -m <module>`: the evaluation CLI, the CPU demo's console, the smoke verdict, a
recipe's LongRoPE copy): they start in a fraction of a second, without verl's start-up warnings, and register nothing
in verl (they never train).
"""

import sys

__version__ = "0.1.0"
LIGHT_COMMANDS = ("verl_bot.eval", "verl_bot_demo.console", "verl_bot.launch.smoke", "verl_bot.launch.families")


def _light_command() -> bool:
    """True while `python -m <one of LIGHT_COMMANDS>` locates its module (sys.argv[0] is "-m" until then)."""
    argv = getattr(sys, "orig_argv", [])
    if sys.argv[:1] != ["-m"] or "-m" not in argv[:-1]:
        return False
    module = argv[argv.index("-m") + 1]
    return any(module == name or module.startswith(name + ".") for name in LIGHT_COMMANDS)


if not _light_command():
    import verl  # noqa: F401  (see the docstring)
