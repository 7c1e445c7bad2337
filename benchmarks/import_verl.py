"""What verl-bot adds to `import verl` in a process that does not train: time and memory, with / without it.

    .venv/bin/python benchmarks/import_verl.py [--repeats 5] [--code "import verl"]

Each repeat starts two fresh Pythons that run `--code`, one with verl-bot's
plugin loaded (verl's default, `VERL_USE_EXTERNAL_PLUGINS=auto`) and one
without (`=none`, verl's own switch: `verl/__init__.py` reads it and skips its
entry points), in alternating order so that a change of the machine's load hits
both. It measures each one's wall time, CPU time (user + system) and peak RSS
(`getrusage`, printed by the child) and prints the medians, the ratios plugin /
none and what the plugin imported besides (modules only present with it). On
a machine shared with other jobs the CPU time is the steadier figure. The goal
(issue 23): a ratio of at most 1.10.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PROBE = "{code}\nimport json, resource, sys\nu = resource.getrusage(resource.RUSAGE_SELF)\n" \
        "print(json.dumps([u.ru_utime + u.ru_stime, u.ru_maxrss, sorted(sys.modules)]))"
POLICIES = ("auto", "none")


def measure(code: str, policy: str) -> tuple[float, float, int, list[str]]:
    """(wall s, CPU s, peak RSS in KiB, imported modules) of one fresh `python -c code` under `policy`."""
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": policy}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", PROBE.format(code=code)], env=env, capture_output=True, text=True,
                          check=True)
    seconds = time.perf_counter() - start
    cpu, rss, modules = json.loads(proc.stdout.strip().splitlines()[-1])
    return seconds, cpu, rss, modules


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--code", default="import verl")
    args = parser.parse_args()
    runs: dict[str, list[tuple[float, float, int, list[str]]]] = {p: [] for p in POLICIES}
    for i in range(args.repeats):
        for policy in POLICIES if i % 2 == 0 else POLICIES[::-1]:
            runs[policy].append(measure(args.code, policy))
    median = {name: {p: statistics.median(r[i] for r in runs[p]) for p in POLICIES}
              for i, name in enumerate(("wall", "cpu", "rss"))}
    extra = sorted(set(runs["auto"][0][3]) - set(runs["none"][0][3]))
    print(f"{args.code!r}, {args.repeats} repeats, medians:")
    for p in POLICIES:
        print(f"  VERL_USE_EXTERNAL_PLUGINS={p:<4}  wall {median['wall'][p]:6.2f} s  CPU {median['cpu'][p]:6.2f} s  "
              f"{median['rss'][p] / 1024:7.1f} MiB peak RSS")
    ratio = {name: values["auto"] / values["none"] for name, values in median.items()}
    print(f"ratio plugin/none: time {ratio['wall']:.3f}  CPU time {ratio['cpu']:.3f}  memory {ratio['rss']:.3f}")
    print(f"imported only with the plugin ({len(extra)}): {', '.join(extra)}")


if __name__ == "__main__":
    main()
