"""Report of training runs: reward over steps (PNG) and the token credit of recorded steps (HTML).

    python -m verl_bot.eval.training_report --run bot=outputs/cpu_demo/bot --run grpo=outputs/cpu_demo/grpo \
        --out outputs/cpu_demo/report [--step 20] [--groups 4]

Each run directory holds what a run with `+algorithm.token_report_steps=[...]` writes: `token_records/step_<N>.jsonl`
(or `ckpt/token_records/`, the default folder), plus `metrics.jsonl` from verl's file logger. `reward.png`: the mean G
(`reward/score/mean`) per step of every run; `tokens.html`: for the chosen step (default: the last step every run
recorded) the recorded groups, matched across runs by their prompt text, side by side. How tokens are shown:
`verl_bot.observe.token_view`; what the page shows: docs/evaluation.md, section The token-credit report.
"""

from __future__ import annotations

import argparse
import html
from collections.abc import Sequence
from pathlib import Path

from verl_bot.eval.records import EvalError
from verl_bot.observe.token_records import read_records, recorded_files
from verl_bot.observe.token_view import STYLE, legends_html, rollout_html, token_scales


# ------------------------------------------------------------------------------------------- records
def run_records_dir(run_dir: Path) -> Path:
    """`RUN/token_records`, else `RUN/ckpt/token_records` (the default of `algorithm.token_report_dir`)."""
    for folder in (run_dir / "token_records", run_dir / "ckpt" / "token_records", run_dir):
        if recorded_files(folder):
            return folder
    raise EvalError(
        f"{run_dir}: no token records (train with +algorithm.token_report_steps=[...]; "
        "see verl_bot/observe/token_records.py)"
    )


def load_step(runs: dict[str, Path], step: int | None) -> tuple[int, dict[str, list[dict]]]:
    """The step to show (default: the last one every run recorded) and each run's records of it."""
    files = {name: recorded_files(run_records_dir(d)) for name, d in runs.items()}
    common = set.intersection(*(set(f) for f in files.values()))
    if step is None:
        if not common:
            recorded = ", ".join(f"{n} {sorted(f)}" for n, f in files.items())
            raise EvalError(f"the runs recorded no common step: {recorded}")
        step = max(common)
    missing = [name for name, f in files.items() if step not in f]
    if missing:
        raise EvalError(f"step {step} not recorded by {', '.join(missing)}")
    return step, {name: read_records(f[step]) for name, f in files.items()}


def match_groups(
    records: dict[str, list[dict]], groups: int
) -> list[tuple[tuple[str, int], dict[str, list[dict]]]]:
    """[((prompt, n), {run: rollouts})]: groups every run recorded first, then the rest; `groups` of them (0: all).

    A run's group is the rollouts sharing a uid. Runs are matched by prompt text (the uids differ between runs);
    when a step holds several groups of the same prompt, the n-th of one run is matched with the n-th of the other.
    """
    by_prompt: dict[tuple[str, int], dict[str, list[dict]]] = {}
    for name, rows in records.items():
        by_uid: dict[str, list[dict]] = {}
        for row in rows:
            by_uid.setdefault(row["uid"], []).append(row)
        seen: dict[str, int] = {}
        for rollouts in by_uid.values():
            prompt = rollouts[0]["prompt"]
            n = seen[prompt] = seen.get(prompt, -1) + 1
            by_prompt.setdefault((prompt, n), {})[name] = rollouts
    ordered = sorted(by_prompt.items(), key=lambda kv: (len(kv[1]) < len(records), kv[0]))
    return ordered[: groups if groups > 0 else None]


def tokens_html(step: int, records: dict[str, list[dict]], groups: int) -> str:
    """The HTML body of the token view (its legends carry each quantity's colour scale)."""
    matched = match_groups(records, groups)
    scales = token_scales(row for _, runs in matched for rows in runs.values() for row in rows)
    names = list(records)
    parts = [
        f"<h2>Token credit at step {step}</h2>" + legends_html(scales),
        "<p>Each token: top cell coloured by its reward r<sub>t</sub>, bottom cell by its advantage "
        "A<sub>t</sub>, on the scales above (the same for every row and run). Hover a token for its values. "
        "Groups are matched across runs by their prompt.</p>",
    ]
    columns = f"grid-template-columns:repeat({len(names)},minmax(0,1fr))"
    for (prompt, n), runs in matched:
        again = f" <i>(group {n + 1} of this prompt in the step)</i>" if n else ""
        parts.append(f'<section class="group"><div class="prompt">{html.escape(prompt)}{again}</div>')
        parts.append(f'<div class="runs" style="{columns}">')
        for name in names:
            body = "".join(rollout_html(r, scales) for r in runs.get(name, []))
            body = body or "<p><i>this prompt was not recorded in this run</i></p>"
            parts.append(f'<div class="run" data-run="{html.escape(name)}"><h3>{html.escape(name)}</h3>{body}</div>')
        parts.append("</div></section>")
    return "\n".join(parts)


PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>verl-bot training report</title>
<style>
{style}</style></head><body><h1>verl-bot training report</h1><p>Mean global score G per step:</p>{plot}
{body}</body></html>"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="append", required=True, help="NAME=RUN_DIR (repeat: one column each)")
    parser.add_argument("--out", required=True, help="folder for reward.png and tokens.html")
    parser.add_argument("--step", type=int, default=None, help="recorded step to show (default: the last common)")
    parser.add_argument("--groups", type=int, default=4, help="groups (prompts) to show; 0 = all (default 4)")
    args = parser.parse_args(argv)

    try:
        runs = {name: Path(d) for name, _, d in (item.partition("=") for item in args.run)}
        if any(not name or not str(d) for name, d in runs.items()):
            raise EvalError("--run takes NAME=RUN_DIR")
        step, records = load_step(runs, args.step)
        body = tokens_html(step, records, args.groups)
    except (EvalError, ValueError, OSError) as e:
        print(f"error: {e}", flush=True)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plot, summary = _reward_plot(runs, out / "reward.png")
    (out / "tokens.html").write_text(PAGE.format(style=STYLE, plot=plot, body=body), encoding="utf-8")
    for line in summary:
        print(line)
    print(f"report: {out / 'reward.png'} and {out / 'tokens.html'} (tokens of step {step})")
    return 0


def _reward_plot(runs: dict[str, Path], png: Path) -> tuple[str, list[str]]:
    """Draw reward.png from the runs' metrics (runs without metrics are left out); (img tag, summary lines)."""
    from verl_bot.eval.figures import plot_runs
    from verl_bot.eval.records import read_metric

    curves, summary = {}, []
    for name, d in runs.items():
        steps, values = read_metric(d / "metrics.jsonl") if (d / "metrics.jsonl").is_file() else ([], [])
        if steps:
            curves[name] = (steps, values)
            first, last = f"{values[0]:+.3f} at step {steps[0]}", f"{values[-1]:+.3f} at step {steps[-1]}"
            summary.append(f"{name}: mean G {first} -> {last}")
        else:
            summary.append(f"{name}: no metrics.jsonl with reward/score/mean")
    if not curves:
        return "<p><i>no metrics</i></p>", summary
    plot_runs(curves, png, " vs ".join(curves) + ": mean G per step")
    return f'<img src="{png.name}" alt="mean G per step">', summary


if __name__ == "__main__":
    raise SystemExit(main())
