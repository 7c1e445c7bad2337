"""The processes a recipe starts, and what a stop of the recipe does to them.

A recipe is stopped by SIGHUP, SIGINT or SIGTERM (Ctrl-C, `kill`, a scheduler). While its trainer runs, a stop
becomes a SIGTERM of the trainer, whose driver (verl_bot/hooks/driver.py) takes it as Ctrl-C's KeyboardInterrupt: Ray
shuts down and takes its actors with it; the recipe waits for the trainer and ends with its exit code, and the same
command then resumes from the last checkpoint (docs/long_runs.md). While no trainer runs, a stop ends the recipe with
128 + the signal's number (`Stopped`). Either way the services it started (reward server, judges, PRM) are stopped
on its way out. The trainer and the services ignore the terminal's SIGINT, as a shell's background jobs do: the
recipe's SIGTERM is their one stop.

No window: a stop that lands while a process is being started (after the fork, before its pid is known here) is
held and takes effect once the pid is recorded.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence
from contextlib import contextmanager
from typing import Any

STOPS = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)
STOP_WAIT_S = 60  # a service that has not exited this long after its SIGTERM is killed


class Stopped(Exception):
    """The recipe was stopped while no trainer ran: it ends with `code` (128 + the signal's number)."""

    def __init__(self, code: int):
        super().__init__(f"stopped (exit {code})")
        self.code = code


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def exit_code(returncode: int) -> int:
    """A process's exit code as a shell reports it: 128 + n for one killed by signal n."""
    return 128 - returncode if returncode < 0 else returncode


class Supervisor:
    """Starts the recipe's services and its trainer, forwards a stop to the trainer, stops the services at the end.

        with Supervisor() as sup:   # a stop from here on: see the module docstring
            sup.start(argv, ...)    # a service, stopped when the block ends
            rc = sup.run(argv, ...) # the trainer, to its end
    """

    def __init__(self) -> None:
        self.services: list[subprocess.Popen] = []
        self.trainer: subprocess.Popen | None = None
        self._holding = False
        self._held = 0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Supervisor:
        for signum in STOPS:
            self._previous[signum] = signal.signal(signum, self._on_stop)
        return self

    def __exit__(self, *exc: object) -> None:
        self._holding = True  # a stop while the services stop is noted, not acted on
        self.stop_services()
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _on_stop(self, signum: int, frame: object = None) -> None:
        if self._holding:
            self._held = self._held or 128 + signum
        elif self.trainer is not None:
            try:
                self.trainer.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        else:
            raise Stopped(128 + signum)

    @contextmanager
    def _held_stops(self):
        """Hold a stop until the block has recorded the process it starts; then act on it."""
        self._holding, self._held = True, 0
        try:
            yield
        finally:
            self._holding = False
        if self._held:
            self._on_stop(self._held - 128)

    def start(self, argv: Sequence[str], **popen: Any) -> subprocess.Popen:
        """Start a service (stopped when the supervisor's block ends)."""
        with self._held_stops():
            self.services.append(subprocess.Popen(list(argv), preexec_fn=_ignore_sigint, **popen))
        return self.services[-1]

    def run(self, argv: Sequence[str], **popen: Any) -> int:
        """Run the trainer to its end, a stop of the recipe forwarded to it as SIGTERM; its exit code."""
        with self._held_stops():
            self.trainer = subprocess.Popen(list(argv), preexec_fn=_ignore_sigint, **popen)
        try:
            return exit_code(self.trainer.wait())
        finally:
            self.trainer = None

    def stop_services(self) -> None:
        for proc in self.services:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.services:
            try:
                proc.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.services.clear()
