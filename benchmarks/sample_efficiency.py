"""Sample efficiency: steps to reach a reward threshold, `bot` vs baselines, through verl's real trainer on CPU.

    .venv/bin/python benchmarks/sample_efficiency.py [--seeds 0 1 2] [--steps 60] [--threshold 0.9]
        [--algos bot grpo pure pass reco] [--val-n 8] [--val-every 10] [--ks 1 2 4 8] [--reuse]

Every (algorithm, seed) is one `recipes/cpu_train.sh` run: the toy_lint task
(global score G in [-1, 1] plus -1 on every span of forbidden characters),
a tiny Qwen2-style model initialised with the seed, verl 0.9.1's v1 trainer.
`bot` trains on dense rewards r_t = G + w_s * S_t with the BoT-GRPO estimator;
`grpo` on the same G only, as one scalar per response (no local penalties), as
in the paper; `pure` (PURE, min-form credit) on the manager's reward streams
(local S_t per blank-line step, solved = no forbidden character at EOS);
`pass` (PASS) on the streams local S_t (process), solved (outcome) and format
(0 on this task); `reco` (ReCo) on G only, with its response weights and
variance-ratio loss (4 PPO mini-batches per step). All use the same seed
(model init and data order) and settings.

Steps to threshold: the first step at which the mean G over the last
`--window` steps reaches `--threshold`; a run that never does counts as
`--steps` + 1 (censored, marked with '>'). Prints <baseline>_steps / bot_steps
per seed for every baseline, their mean and spread, and writes the curves to
`<out>/curves.png`.

Coverage (ReCo's claim is pass@k at large k): every run validates every
`--val-every` steps (and after its last) with `--val-n` samples (temperature
1) per held-out prompt, and verl dumps them (`trainer.validation_data_dir`).
pass@k is the unbiased estimator (`verl_bot.eval.passk`) over those samples
(grouped by prompt: verl's uid), a sample being correct when its verdict says
`solved` (no forbidden character); printed per algorithm and validated step
(mean over seeds) for each k of `--ks`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compare import steps_to_threshold  # noqa: E402  (benchmarks/, beside this file)

from verl_bot.eval.figures import plot_runs  # noqa: E402
from verl_bot.eval.passk import pass_at_k_from_results  # noqa: E402
from verl_bot.eval.records import read_metric  # noqa: E402


def validation_passk(dump: Path, ks: Sequence[int]) -> dict[str, float]:
    """Unbiased pass@k of one verl validation dump (JSONL, one sample a line: `uid`, `input`, `solved`).

    Samples are grouped by prompt: verl's `uid` (`<prompt uid>_<sample>_<turn>`; prompt texts may repeat), or the
    prompt text when a dump has no uid.
    """
    by_prompt: dict[str, list[bool]] = defaultdict(list)
    for line in dump.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            key = str(row["uid"]).rsplit("_", 2)[0] if "uid" in row else row["input"]
            by_prompt[key].append(bool(row["solved"]))
    return pass_at_k_from_results(list(by_prompt.values()), ks)


def validation_dumps(out_dir: Path) -> dict[int, Path]:
    """The run's validation dumps by step (`<out>/validation/<step>.jsonl`), in step order."""
    dumps = {int(p.stem): p for p in (out_dir / "validation").glob("*.jsonl") if p.stem.isdigit()}
    return dict(sorted(dumps.items()))


def run(algo: str, seed: int, steps: int, out_dir: Path, reuse: bool, val_n: int, val_every: int) -> Path:
    """One training run, validated every `val_every` steps (skipped when `reuse` finds it done); returns its metrics."""
    metrics = out_dir / "metrics.jsonl"
    done = metrics.exists() and len(read_metric(metrics)[0]) >= steps and steps in validation_dumps(out_dir)
    if reuse and done:
        return metrics
    env = {**os.environ, "ALGO": algo, "SEED": str(seed), "STEPS": str(steps), "OUT_DIR": str(out_dir)}
    validation = [
        f"trainer.test_freq={val_every}",
        f"actor_rollout_ref.rollout.val_kwargs.n={val_n}",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=True",
        "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
        f"trainer.validation_data_dir={out_dir / 'validation'}",
    ]
    log = out_dir.with_suffix(".log")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as fh:
        cmd = ["bash", str(ROOT / "recipes" / "cpu_train.sh"), *validation]
        proc = subprocess.run(cmd, env=env, stdout=fh, stderr=fh)
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
    parser.add_argument("--val-n", type=int, default=8, help="samples per held-out prompt at each validation")
    parser.add_argument("--val-every", type=int, default=10, help="validate every this many steps (and the last)")
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4, 8], help="pass@k for these k (<= --val-n)")
    args = parser.parse_args()
    if args.algos[0] != "bot" or len(args.algos) < 2:
        parser.error("--algos: bot first, then at least one baseline (grpo, pure, pass, reco)")
    if max(args.ks) > args.val_n:
        parser.error(f"--ks: every k must be <= --val-n ({args.val_n})")
    out = Path(args.out)

    curves, reached, passk = {}, {}, {}
    for seed in args.seeds:
        for algo in args.algos:
            print(f"running {algo} seed {seed} ({args.steps} steps) ...", flush=True)
            run_dir = out / f"{algo}_s{seed}"
            curve = read_metric(run(algo, seed, args.steps, run_dir, args.reuse, args.val_n, args.val_every))
            curves[f"{algo} s{seed}"] = curve
            reached[(algo, seed)] = steps_to_threshold(curve[1], args.threshold, args.window)
            for step, dump in validation_dumps(run_dir).items():
                passk[(algo, seed, step)] = validation_passk(dump, args.ks)
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
    print(f"\npass@k ({args.val_n} samples per held-out prompt, temperature 1; mean over seeds)")
    for algo in args.algos:
        for step in sorted({key[2] for key in passk if key[0] == algo}):
            tables = [passk[(algo, seed, step)] for seed in args.seeds if (algo, seed, step) in passk]
            cells = "  ".join(f"pass@{k} {statistics.fmean(t[f'pass@{k}'] for t in tables):.3f}" for k in args.ks)
            print(f"  {algo:>5} step {step:>3}: {cells}")
    print(f"curves: {out / 'curves.png'}")


if __name__ == "__main__":
    main()
