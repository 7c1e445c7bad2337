"""verl-bot: BoT-GRPO and token-level rewards for verl (loaded through the `verl.plugins` entry point).

`import verl` comes first: verl then loads this package's entry point and
`verl_bot.plugin.register()` runs before any submodule of verl_bot executes,
so importing a submodule directly (say `verl_bot.advantage.bot`) can never
re-enter a half-initialised module through verl's plugin loader.
"""

import verl  # noqa: F401  (see the docstring)

__version__ = "0.1.0"
