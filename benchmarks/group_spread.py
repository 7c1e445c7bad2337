"""How far the signals PASS's and GRPO-VPS's floors act on spread within a group, on the CPU tasks.

    .venv/bin/python benchmarks/group_spread.py --algo pass --task toy_math [--steps 10] [--seed 0] [--out DIR]
    .venv/bin/python benchmarks/group_spread.py --algo vps [--steps 10]

One `recipes/cpu_train.sh` run (verl 0.9.1's real trainer on the CPU backend, the task's defaults). A probe
module, which verl imports in every process (`VERL_USE_EXTERNAL_MODULES`), wraps the registered estimator and
records for every group of every step the std the floor compares against, computed without a floor:

- pass: the group std of the process density D (the token operator's, 1/L weighted), and whether the group is
  tied (every rollout the same outcome and format, so that only the process term is left);
- vps: the population std of the belief progress D over the group's segments, in probability space and in log
  space (log floor -20), and the group's outcomes (all unsolved, mixed, all solved).

Prints, per kind of group, how many there were, the quantiles of that std, and the share of groups below each
candidate floor. The run itself trains with the estimator's defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOORS = (1e-4, 1e-3, 1e-2, 0.05, 0.1, 0.2)

PROBE = '''
"""Records each group's spread, without a floor, before the registered estimator runs."""
import json, math, os
import torch
import verl_bot.plugin
verl_bot.plugin.register()
from verl.trainer.ppo import core_algos
from verl.utils.groupwise import as_torch_index
from verl_bot.advantage import pass_, vps
from verl_bot.credit.context import current
from verl_bot.credit.streams import active_streams, response_value

_estimator = core_algos.get_adv_estimator_fn(os.environ["VB_STUDY_ALGO"])


def _write(groups):
    with open(os.environ["VB_STUDY_FILE"], "a") as f:
        f.write(json.dumps(groups) + "\\n")


def _pass(mask, index):
    streams = active_streams("pass", pass_.STREAMS, mask)
    out = pass_.pass_advantage(streams["local"], response_value(streams["outcome"]), response_value(streams["format"]),
                               mask, index, pass_.PassSettings(std_floor=0.0))
    stats = out.process_stats
    std = (stats.within + stats.between).sqrt()
    return [{"kind": "tied" if bool(tied) else "untied", "std": float(s)}
            for s, tied, k in zip(std, out.tied, stats.rollouts) if k >= 2]


def _vps(mask, index):
    starts, logp, num, solved, _ = vps.probe_tensors(current().rows)
    group = as_torch_index(index)
    groups = []
    for g in range(int(group.max()) + 1):
        rows = (group == g).nonzero().flatten().tolist()
        if sum(int(num[i]) for i in rows) < 2:
            continue
        outcome = [float(solved[i]) for i in rows if int(num[i])]
        kind = "all unsolved" if max(outcome) == 0 else "all solved" if min(outcome) == 1 else "mixed"
        record = {"kind": kind}
        for space in ("prob", "log"):
            values = vps.belief_values(logp.float(), space, -20.0)
            delta = vps.segment_progress(values, num, vps.outcome_values(solved, space, -20.0))
            d = torch.cat([delta[i, : int(num[i])] for i in rows])
            record[space] = float(d.double().std(unbiased=False))
        groups.append(record)
    return groups


def probe(*args, **kwargs):
    mask, index = kwargs["response_mask"], kwargs["index"]
    _write(_pass(mask, index) if os.environ["VB_STUDY_ALGO"] == "pass" else _vps(mask, index))
    return _estimator(*args, **kwargs)


core_algos.ADV_ESTIMATOR_REGISTRY[os.environ["VB_STUDY_ALGO"]] = probe
'''


def run(algo: str, task: str, steps: int, seed: int, out_dir: Path) -> Path:
    """One cpu_train.sh run of `algo` on `task` with the probe; returns the probe's file (one line per step)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    probe_dir = Path(tempfile.mkdtemp(prefix="vb_study"))
    (probe_dir / "vb_study.py").write_text(PROBE)
    records = out_dir / "groups.jsonl"
    records.unlink(missing_ok=True)
    env = {
        **os.environ, "ALGO": algo, "TASK": task, "SEED": str(seed), "STEPS": str(steps), "OUT_DIR": str(out_dir),
        "VERL_USE_EXTERNAL_MODULES": "vb_study", "VB_STUDY_ALGO": algo, "VB_STUDY_FILE": str(records),
        "PYTHONPATH": os.pathsep.join(p for p in (str(probe_dir), str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    log = out_dir / "train.log"
    with open(log, "w") as fh:
        proc = subprocess.run(["bash", str(ROOT / "recipes" / "cpu_train.sh")], env=env, stdout=fh, stderr=fh)
    if proc.returncode != 0:
        raise SystemExit(f"{algo} on {task} failed (exit {proc.returncode}); see {log}")
    return records


def summary(groups: list[dict], key: str) -> dict[str, dict]:
    """Per kind of group: the count, the quantiles of `key` and the share below each floor of FLOORS."""
    out = {}
    for kind in sorted({g["kind"] for g in groups}):
        values = sorted(g[key] for g in groups if g["kind"] == kind)
        cuts = statistics.quantiles(values, n=20, method="inclusive") if len(values) > 1 else values * 19
        out[kind] = {
            "groups": len(values),
            "min": values[0], "p5": cuts[0], "p25": cuts[4], "median": cuts[9], "max": values[-1],
            "below": {floor: sum(v < floor for v in values) / len(values) for floor in FLOORS},
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", choices=("pass", "vps"), required=True)
    parser.add_argument("--task", choices=("toy_lint", "toy_math"), default="toy_math")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="default: outputs/group_spread/<algo>_<task>_s<seed>")
    args = parser.parse_args()
    out = args.out or ROOT / "outputs" / "group_spread" / f"{args.algo}_{args.task}_s{args.seed}"
    records = run(args.algo, args.task, args.steps, args.seed, out)
    groups = [g for line in records.read_text().splitlines() if line.strip() for g in json.loads(line)]
    keys = ("std",) if args.algo == "pass" else ("prob", "log")
    print(f"{args.algo} on {args.task}, seed {args.seed}, {args.steps} steps: {len(groups)} groups of >= 2")
    for key in keys:
        print(f"  std of {'the process density' if key == 'std' else 'the progress, ' + key + ' space'}:")
        for kind, row in summary(groups, key).items():
            below = "  ".join(f"<{floor:g}: {share:.2f}" for floor, share in row["below"].items())
            print(
                f"    {kind:13s} {row['groups']:4d} groups  min {row['min']:.3g}  p5 {row['p5']:.3g}  "
                f"p25 {row['p25']:.3g}  median {row['median']:.3g}  max {row['max']:.3g}   share {below}"
            )


if __name__ == "__main__":
    main()
