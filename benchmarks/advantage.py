"""Benchmark: the `bot` estimator against verl's `grpo` and `grpo_vectorized` on the same CPU batch.

    .venv/bin/python benchmarks/advantage.py [--rows 1024] [--tokens 4096] [--group 8] [--repeats 30] [--threads N]
                                             [--dtypes int64 float32 bool]

Batch: rows x tokens float32 token rewards, groups of `--group` rollouts,
response lengths uniform in [1, tokens], and the response mask in every dtype
of `--dtypes`. verl 0.9.1's v1 trainer passes an int64 mask: its agent loop
stores `response_mask` as int64 (`AgentLoopOutput.as_dict`) and TransferQueue
gives it back as such (tests/e2e/test_cpu_e2e.py checks it at the estimator, for
`bot` and for verl's `grpo`); float32 and bool are the dtypes other callers
pass, and each estimator has its own fastest one (verl's `grpo_vectorized`
multiplies by the mask, slow for int64 and bool). So every estimator runs on
every dtype, and the ratios compare each estimator at its own best dtype, and
`bot` on each dtype against the baseline's best.

Calls: verl's functions as verl registers them; `bot` on both of its paths:
inside a batch context whose rewards come from verl-bot's dense manager, as in
verl's trainer with that manager (so it computes its diagnostics,
`bot/adv_abs_max`, `bot/tied_group_share` and `bot/rollouts_per_group`, and
skips the guard against scalar rewards), and `bot_no_manager`: called without
verl-bot's manager (a verl setup with its own dense manager), where it first
checks that the rewards are not one scalar per response (`scalar_layout`).
Time: all (estimator, dtype) pairs side by side in ONE process on the
same inputs, interleaved: each of `--repeats` rounds calls every pair once, in
a rotating order. That process keeps glibc's heap (`MALLOC_MMAP_THRESHOLD_`
32 MiB, no trimming), as a warmed-up training process does: with the default
settings whether a call's fresh (B, T) output faults its pages in (several ms
for 16 MiB, kernel zeroing included) depends on what the previous call freed,
which measured the order of the calls more than their code. Each call's wall-clock
time and the process's CPU time (all threads, kernel time included) are
recorded; the ratios are taken of the best and of the median. On a machine
shared with other work, wall-clock time measures the scheduler as much as the
code (a longer call is more likely to be preempted); CPU time with
`--threads 1` is the load-robust figure (with more threads it counts the
workers' spin-waits too). The load average and thread count are printed.

Memory: peak extra resident memory during one call with the trainer's int64
mask (the call's output included), in units of the reward tensor's size,
measured in a fresh process per estimator with glibc's mmap threshold lowered
so freed buffers return to the OS (that setting makes every large allocation a
fresh mmap whose pages fault in on first touch, several ms per buffer, so it is
not used for the timing: a training process runs with the default allocator).

Targets: bot/grpo_vectorized <= 2.5 and bot/grpo <= 1.0 in CPU time, each
estimator at its own best dtype, for both paths of `bot`; bot extra memory <= 3
reward tensors.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

ESTIMATORS = ("bot", "bot_no_manager", "grpo", "grpo_vectorized")
BOT_PATHS = ("bot", "bot_no_manager")
DTYPES = ("int64", "float32", "bool")
TRAINER_DTYPE = "int64"
TARGETS = {"grpo_vectorized": 2.5, "grpo": 1.0}


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
    """`name` as verl's trainer calls it: the registered function; `bot` in a dense-reward batch context,
    `bot_no_manager` the registered `bot` without one."""
    import verl  # noqa: F401 - loads the verl-bot plugin through its entry point
    from verl.trainer.ppo import core_algos

    from verl_bot.credit.context import BatchContext, use_context

    fn = core_algos.get_adv_estimator_fn("bot" if name in BOT_PATHS else name)

    def call(rewards, mask, index):
        context = use_context(BatchContext(dense_rewards=True)) if name == "bot" else contextlib.nullcontext()
        with context:
            return fn(token_level_rewards=rewards, response_mask=mask, index=index)

    return call


def _masks(mask, dtypes):
    import torch

    return {name: mask.to(getattr(torch, name)) for name in dtypes}


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def measure_memory(name: str, rows: int, tokens: int, group: int) -> float:
    """Peak extra resident memory of one call of `name` with the int64 mask, in reward tensors (fresh process)."""
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


def measure_times(rows: int, tokens: int, group: int, repeats: int, dtypes) -> dict:
    """{"wall"|"cpu": {(estimator, dtype): seconds per call}}: `repeats` rounds over every pair, rotating."""
    fns = {name: _estimator(name) for name in ESTIMATORS}
    rewards, mask, index = make_batch(rows, tokens, group)
    masks = _masks(mask, dtypes)
    pairs = [(name, dtype) for name in ESTIMATORS for dtype in dtypes]
    for name, dtype in pairs:
        fns[name](rewards, masks[dtype], index)  # warm-up
    times: dict = {"wall": {p: [] for p in pairs}, "cpu": {p: [] for p in pairs}}
    for round_ in range(repeats):
        for i in range(len(pairs)):
            name, dtype = pairs[(round_ + i) % len(pairs)]
            wall, cpu = time.perf_counter(), time.process_time()
            fns[name](rewards, masks[dtype], index)
            times["cpu"][(name, dtype)].append(time.process_time() - cpu)
            times["wall"][(name, dtype)].append(time.perf_counter() - wall)
    return times


def best_dtype(times: dict, name: str, dtypes) -> str:
    """The dtype on which `name` has its lowest median CPU time."""
    return min(dtypes, key=lambda dtype: statistics.median(times["cpu"][(name, dtype)]))


def ratio(bot: list[float], base: list[float]) -> str:
    """'best (best) median (median)' of bot's times over the baseline's."""
    return f"{min(bot) / min(base):.2f} (best) {statistics.median(bot) / statistics.median(base):.2f} (median)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, help="torch.set_num_threads for the timing (default: torch's)")
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES), help="response mask dtypes")
    parser.add_argument("--memory-child", choices=ESTIMATORS, help=argparse.SUPPRESS)
    parser.add_argument("--timing-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        print(json.dumps(measure_memory(args.memory_child, args.rows, args.tokens, args.group)))
        return
    if args.timing_child:
        report(args)
        return
    memory_env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
    memory = {}
    for name in ESTIMATORS:
        cmd = [sys.executable, __file__, "--memory-child", name, *sys.argv[1:]]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=memory_env, check=True)
        memory[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    timing_env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}
    cmd = [sys.executable, __file__, "--timing-child", *sys.argv[1:]]
    sys.stdout.write(subprocess.run(cmd, capture_output=True, text=True, env=timing_env, check=True).stdout)
    print(f"peak extra memory ({TRAINER_DTYPE} mask): " + ", ".join(f"{n} {m:.2f}" for n, m in memory.items())
          + " x rewards")
    print(f"bot extra memory          {memory['bot']:.2f} x rewards   (target <= 3)")


def report(args) -> None:
    """Time every (estimator, dtype) pair and print the table and the ratios (the timing child)."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    times = measure_times(args.rows, args.tokens, args.group, args.repeats, args.dtypes)

    print(
        f"batch {args.rows} rollouts x {args.tokens} tokens, groups of {args.group}; {args.repeats} interleaved "
        f"rounds in one process, {torch.get_num_threads()} torch threads, "
        f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    for name in ESTIMATORS:
        for dtype in args.dtypes:
            wall, cpu = times["wall"][(name, dtype)], times["cpu"][(name, dtype)]
            print(
                f"  {name:16s} {dtype + ' mask':13s} wall best {min(wall) * 1e3:7.2f} median "
                f"{statistics.median(wall) * 1e3:7.2f} ms   cpu best {min(cpu) * 1e3:7.2f} median "
                f"{statistics.median(cpu) * 1e3:7.2f} ms"
            )
    best = {name: best_dtype(times, name, args.dtypes) for name in ESTIMATORS}
    print("each at its best mask dtype (lowest median CPU time): " + ", ".join(f"{n} {d}" for n, d in best.items()))
    for path in BOT_PATHS:
        for baseline, target in TARGETS.items():
            bot, base = times["cpu"][(path, best[path])], times["cpu"][(baseline, best[baseline])]
            print(f"{'ratio ' + path + '/' + baseline:37s}cpu {ratio(bot, base)}   (target <= {target})")
            for dtype in args.dtypes:
                print(f"  {path} on {dtype + ' mask':13s} cpu {ratio(times['cpu'][(path, dtype)], base)}")


if __name__ == "__main__":
    main()
