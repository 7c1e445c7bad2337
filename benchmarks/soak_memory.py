"""Does a long run's memory stay flat? The resident memory of every process of one CPU run, every few steps.

    .venv/bin/python benchmarks/soak_memory.py [--algo bot] [--steps 300] [--every 10] [--warmup 50]
                                               [--out outputs/soak_memory]

One `recipes/cpu_train.sh` run (verl 0.9.1's real trainer on the CPU backend, the tiny model; `--rollout hf` by
default, `vllm` for verl's vLLM rollout). Its processes are found by a tag in their environment (the launcher's
children and every Ray process it starts inherit it) and named by their title (`ray::TaskRunner`,
`ray::WorkerDict`, ...; the driver is `main_ppo`). Every `--every` steps (read from verl's metrics file) it records
each process's RSS (/proc/PID/status VmRSS) into `<out>/rss.csv`; at the end it prints, per process, its RSS at
the first sample after `--warmup` steps and at the last, the growth in % and the least-squares slope in MiB per
100 steps over the samples after the warm-up. The baseline is each process's own RSS after the warm-up, measured
in the same run. A process that grows more than 5 % after the warm-up is marked GROWS (exit code 1).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TAG = "VERL_BOT_SOAK_RUN"
LIMIT = 0.05


def tagged(mark: str) -> list[int]:
    """PIDs whose environment carries TAG=mark."""
    needle = f"{TAG}={mark}".encode()
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if needle in (d / "environ").read_bytes().split(b"\0"):
                    pids.append(int(d.name))
            except OSError:
                continue
    return pids


def title(pid: int) -> str | None:
    """A process's role: its Ray title (`ray::TaskRunner`), `main_ppo` for the driver; None for helpers."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    text = [c.decode(errors="replace") for c in cmd if c]
    if not text:
        return None
    if text[0].startswith(("ray::", "VLLM::")):
        return text[0].split()[0].split(".")[0]  # ray::RewardLoopWorker.compute_score: the actor, not its method
    if "verl.trainer.main_ppo" in text and Path(text[0]).name != "timeout":  # the driver, not cpu_train's timeout
        return "main_ppo"
    return None


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def last_step(metrics: Path) -> int:
    if not metrics.exists():
        return 0
    steps = [json.loads(ln)["step"] for ln in metrics.read_text().splitlines() if ln.strip().endswith("}")]
    return max(steps, default=0)


def slope_per_100(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of (step, MiB) points, in MiB per 100 steps."""
    n = len(points)
    mx = sum(s for s, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((s - mx) ** 2 for s, _ in points)
    return 100 * sum((s - mx) * (v - my) for s, v in points) / var if var else 0.0


def report(samples: list[dict], warmup: int) -> tuple[list[str], bool]:
    """One line per process (RSS after the warm-up, at the end, growth, slope) and whether any grows > 5 %."""
    by_key: dict[str, list[tuple[int, float]]] = {}
    for s in samples:
        name = str(s["title"]).split(".")[0]
        by_key.setdefault(f"{name} (pid {s['pid']})", []).append((int(s["step"]), float(s["rss_mib"])))
    lines, grows = [], False
    for key, points in sorted(by_key.items()):
        after = [p for p in points if p[0] >= warmup]
        if len(after) < 2:
            continue
        start, end = after[0][1], after[-1][1]
        growth = (end - start) / start
        flag = "GROWS" if growth > LIMIT else "flat"
        grows |= growth > LIMIT
        lines.append(f"{key:40s} {start:8.1f} MiB at step {after[0][0]:4d} -> {end:8.1f} MiB at step "
                     f"{after[-1][0]:4d}: {100 * growth:+6.2f} %, {slope_per_100(after):+7.2f} MiB/100 steps  {flag}")
    return lines, grows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", default="bot")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--rollout", choices=("hf", "vllm"), default="hf")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "soak_memory")
    parser.add_argument("--report", type=Path, help="only print the report of an earlier run's rss.csv")
    args = parser.parse_args()
    if args.report:
        with open(args.report, newline="") as f:
            lines, grows = report(list(csv.DictReader(f)), args.warmup)
        print("\n".join(lines))
        return 1 if grows else 0
    out = args.out / args.algo
    out.mkdir(parents=True, exist_ok=True)
    mark = uuid.uuid4().hex
    env = {**os.environ, TAG: mark, "ALGO": args.algo, "STEPS": str(args.steps), "ROLLOUT": args.rollout,
           "OUT_DIR": str(out / "run"), "TIMEOUT_S": str(60 * args.steps)}
    log = open(out / "run.log", "w")
    proc = subprocess.Popen(["bash", str(ROOT / "recipes" / "cpu_train.sh")], env=env, stdout=log, stderr=log)
    metrics = out / "run" / "metrics.jsonl"
    samples, next_step = [], args.every
    try:
        with open(out / "rss.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["step", "title", "pid", "rss_mib"])
            writer.writeheader()
            while proc.poll() is None:
                if last_step(metrics) >= next_step:
                    for pid in tagged(mark):
                        name, rss = title(pid), rss_mib(pid)
                        if name and rss:
                            row = {"step": next_step, "title": name, "pid": pid, "rss_mib": round(rss, 1)}
                            writer.writerow(row)
                            samples.append(row)
                    f.flush()
                    next_step += args.every
                time.sleep(1)
    finally:  # Ctrl-C of the benchmark, or its own error: the launcher stops its trainer (verl_bot.recipes.supervise)
        if proc.poll() is None:
            proc.terminate()
            proc.wait()
    if proc.returncode != 0:
        print(f"the run failed (exit {proc.returncode}); see {out / 'run.log'}", file=sys.stderr)
        return 2
    lines, grows = report(samples, args.warmup)
    print(f"resident memory of `{args.algo}` over {args.steps} steps (rollout {args.rollout}), samples every "
          f"{args.every} steps, baseline each process's RSS at step {args.warmup}:")
    print("\n".join(lines))
    return 1 if grows else 0


if __name__ == "__main__":
    raise SystemExit(main())
