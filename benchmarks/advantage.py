"""Benchmark: the `bot` estimator against verl's `grpo` and `grpo_vectorized` on the same CPU batch.

    .venv/bin/python benchmarks/advantage.py [--rows 1024] [--tokens 4096] [--group 8] [--repeats 20]

Batch: rows x tokens float32 token rewards, groups of `--group` rollouts,
response lengths uniform in [1, tokens]. Time: best of `--repeats` runs of each
estimator (verl's functions are called exactly as verl registers them), in a
fresh process per estimator with the default allocator. Memory: peak extra
resident memory during one call (the call's output included), in units of the
reward tensor's size, measured in another fresh process per estimator with
glibc's mmap threshold lowered so freed buffers return to the OS (that setting
makes every large allocation a fresh mmap whose pages fault in on first touch,
several ms per buffer, so it is not used for the timing: a training process
runs with the default allocator, which reuses freed buffers).
Targets: bot/grpo time ratio <= 1.0; bot extra memory <= 3 reward tensors.
"""

from __future__ import annotations

import argparse
import json
import os
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


def measure(name: str, what: str, rows: int, tokens: int, group: int, repeats: int) -> dict:
    """`what`="time": best time of one estimator; "memory": its peak extra memory (run inside a fresh process)."""
    fn = _estimator(name)
    rewards, mask, index = make_batch(rows, tokens, group)
    fn(rewards, mask, index)  # warm-up
    if what == "memory":
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak resident set size to the current one
        before = _rss_kib("VmRSS")
        out = fn(rewards, mask, index)
        peak_extra = (_rss_kib("VmHWM") - before) * 1024
        del out
        return {"extra_copies": peak_extra / (rewards.numel() * rewards.element_size())}
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(rewards, mask, index)
        times.append(time.perf_counter() - start)
    return {"best_s": min(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--child", choices=ESTIMATORS, help=argparse.SUPPRESS)
    parser.add_argument("--what", choices=("time", "memory"), default="time", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.what, args.rows, args.tokens, args.group, args.repeats)))
        return

    memory_env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
    results = {name: {} for name in ESTIMATORS}
    for what, env in (("time", dict(os.environ)), ("memory", memory_env)):
        for name in ESTIMATORS:
            cmd = [sys.executable, __file__, "--child", name, "--what", what, *sys.argv[1:]]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
            results[name].update(json.loads(proc.stdout.strip().splitlines()[-1]))

    print(f"batch {args.rows} rollouts x {args.tokens} tokens, groups of {args.group}, best of {args.repeats}")
    for name, r in results.items():
        print(f"  {name:16s} {r['best_s'] * 1e3:9.1f} ms   peak extra memory {r['extra_copies']:.2f} x rewards")
    bot = results["bot"]
    print(f"ratio bot/grpo            {bot['best_s'] / results['grpo']['best_s']:.3f}   (target <= 1.0)")
    print(f"ratio bot/grpo_vectorized {bot['best_s'] / results['grpo_vectorized']['best_s']:.3f}")
    print(f"bot extra memory          {bot['extra_copies']:.2f} x rewards   (target <= 3)")


if __name__ == "__main__":
    main()
