"""verl's version and API checks: the gate of the hooks folder (it imports only `verl_bot.errors`).

verl 0.9.1 imports every `verl.plugins` entry point in every process and logs a
failure only at DEBUG level, so verl-bot checks verl itself and raises
`VerlApiMismatch` with a clear message when the installed verl is not the one it
was written against. Every wrapper of a verl method (`verl_bot.hooks`) checks
the wrapped signature with `check_signature` before installing itself.

Inside `collecting()` (the dry check of `verl_bot.hooks.touch_points`) nothing
raises: each lookup and signature check appends a `Finding` (found, changed,
missing) and `verl_bot.hooks.wrap` installs nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

from verl_bot.errors import VerlApiMismatch

logger = logging.getLogger("verl_bot")

# the verl releases whose touch points `verl_bot.hooks.touch_points` finds and whose trainer verl-bot's tests ran;
# pyproject.toml's dependency on verl says the same
SUPPORTED_VERSIONS = ("0.9.0", "0.9.1")
SUPPORTED_VERL = (f"=={SUPPORTED_VERSIONS[0]}" if len(SUPPORTED_VERSIONS) == 1
                  else f">={SUPPORTED_VERSIONS[0]},<={SUPPORTED_VERSIONS[-1]}")  # as a version specifier (PEP 440)
ALLOW_MISMATCH_ENV = "VERL_BOT_ALLOW_VERL_MISMATCH"


def supports(version: str) -> bool:
    """True when verl `version` is one verl-bot supports (one of `SUPPORTED_VERSIONS`)."""
    return version in SUPPORTED_VERSIONS


def check_verl_version() -> None:
    """Raise `VerlApiMismatch` unless the installed verl is a supported version.

    `VERL_BOT_ALLOW_VERL_MISMATCH=1` turns the error into a warning (for trying a newer verl at your own risk).
    """
    import verl

    if supports(verl.__version__):
        return
    msg = f"verl-bot supports verl{SUPPORTED_VERL}, found verl=={verl.__version__}"
    if os.getenv(ALLOW_MISMATCH_ENV) == "1":
        logger.warning("%s (continuing: %s=1)", msg, ALLOW_MISMATCH_ENV)
        return
    raise VerlApiMismatch(f"{msg}; set {ALLOW_MISMATCH_ENV}=1 to try anyway")


def unsupported_message(verl_version: str, what: str) -> str:
    """The one line that stops a verl-bot run on a verl it cannot run with (`what`: why)."""
    from verl_bot import __version__

    return (f"verl-bot {__version__} cannot run with the installed verl {verl_version} (supported: verl"
            f"{SUPPORTED_VERL}): {what}")


@dataclass(frozen=True)
class Finding:
    """One touch point as the installed verl has it: `status` is "found", "changed" or "missing"."""

    label: str  # "RayPPOTrainer.fit", "adv_estimator:bot", "verl.trainer.ppo.v1.trainer_base"
    status: str
    detail: str = ""  # what is missing or changed, as one sentence


_findings: contextvars.ContextVar[list[Finding] | None] = contextvars.ContextVar("verl_bot_findings", default=None)


@contextlib.contextmanager
def collecting() -> Iterator[list[Finding]]:
    """Inside the block, lookups and signature checks record `Finding`s in the yielded list instead of raising."""
    findings: list[Finding] = []
    token = _findings.set(findings)
    try:
        yield findings
    finally:
        _findings.reset(token)


def dry() -> bool:
    """True inside `collecting()`: check, change nothing."""
    return _findings.get() is not None


def note(label: str, status: str, detail: str = "") -> None:
    """Record a finding inside `collecting()`; outside it a "found" passes and anything else raises."""
    findings = _findings.get()
    if findings is not None:
        findings.append(Finding(label, status, detail))
    elif status != "found":
        raise VerlApiMismatch(f"verl-bot: {detail}")


def check_signature(fn, expected: list[str], where: str) -> None:
    """Raise `VerlApiMismatch` unless the first parameters of `fn` are named `expected` (inside `collecting()`:
    record it). `fn` None: verl has no such function, already recorded by its lookup."""
    if fn is None and dry():
        return
    params = list(inspect.signature(fn).parameters)[: len(expected)]
    if params == expected:
        note(where, "found")
    else:
        note(where, "changed", f"{where} has parameters {params}, expected {expected}")
