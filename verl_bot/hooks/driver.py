"""The driver's last words: the root cause of a failed run is the last line it prints.

Not a verl method but verl's driver (`python -m verl.trainer.main_ppo`): an error in the trainer reaches it as a
`RayTaskError` wrapped around the original exception; Hydra 1.3 trims the traceback, and Ray's log monitor goes on
printing worker lines after it, so the message that names the problem ends up hundreds of lines above the end.
`install()` makes the root cause the last line and SIGTERM what Ctrl-C is: docs/run_safety.md (the message is the
last line), docs/long_runs.md (Stop a run).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading

HYDRA_ENV = "HYDRA_FULL_ERROR"
PREFIX = "verl-bot: run stopped:"
_causes: list[BaseException] = []
_installed = False


def root_cause(exc: BaseException) -> BaseException:
    """The innermost original error of `exc` (through Ray's `RayTaskError.cause` and `__cause__`)."""
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        inner = getattr(exc, "cause", None)
        if not isinstance(inner, BaseException):
            inner = exc.__cause__
        if inner is None:
            break
        exc = inner
    return exc


def last_line(exc: BaseException) -> str:
    """`verl-bot: run stopped: <Type>: <first line of the message>` of the root cause."""
    cause = root_cause(exc)
    message = str(cause).strip().splitlines()
    return f"{PREFIX} {type(cause).__name__}: {message[0] if message else ''}".rstrip()


def _make_excepthook(original):
    def excepthook(exc_type, exc, tb):
        original(exc_type, exc, tb)
        if exc is not None and not isinstance(exc, KeyboardInterrupt | SystemExit):
            _causes.append(exc)

    return excepthook


def _at_exit() -> None:
    if not _causes:
        return
    try:
        import ray

        if ray.is_initialized():
            ray.shutdown()
    except Exception:  # noqa: BLE001 - the message below matters more than a clean shutdown
        pass
    print(last_line(_causes[-1]), file=sys.stderr, flush=True)


def install() -> list[str]:
    """The driver's last words (by `verl_bot.hooks.validate_config`, in the driver of a run that uses verl-bot, never
    elsewhere; only a driver that dies of an uncaught exception prints anything):

    - `HYDRA_FULL_ERROR=1` unless the user set it (Hydra re-raises instead of trimming);
    - `sys.excepthook` wrapped: the original prints the traceback, then the root cause (the innermost
      `RayTaskError.cause` / `__cause__`) is remembered;
    - at exit (before Ray's own exit handler, which was registered first): Ray shut down, so no worker line follows,
      then `verl-bot: run stopped: <Type>: <message>` on stderr;
    - SIGTERM made what Ctrl-C is (a `KeyboardInterrupt` in the main thread) unless the process has its own SIGTERM
      handler: Python's default ends the driver at once, without Ray's shutdown, and the Ray cluster it started goes
      on training (a scheduler's stop, `kill`, or a recipe's stop, `verl_bot/recipes/supervise.py`).
    """
    global _installed
    if not _installed:
        os.environ.setdefault(HYDRA_ENV, "1")
        sys.excepthook = _make_excepthook(sys.excepthook)
        atexit.register(_at_exit)
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, signal.default_int_handler)
        _installed = True
    return ["sys.excepthook(driver's last line)", "SIGTERM(as Ctrl-C)"]
