"""verl's version and API checks: the gate of the hooks folder (it imports only `verl_bot.errors`).

verl 0.9.1 imports every `verl.plugins` entry point in every process and logs a
failure only at DEBUG level, so verl-bot checks verl itself and raises
`VerlApiMismatch` with a clear message when the installed verl is not the one it
was written against. Every wrapper of a verl method (`verl_bot.hooks`) checks
the wrapped signature with `check_signature` before installing itself.
"""

from __future__ import annotations

import inspect
import logging
import os

from verl_bot.errors import VerlApiMismatch

logger = logging.getLogger("verl_bot")

SUPPORTED_VERL = "0.9.1"
ALLOW_MISMATCH_ENV = "VERL_BOT_ALLOW_VERL_MISMATCH"


def check_verl_version() -> None:
    """Raise `VerlApiMismatch` unless the installed verl is the supported version.

    `VERL_BOT_ALLOW_VERL_MISMATCH=1` turns the error into a warning (for trying a newer verl at your own risk).
    """
    import verl

    if verl.__version__ == SUPPORTED_VERL:
        return
    msg = f"verl-bot supports verl=={SUPPORTED_VERL}, found verl=={verl.__version__}"
    if os.getenv(ALLOW_MISMATCH_ENV) == "1":
        logger.warning("%s (continuing: %s=1)", msg, ALLOW_MISMATCH_ENV)
        return
    raise VerlApiMismatch(f"{msg}; set {ALLOW_MISMATCH_ENV}=1 to try anyway")


def check_signature(fn, expected: list[str], where: str) -> None:
    """Raise `VerlApiMismatch` unless the first parameters of `fn` are named `expected`."""
    params = list(inspect.signature(fn).parameters)[: len(expected)]
    if params != expected:
        raise VerlApiMismatch(f"verl-bot: {where} has parameters {params}, expected {expected}")
