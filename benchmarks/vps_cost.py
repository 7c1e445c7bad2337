"""What GRPO-VPS's belief probes cost: step time with `vps` / with `grpo` on the same CPU config, in one run.

    .venv/bin/python benchmarks/vps_cost.py [--steps 10] [--skip 2] [--repeats 2] [--out outputs/vps_cost]

Each run is `recipes/cpu_train.sh` (verl 0.9.1's real trainer on the CPU backend, the tiny model, TASK=toy_math:
integer answers in `<final>` tags) with the same seed and settings; ALGO=grpo and ALGO=vps alternate
(`--repeats` pairs), so a change of the machine's load hits both. From each run's verl metrics it takes the
steps after the first `--skip` (start-up, first weight sync) and averages `timing_s/step` (the whole step) and
`timing_s/gen` (generation, which holds the probes: they run inside the agent loop); vps runs also give their
probe tokens per rollout, the response and prompt lengths, and the probing span of a step (`vps/probe_time_s`).
Prints the mean times of each algorithm, the ratios vps/grpo, and probe tokens / rollout tokens.

verl's sync v1 trainer waits for the rollouts by polling its replay buffer every 2 s (`ReplayBuffer.poll_interval`,
not a config key), so on a small config `timing_s/gen` is a multiple of about 2 s and hides a cost below that
slack; the rollout side's own ratio, (generate call + probes) / generate call per rollout, from the agent loop's
timings in the same vps runs, does not depend on it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from verl_bot.eval.records import read_metric  # noqa: E402

KEYS = ("timing_s/step", "timing_s/gen", "response_length/mean", "prompt_length/mean")
VPS_KEYS = (
    "vps/probe_tokens_per_rollout",
    "vps/probe_time_s",
    "vps/probes_per_rollout",
    "vps/probe_s_per_rollout",
    "vps/gen_s_per_rollout",
)


def run(algo: str, steps: int, seed: int, out_dir: Path) -> Path:
    """One `cpu_train.sh` run of `algo` on toy_math (its data and warm-started model are made by the first run);
    returns its metrics file."""
    env = {**os.environ, "ALGO": algo, "TASK": "toy_math", "SEED": str(seed), "STEPS": str(steps),
           "OUT_DIR": str(out_dir)}
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    log = out_dir.with_suffix(".log")
    with open(log, "w") as fh:
        proc = subprocess.run(["bash", str(ROOT / "recipes" / "cpu_train.sh")], env=env, stdout=fh, stderr=fh)
    if proc.returncode != 0:
        raise SystemExit(f"{algo} failed (exit {proc.returncode}); see {log}")
    return out_dir / "metrics.jsonl"


def step_means(metrics: Path, keys: tuple[str, ...], skip: int) -> dict[str, float]:
    """Mean of each metric over the steps after the first `skip` (a metric the file lacks is left out)."""
    out = {}
    for key in keys:
        steps, values = read_metric(metrics, key)
        kept = [v for s, v in zip(steps, values, strict=True) if s > skip]
        if kept:
            out[key] = statistics.fmean(kept)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--skip", type=int, default=2, help="first steps left out (start-up, first weight sync)")
    parser.add_argument("--repeats", type=int, default=2, help="grpo/vps pairs, alternating")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROOT / "outputs" / "vps_cost"))
    args = parser.parse_args()
    if args.skip >= args.steps:
        parser.error("--skip must be below --steps")

    results: dict[str, list[dict[str, float]]] = {"grpo": [], "vps": []}
    for r in range(args.repeats):
        for algo in ("grpo", "vps"):
            print(f"running {algo} #{r} ({args.steps} steps) ...", flush=True)
            metrics = run(algo, args.steps, args.seed, Path(args.out) / f"{algo}_{r}")
            results[algo].append(step_means(metrics, KEYS + (VPS_KEYS if algo == "vps" else ()), args.skip))

    mean = {algo: {k: statistics.fmean(m[k] for m in runs) for k in runs[0]} for algo, runs in results.items()}
    g, v = mean["grpo"], mean["vps"]
    for algo, m in mean.items():
        print(f"{algo}: step {m['timing_s/step']:.2f} s, gen {m['timing_s/gen']:.2f} s, "
              f"response {m['response_length/mean']:.1f} tokens, prompt {m['prompt_length/mean']:.1f} tokens")
    rollout_tokens = v["prompt_length/mean"] + v["response_length/mean"]
    print(f"vps: {v['vps/probes_per_rollout']:.2f} probes and {v['vps/probe_tokens_per_rollout']:.1f} probe tokens "
          f"per rollout ({v['vps/probe_tokens_per_rollout'] / rollout_tokens:.2f}x its prompt+response tokens); "
          f"probing span per step {v['vps/probe_time_s']:.2f} s")
    print(f"vps rollout side: probes {v['vps/probe_s_per_rollout']:.3f} s after a generate call of "
          f"{v['vps/gen_s_per_rollout']:.3f} s per rollout: ratio (gen+probes)/gen "
          f"{1 + v['vps/probe_s_per_rollout'] / v['vps/gen_s_per_rollout']:.3f}")
    pairs = [b["timing_s/step"] / a["timing_s/step"] for a, b in zip(results["grpo"], results["vps"], strict=True)]
    print(f"ratio vps/grpo step time {v['timing_s/step'] / g['timing_s/step']:.3f}, "
          f"gen time {v['timing_s/gen'] / g['timing_s/gen']:.3f} "
          f"(step time per pair: {', '.join(f'{p:.3f}' for p in pairs)})")

if __name__ == "__main__":
    main()
