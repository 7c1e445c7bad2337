"""All or nothing: every change verl-bot makes to verl in this process, each with its undo.

verl-bot changes verl in small steps, each when verl imports the module it
changes (`verl_bot.hooks.on_import`): a wrapper, a registry entry, a default.
`LEDGER.step(what, fn)` runs one step; the step makes its changes through
`setattr`, `setitem` and `setenv` (or `record`s its own undo). When a step
raises, every change of every step so far is undone, newest first, the steps
still to come are cancelled, and ONE error line says what is unavailable and
why: verl then runs in this process exactly as it would without verl-bot.
"""

from __future__ import annotations

import logging
import os
import types
from collections.abc import Callable, MutableMapping
from typing import Any, TypeVar

from verl_bot.hooks import on_import

logger = logging.getLogger("verl_bot")

T = TypeVar("T")
_MISSING = object()
UNAVAILABLE = (
    "verl-bot's estimators, policy losses, reward manager, agent loop and hooks are unknown to verl in this process"
)


class VerlBotOff(RuntimeError):
    """A change was asked for after an earlier step failed: verl-bot is off in this process."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message ("" for none)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


class Ledger:
    """The changes made so far (label, undo), and why verl-bot is off (`failure`, None while it is on)."""

    def __init__(self) -> None:
        self._undo: list[tuple[str, Callable[[], None]]] = []
        self.failure: str | None = None
        self.on_failure: Callable[[str], None] | None = None  # called once with `failure` (the plugin's refuser)

    @property
    def changes(self) -> list[str]:
        """The labels of the changes in force, oldest first."""
        return [label for label, _ in self._undo]

    def record(self, label: str, undo: Callable[[], None]) -> None:
        """Remember a change made by the caller and how to take it back."""
        if self.failure is not None:
            undo()
            raise VerlBotOff(self.failure)
        self._undo.append((label, undo))

    def setattr(self, owner: Any, name: str, value: Any, label: str) -> None:
        """`owner.name = value`; undone by restoring the old value (or deleting the attribute `owner` lacked:
        a class then inherits again, a module loses the name)."""
        own = isinstance(owner, type | types.ModuleType)
        old = vars(owner).get(name, _MISSING) if own else getattr(owner, name)
        setattr(owner, name, value)
        self.record(label, lambda: delattr(owner, name) if old is _MISSING else setattr(owner, name, old))

    def setitem(self, mapping: MutableMapping, key: Any, value: Any, label: str) -> None:
        """`mapping[key] = value`; undone by restoring the old entry or removing the new one."""
        old = mapping.get(key, _MISSING)
        mapping[key] = value
        self.record(label, lambda: mapping.pop(key, None) if old is _MISSING else mapping.__setitem__(key, old))

    def setenv(self, name: str, value: str | None, label: str) -> None:
        """`os.environ[name] = value` (None: remove it); undone by restoring the old value or its absence."""
        if value is not None:
            self.setitem(os.environ, name, value, label)
            return
        old = os.environ.pop(name, None)
        self.record(label, lambda: os.environ.__setitem__(name, old) if old is not None else None)

    def step(self, what: str, fn: Callable[[], T]) -> T | None:
        """Run `fn` (one step: `what`, as the error line names it); on any error undo everything, return None."""
        if self.failure is not None:
            return None
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - whatever breaks, verl must be left as it was
            if self.failure is None:  # a nested step already undid everything and said why
                self.fail(what, exc)
            return None

    def fail(self, what: str, exc: BaseException) -> None:
        """Undo every change, cancel what is still to come and log the one error line."""
        undone = len(self._undo)
        self.rollback()
        on_import.cancel()
        self.failure = f"{what}: {type(exc).__name__}: {first_line(exc)}"
        logger.error(
            "verl-bot is off (pid %d): %s. Its %d change(s) to verl were undone and nothing more is installed, so "
            "verl runs as without verl-bot; %s",
            os.getpid(),
            self.failure,
            undone,
            UNAVAILABLE,
        )
        logger.debug("verl-bot: the failed step's traceback", exc_info=exc)
        if self.on_failure is not None:
            try:
                self.on_failure(self.failure)
            except Exception:  # noqa: BLE001 - the error line above stands; verl runs on
                logger.debug("verl-bot: could not install the refusal of verl-bot runs", exc_info=True)

    def rollback(self) -> None:
        """Undo every recorded change, newest first (an undo that fails does not stop the others)."""
        while self._undo:
            label, undo = self._undo.pop()
            try:
                undo()
            except Exception:  # noqa: BLE001 - the other changes must be undone all the same
                logger.debug("verl-bot: could not undo %s", label, exc_info=True)


LEDGER = Ledger()
