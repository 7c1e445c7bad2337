"""What a stop (SIGTERM, SIGINT, SIGHUP: Ctrl-C, `kill`, a scheduler) of a recipe does to the processes it started
(verl_bot/recipes/supervise.py): the trainer gets it as SIGTERM and the recipe ends with the trainer's code once the
trainer has stopped; a stop with no trainer running ends the recipe with 128 + the signal's number; the services it
started are stopped on every way out. Each window is hit on purpose (the stop sent the moment the process exists, or
after a random few milliseconds), many times.

The recipe's side is `Supervisor` in a small Python process (loaded from its file: it needs only the standard
library, so the process starts in milliseconds and the stop lands where the test aims); the trainer and the service
are Python processes that note what they got. Resuming after a stop: tests/e2e/test_e2e_resume.py; the driver's
SIGTERM as Ctrl-C: tests/component/test_run_safety.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
LOAD = (
    "import importlib.util, sys\n"
    f"spec = importlib.util.spec_from_file_location('supervise', {str(ROOT / 'verl_bot/recipes/supervise.py')!r})\n"
    "supervise = importlib.util.module_from_spec(spec); spec.loader.exec_module(supervise)\n"
)
# the recipe's side: armed, then the trainer run to its end (or a stop before it starts)
TRAINER_SIDE = LOAD + """
try:
    with supervise.Supervisor() as sup:
        print("armed", flush=True)
        rc = sup.run([sys.executable, "trainer.py", sys.argv[1]], stdout=sys.stderr)
except supervise.Stopped as stop:
    rc = stop.code
print(f"rc={rc}", flush=True)
sys.exit(rc)
"""
# the recipe's side: armed, a service started, then waiting (as a recipe waits for its service to answer)
SERVICE_SIDE = LOAD + """
import time
try:
    with supervise.Supervisor() as sup:
        print("armed", flush=True)
        sup.start([sys.executable, "-c", "import time; time.sleep(60)", sys.argv[1]])
        time.sleep(60)
except supervise.Stopped as stop:
    sys.exit(stop.code)
"""
FAKE_TRAINER = """
import signal, sys, time
from pathlib import Path
log = Path(sys.argv[1])

def note(text):  # appends: a stop can land before "ready" is written (the log does not exist yet)
    with log.open("a") as f:
        f.write(text)

def stop(signum, frame):
    note(f"got {signal.Signals(signum).name}\\n")
    time.sleep(1)  # a trainer takes a while to stop (Ray shuts down): the recipe must wait for it
    note("stopped\\n")
    sys.exit(7)

signal.signal(signal.SIGTERM, stop)
note("ready\\n")
while True:
    time.sleep(0.1)
"""


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start(tmp_path: Path, side: str, arg: str) -> subprocess.Popen:
    """The recipe's side, started; returns once it is armed (its stops handled)."""
    proc = subprocess.Popen([sys.executable, "-c", side, arg], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout.readline() == "armed\n"
    return proc


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stopped_recipe_stops_its_trainer_and_returns_its_exit_code(tmp_path, signum):
    """The stop reaches the trainer as SIGTERM (verl-bot's driver takes it as Ctrl-C and Ray shuts down); the recipe
    waits until the trainer has stopped and ends with its code. A recipe that ended at once would leave the trainer
    running."""
    log = tmp_path / "trainer.log"
    (tmp_path / "trainer.py").write_text(FAKE_TRAINER)
    proc = _start(tmp_path, TRAINER_SIDE, str(log))
    trainers: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while not (log.exists() and log.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        trainers = _children(proc.pid)
        proc.send_signal(signum)
        out, _ = proc.communicate(timeout=30)
    finally:  # a failed check leaves no fake trainer running
        for pid in [*trainers, proc.pid]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert log.read_text() == "ready\ngot SIGTERM\nstopped\n"
    assert out.strip() == "rc=7" and proc.returncode == 7


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_at_the_moment_the_trainer_is_started_still_stops_it(tmp_path, signum):
    """The stop is sent the moment the trainer's process exists (its pid shows in the recipe's /proc children), or
    after a random 0-20 ms from the recipe's arming (before the start, during it, after it). Every time the recipe
    ends by itself and no trainer outlives it: the trainer got the SIGTERM (rc 7 with its handler, 143 before Python
    installed it), or none was started (128 + the signal's number)."""
    (tmp_path / "trainer.py").write_text(FAKE_TRAINER)
    rng = np.random.default_rng(signum)
    outcomes = set()
    for attempt in range(30):
        at_fork = attempt % 2 == 0
        proc = _start(tmp_path, TRAINER_SIDE, "trainer.log")
        seen: set[int] = set()
        deadline = time.monotonic() + 30
        try:
            if at_fork:
                while not seen and proc.poll() is None and time.monotonic() < deadline:
                    seen.update(_children(proc.pid))
            else:
                time.sleep(rng.uniform(0, 0.02))
            proc.send_signal(signum)
            while proc.poll() is None:  # the trainer's pid, whenever it shows
                assert time.monotonic() < deadline, f"attempt {attempt}: the recipe did not end"
                seen.update(_children(proc.pid))
                time.sleep(0.001)
            out, _ = proc.communicate(timeout=30)
        finally:
            for pid in seen:  # never leave a fake trainer behind, whatever the assertions say
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
        assert not [pid for pid in seen if _alive(pid)], (attempt, out)
        if at_fork:
            assert seen, "the recipe started no trainer"
            assert out.strip() in ("rc=7", "rc=143"), (attempt, out)
        else:
            assert out.strip() in ("rc=7", "rc=143", f"rc={128 + signum}"), (attempt, out)
        outcomes.add(out.strip())
    assert "rc=143" in outcomes or "rc=7" in outcomes, outcomes


def _marked(marker: str) -> list[int]:
    found = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and _alive(int(p.name)) and marker.encode() in (p / "cmdline").read_bytes():
                found.append(int(p.name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_at_the_moment_a_service_is_started_still_stops_it(tmp_path, signum):
    """A service the recipe starts (reward server, judge, PRM), the stop sent the moment its process exists or after a
    random 0-20 ms, 20 times a signal: every time the recipe ends with the signal's code and stops the service on
    its way out: no process of the service outlives it."""
    marker = f"vb-service-{tmp_path.name}"
    rng = np.random.default_rng(signum)
    for attempt in range(20):
        proc = _start(tmp_path, SERVICE_SIDE, marker)
        deadline = time.monotonic() + 30
        try:
            if attempt % 2 == 0:
                while not _children(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
                    pass
            else:
                time.sleep(rng.uniform(0, 0.02))
            proc.send_signal(signum)
            proc.wait(timeout=30)
        finally:
            left = _marked(marker)
            for pid in left:
                os.kill(pid, signal.SIGKILL)
        assert not left, f"attempt {attempt}: the service outlived its recipe"
        assert proc.returncode == 128 + signum, (attempt, proc.returncode)
