"""One way to wrap a verl method or module function: signature-checked, idempotent, marked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verl_bot.compat import check_signature

PATCHED_ATTR = "__verl_bot_hook__"


def wrap(owner: Any, name: str, params: list[str], make_wrapper: Callable[[Callable], Callable]) -> str:
    """Replace `owner.name` (a class method or a module function) by `make_wrapper(original)`.

    Checks that the original's first parameters are `params` (`VerlApiMismatch` otherwise) and does nothing
    when `owner.name` is already a verl-bot wrapper. Returns the wrapped name, e.g. "PPOTrainer._compute_advantage".
    """
    label = f"{getattr(owner, '__name__', owner)}.{name}".rsplit(".", 2)[-2:]
    label = ".".join(label)
    original = getattr(owner, name)
    check_signature(original, params, label)
    if not getattr(original, PATCHED_ATTR, False):
        wrapper = make_wrapper(original)
        setattr(wrapper, PATCHED_ATTR, True)
        setattr(owner, name, wrapper)
    return label
