"""Target of the `verl.plugins` entry point: verl imports this module in every process that imports verl.

verl only imports the entry point's module (`EntryPoint.load()`), so this module calls `register()` itself.
`register()` never raises: a failure undoes all of verl-bot's changes and says so in one ERROR line.
"""

from verl_bot.plugin import register

register()
