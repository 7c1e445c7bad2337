"""One way to wrap a verl method or module function: signature-checked, idempotent, marked; and a way to wrap
one only once its module is imported (`when_imported`), so that a process that never imports a heavy verl
module (say verl's vLLM rollout, which imports vLLM) never imports it for a hook."""

from __future__ import annotations

import importlib.abc
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from verl_bot.compat import check_signature

PATCHED_ATTR = "__verl_bot_hook__"


class _AfterExec(importlib.abc.Loader):
    """A loader that runs `then(module)` after the real loader executed the module."""

    def __init__(self, loader: importlib.abc.Loader, then: Callable[[ModuleType], None]):
        self._loader, self._then = loader, then

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._then(module)

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, resource readers, ...
        return getattr(self._loader, name)


class _WhenImported(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a watched module it takes the spec the other finders give and runs the module's
    callbacks after it is executed (at most once each)."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callable[[ModuleType], None]]] = {}
        self._lock = threading.Lock()

    def find_spec(self, name, path, target=None):
        if name not in self.callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _AfterExec(spec.loader, self.run)
                return spec
        return None

    def run(self, module: ModuleType) -> None:
        with self._lock:
            callbacks = self.callbacks.pop(module.__name__, [])
        for callback in callbacks:
            callback(module)


_WATCHER = _WhenImported()


def when_imported(module_name: str, callback: Callable[[ModuleType], None]) -> None:
    """Run `callback(module)` once `module_name` is imported: now if it already is, else right after its import."""
    module = sys.modules.get(module_name)
    if module is not None:
        callback(module)
        return
    with _WATCHER._lock:
        _WATCHER.callbacks.setdefault(module_name, []).append(callback)
    if _WATCHER not in sys.meta_path:
        sys.meta_path.insert(0, _WATCHER)


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
