"""Sample efficiency: steps to reach a reward threshold, `bot` vs baselines, through verl's real trainer on CPU.

    .venv/bin/python benchmarks/sample_efficiency.py [--seeds 0 1 2] [--steps 60] [--threshold 0.9]
        [--algos bot grpo pure pass] [--reuse]

Every (algorithm, seed) is one `recipes/cpu_train.sh` run: the toy_lint task
(global score G in [-1, 1] plus -1 on every span of forbidden characters),
a tiny Qwen2-style model initialised with the seed, verl 0.9.1's v1 trainer.
`bot` trains on dense rewards r_t = G + w_s * S_t with the BoT-GRPO estimator;
`grpo` on the same G only, as one scalar per response (no local penalties), as
in the paper; `pure` (PURE, min-form credit) on the manager's reward streams
(local S_t per blank-line step, solved = no forbidden character at EOS);
`pass` (PASS) on the streams local S_t (process), solved (outcome) and format
(0 on this task). All use the same seed (model init and data order) and settings.

Steps to threshold: the first step at which the mean G over the last
`--window` steps reaches `--threshold`; a run that never does counts as
`--steps` + 1 (censored, marked with '>'). Prints <baseline>_steps / bot_steps
per seed for every baseline, their mean and spread, and writes the curves to
`<out>/curves.png`.
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

from verl_bot.eval.figures import plot_runs  # noqa: E402
from verl_bot.eval.records import read_metric  # noqa: E402


def steps_to_threshold(values: list[float], threshold: float, window: int) -> int | None:
    """1-based step at which the trailing `window`-step mean first reaches `threshold`; None if never."""
    for end in range(window, len(values) + 1):
        if statistics.fmean(values[end - window : end]) >= threshold:
            return end
    return None


def run(algo: str, seed: int, steps: int, out_dir: Path, reuse: bool) -> Path:
    """One training run (skipped when `reuse` and its metrics already cover `steps`); returns its metrics file."""
    metrics = out_dir / "metrics.jsonl"
    if reuse and metrics.exists() and len(read_metric(metrics)[0]) >= steps:
        return metrics
    env = {**os.environ, "ALGO": algo, "SEED": str(seed), "STEPS": str(steps), "OUT_DIR": str(out_dir)}
    log = out_dir.with_suffix(".log")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as fh:
        proc = subprocess.run(["bash", str(ROOT / "recipes" / "cpu_train.sh")], env=env, stdout=fh, stderr=fh)
    if proc.returncode != 0:
        raise SystemExit(f"{algo} seed {seed} failed (exit {proc.returncode}); see {log}")
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--window", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "outputs" / "sample_efficiency"))
    parser.add_argument("--reuse", action="store_true", help="reuse finished runs found in --out")
    parser.add_argument("--algos", nargs="+", default=["bot", "grpo"], help="bot first, then the baselines")
    args = parser.parse_args()
    if args.algos[0] != "bot" or len(args.algos) < 2:
        parser.error("--algos: bot first, then at least one baseline (grpo, pure, pass)")
    out = Path(args.out)

    curves, reached = {}, {}
    for seed in args.seeds:
        for algo in args.algos:
            print(f"running {algo} seed {seed} ({args.steps} steps) ...", flush=True)
            curve = read_metric(run(algo, seed, args.steps, out / f"{algo}_s{seed}", args.reuse))
            curves[f"{algo} s{seed}"] = curve
            reached[(algo, seed)] = steps_to_threshold(curve[1], args.threshold, args.window)
    title = f"toy_lint on CPU: {' vs '.join(args.algos)} (threshold {args.threshold})"
    plot_runs(curves, out / "curves.png", title)

    def shown(steps: int | None) -> str:
        return f">{args.steps}" if steps is None else str(steps)

    print(f"\nsteps to mean G >= {args.threshold} (trailing {args.window}-step mean)")
    for seed in args.seeds:
        row = "  ".join(f"{algo} {shown(reached[(algo, seed)]):>5}" for algo in args.algos)
        print(f"  seed {seed}: {row}")
    for baseline in args.algos[1:]:
        ratios = [
            (reached[(baseline, seed)] or args.steps + 1) / (reached[("bot", seed)] or args.steps + 1)
            for seed in args.seeds
        ]
        spread = f"min {min(ratios):.2f}, max {max(ratios):.2f}"
        print(
            f"ratio {baseline}_steps/bot_steps: mean {statistics.fmean(ratios):.2f} ({spread}) "
            f"over {len(ratios)} seeds; per seed {', '.join(f'{r:.2f}' for r in ratios)}"
        )
    print(f"curves: {out / 'curves.png'}")


if __name__ == "__main__":
    main()
