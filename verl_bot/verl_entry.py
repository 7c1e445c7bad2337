"""Target of the `verl.plugins` entry point: verl imports this module in every process that imports verl.

verl only imports the entry point's module (`EntryPoint.load()`) and hides a
failure at DEBUG level, so this module calls `register()` itself and reports a
failure at ERROR level on stderr before re-raising it.
"""

from verl_bot.plugin import logger, register

try:
    register()
except Exception:
    logger.exception("verl-bot failed to register in verl; `bot` will be unknown to verl")
    raise
