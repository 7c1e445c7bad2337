"""Run a step when verl imports a module, so that a process changes only what it imports itself.

`when_imported(name, fn)` calls `fn()` right after the module `name` has executed (at once, when it already has),
through a finder in `sys.meta_path` that answers only for the awaited names and verl-bot's own modules (`_Finder`).
verl-bot therefore imports none of verl's heavy modules itself: a process that never imports verl's trainer (a vLLM
server, a script that only reads a `DataProto`) never gets the trainer's hooks, and `import verl` costs what it costs
without verl-bot (docs/PLUGIN.md, section What it changes in a run that does not use it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

OWN = "verl_bot."
_awaited: dict[str, list[Callable[[], Any]]] = {}
_waiting: list[Callable[[], Any]] = []
_importing: set[str] = set()  # verl-bot's modules being imported through the finder right now


def _run(fns: list[Callable[[], Any]]) -> None:
    """Run `fns` now, or once no verl-bot module is half imported.

    A step waits while one of verl-bot's own modules is half imported: when user code imports
    `verl_bot.rewards.manager` first, its own `from verl... import` makes verl import the registry whose step needs
    that very module. Counted are the verl-bot modules imported while the finder is in place: the plugin's own
    import chain, which started before it, is not waited for.
    """
    if _importing:
        _waiting.extend(fns)
        return
    for fn in fns:
        fn()


class _RunAfter:  # a loader (importlib.abc.Loader's protocol; importing that module costs more than all of this)
    """The module's own loader, then the steps awaiting the module (and those that waited for it)."""

    def __init__(self, loader: Any, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec) if hasattr(self._loader, "create_module") else None

    def exec_module(self, module: Any) -> None:
        own = self._name.startswith(OWN)
        if own:
            _importing.add(self._name)
        try:
            self._loader.exec_module(module)
        finally:
            _importing.discard(self._name)
        module.__loader__ = self._loader
        module.__spec__.loader = self._loader
        waiting = _waiting[:]
        _waiting.clear()
        _run(waiting + _awaited.pop(self._name, []))
        _leave_if_idle()

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, is_package, ... of the module's loader
        return getattr(self._loader, name)


class _Finder:  # a meta path finder (importlib.abc.MetaPathFinder's protocol)
    """Finds nothing itself: hands the specs of awaited modules and of verl-bot's on with their loaders wrapped.

    First in `sys.meta_path` while something is awaited (it leaves once nothing is); it asks the other finders for
    the module's spec and wraps the spec's loader (`_RunAfter`), whose `exec_module` runs the real one, gives the
    module its own loader back (`__loader__`, `__spec__.loader`: the module is the one it would be without
    verl-bot) and then runs the steps. The steps are `LEDGER.step`s: they never raise into verl's import.
    """

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in _awaited and not fullname.startswith(OWN):
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = None if finder is self or find is None else find(fullname, path, target)
            if spec is not None:
                if hasattr(spec.loader, "exec_module"):
                    spec.loader = _RunAfter(spec.loader, fullname)
                return spec
        return None


FINDER = _Finder()


def _leave_if_idle() -> None:
    if not _awaited and not _waiting and FINDER in sys.meta_path:
        sys.meta_path.remove(FINDER)


def when_imported(name: str, fn: Callable[[], Any]) -> None:
    """Call `fn()` once the module `name` is imported: now if it is, else right after verl imports it."""
    if FINDER not in sys.meta_path:
        sys.meta_path.insert(0, FINDER)
    if name in sys.modules:
        _run([fn])
    else:
        _awaited.setdefault(name, []).append(fn)
    _leave_if_idle()


def awaited() -> list[str]:
    """The modules whose import some step still waits for."""
    return sorted(_awaited)


def cancel() -> None:
    """Forget every awaited and waiting step (verl-bot is off) and leave `sys.meta_path`."""
    _awaited.clear()
    _waiting.clear()
    _leave_if_idle()
