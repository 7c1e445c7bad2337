"""Benchmark: the `bot` estimator against verl's `grpo` and `grpo_vectorized` on the same CPU batch.

    .venv/bin/python benchmarks/advantage.py [--rows 1024] [--tokens 4096] [--group 8] [--repeats 30] [--threads N]

Batch: rows x tokens float32 token rewards, int64 mask, groups of `--group`
rollouts, response lengths uniform in [1, tokens]. Time: the three estimators
(verl's functions called exactly as verl registers them) run side by side in
ONE process on the same inputs with the default allocator, interleaved: each
of `--repeats` rounds calls every estimator once, in a rotating order. Each
call's wall-clock time and the process's CPU time (all threads, kernel time
included) are recorded; the ratios are taken of the best and of the median.
On a machine shared with other work, wall-clock time measures the scheduler
as much as the code (a longer call is more likely to be preempted); CPU time
with `--threads 1` is the load-robust figure (with more threads it counts the
workers' spin-waits too). The load average and thread count are printed. Memory: peak extra resident memory during
one call (the call's output included), in units of the reward tensor's size,
measured in a fresh process per estimator with glibc's mmap threshold lowered
so freed buffers return to the OS (that setting makes every large allocation a
fresh mmap whose pages fault in on first touch, several ms per buffer, so it is
not used for the timing: a training process runs with the default allocator).
Targets: bot/grpo_vectorized <= 3.0 and bot/grpo <= 1.0 in time; bot extra memory <= 3 reward tensors.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ESTIMATORS = ("bot", "grpo", "grpo_vectorized")


def make_batch(rows: int, tokens: int, group: int, seed: int = 0):
    """Rewards (rows, tokens) float32, response_mask (rows, tokens) int64, index (rows,) uid strings."""
    import numpy as np
    import torch

    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, tokens + 1, (rows,), generator=gen)
    mask = (torch.arange(tokens)[None, :] < lengths[:, None]).long()
    rewards = torch.randn(rows, tokens, generator=gen) * mask
    index = np.array([f"uid-{r // group}" for r in range(rows)], dtype=object)
    return rewards, mask, index


def _estimator(name: str):
    import verl  # noqa: F401 - loads the verl-bot plugin through its entry point
    from verl.trainer.ppo import core_algos

    fn = core_algos.get_adv_estimator_fn(name)
    return lambda rewards, mask, index: fn(token_level_rewards=rewards, response_mask=mask, index=index)


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def measure_memory(name: str, rows: int, tokens: int, group: int) -> float:
    """Peak extra resident memory of one call of `name`, in reward tensors (run inside a fresh process)."""
    fn = _estimator(name)
    rewards, mask, index = make_batch(rows, tokens, group)
    fn(rewards, mask, index)  # warm-up
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak resident set size to the current one
    before = _rss_kib("VmRSS")
    out = fn(rewards, mask, index)
    peak_extra = (_rss_kib("VmHWM") - before) * 1024
    del out
    return peak_extra / (rewards.numel() * rewards.element_size())


def measure_times(rows: int, tokens: int, group: int, repeats: int) -> dict[str, dict[str, list[float]]]:
    """{"wall"|"cpu": {estimator: seconds per call}}, side by side in this process: `repeats` rounds, rotating."""
    fns = {name: _estimator(name) for name in ESTIMATORS}
    rewards, mask, index = make_batch(rows, tokens, group)
    for fn in fns.values():
        fn(rewards, mask, index)  # warm-up
    times: dict[str, dict[str, list[float]]] = {"wall": {n: [] for n in ESTIMATORS}, "cpu": {n: [] for n in ESTIMATORS}}
    for round_ in range(repeats):
        for i in range(len(ESTIMATORS)):
            name = ESTIMATORS[(round_ + i) % len(ESTIMATORS)]
            wall, cpu = time.perf_counter(), time.process_time()
            fns[name](rewards, mask, index)
            times["cpu"][name].append(time.process_time() - cpu)
            times["wall"][name].append(time.perf_counter() - wall)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, help="torch.set_num_threads for the timing (default: torch's)")
    parser.add_argument("--memory-child", choices=ESTIMATORS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        print(json.dumps(measure_memory(args.memory_child, args.rows, args.tokens, args.group)))
        return

    import torch

    memory_env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
    memory = {}
    for name in ESTIMATORS:
        cmd = [sys.executable, __file__, "--memory-child", name, *sys.argv[1:]]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=memory_env, check=True)
        memory[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    if args.threads:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    times = measure_times(args.rows, args.tokens, args.group, args.repeats)

    print(
        f"batch {args.rows} rollouts x {args.tokens} tokens, groups of {args.group}; {args.repeats} interleaved "
        f"rounds in one process, {torch.get_num_threads()} torch threads, "
        f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    for name in ESTIMATORS:
        wall, cpu = times["wall"][name], times["cpu"][name]
        print(
            f"  {name:16s} wall best {min(wall) * 1e3:7.2f} median {statistics.median(wall) * 1e3:7.2f} ms   "
            f"cpu best {min(cpu) * 1e3:7.2f} median {statistics.median(cpu) * 1e3:7.2f} ms   "
            f"peak extra memory {memory[name]:.2f} x rewards"
        )
    for baseline, target in (("grpo_vectorized", 3.0), ("grpo", 1.0)):
        ratios = []
        for clock in ("wall", "cpu"):
            bot, base = times[clock]["bot"], times[clock][baseline]
            best, median = min(bot) / min(base), statistics.median(bot) / statistics.median(base)
            ratios.append(f"{clock} {best:.2f} (best) {median:.2f} (median)")
        print(f"{'ratio bot/' + baseline:26s}{'   '.join(ratios)}   (target <= {target})")
    print(f"bot extra memory          {memory['bot']:.2f} x rewards   (target <= 3)")


if __name__ == "__main__":
    main()
