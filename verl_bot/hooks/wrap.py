"""One way to wrap a verl method or module function: looked up and signature-checked, recorded, idempotent.

Inside `compat.collecting()` (the dry check) a wrap only looks up and checks, and records what it found."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from verl_bot.hooks.compat import VerlApiMismatch, check_signature, dry, note
from verl_bot.hooks.transaction import LEDGER

PATCHED_ATTR = "__verl_bot_hook__"


def label_of(owner: Any, name: str) -> str:
    """`Class.method` or `module.function`, e.g. "PPOTrainer._compute_advantage", "config.validate_config"."""
    return ".".join(f"{getattr(owner, '__name__', owner)}.{name}".rsplit(".", 2)[-2:])


def original_of(owner: Any, name: str) -> Any:
    """`owner.name`, or `VerlApiMismatch` naming it when verl has no such method or function (inside
    `compat.collecting()`: None, and the finding "missing")."""
    try:
        return getattr(owner, name)
    except AttributeError:
        import verl

        where = owner.__name__ if isinstance(owner, types.ModuleType) else f"{owner.__module__}.{owner.__qualname__}"
        if dry():
            note(label_of(owner, name), "missing", f"verl {verl.__version__} has no {where}.{name}")
            return None
        raise VerlApiMismatch(f"verl-bot: verl {verl.__version__} has no {where}.{name}") from None


def wrap(owner: Any, name: str, params: list[str], make_wrapper: Callable[[Callable], Callable]) -> str:
    """Replace `owner.name` (a class method or a module function) by `make_wrapper(original)`, in the ledger.

    `VerlApiMismatch` when verl has no `owner.name` or its first parameters are not `params`; nothing when
    `owner.name` is already a verl-bot wrapper. Returns the wrapped name, e.g. "PPOTrainer._compute_advantage".
    """
    label = label_of(owner, name)
    original = original_of(owner, name)
    check_signature(original, params, label)
    if dry():
        return label
    if not getattr(original, PATCHED_ATTR, False):
        wrapper = make_wrapper(original)
        setattr(wrapper, PATCHED_ATTR, True)
        LEDGER.setattr(owner, name, wrapper, label)
    return label
