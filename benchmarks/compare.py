"""Every algorithm on both CPU tasks, through verl's real trainer; raw per-step results as CSV, then a summary.

    # run (each missing (task, variant, seed) is one recipes/cpu_train.sh run; finished ones are kept)
    .venv/bin/python benchmarks/compare.py run [--tasks toy_lint toy_math toy_calc toy_turns] [--variants bot ...]
        [--seeds 0 1 2] [--steps 40]      # default seeds: 0-2 on toy_lint and toy_calc, 0-4 on toy_math
    # regenerate the summary table, the figures, docs/results.md's table and the README's lines from the CSVs alone
    .venv/bin/python benchmarks/compare.py report

A variant is an algorithm (`ALGO` of recipes/cpu_train.sh) with optional settings: the paper's baselines
(`grpo`, `gspo`, `dapo`, `pure`), the related methods (`pass`, `reco`, `vps`, `grail`) and the open
questions of the paper measured on `bot` (`bot_token_pool`: no 1/L_k weighting; `bot_ws*`: the local
weight w_s; `bot_noisy`: a noisy local signal; `bot_floor`: a floor on the group std). The same seed is the
same model initialisation and data order for every variant.

Files (the results folder is committed; the runs' own directories are not):

    results/runs/<task>/<variant>/s<seed>.csv   one row per training step: the metrics in CSV_COLUMNS
    results/summary.csv                         per task x variant, mean and spread over seeds
    results/figures/<task>_<metric>_<panel>.png trailing-mean curve per variant (panels: main, open), min-max band

`report` also rewrites docs/results.md's block between `<!-- compare:begin -->` and `<!-- compare:end -->`
with the summary table and its block between `<!-- compare:turns:begin -->` and `<!-- compare:turns:end -->` with
the multi-turn tasks' turns per rollout and wasted calls (`turn_table`), and the README's between
`<!-- compare:headline:begin -->` and `<!-- compare:headline:end -->` with one line per task (`headline_table`),
so the numbers of both pages are the committed CSVs' (a test checks it). The turn-level estimators (`turn_bot`,
the biased reference `turn_index_biased`) run on the multi-turn tasks as `ALGO=bot` with their estimator.

Summary columns: steps to threshold (the first step at which the trailing `WINDOW`-step mean of the task's
metric reaches its threshold; a run that never does counts as steps + 1 and is marked '>'), the final value
(mean over the last `FINAL` steps) of G and of the solved rate, the final solved rate paired with `bot`'s on
the same seeds (the seeds differ more than most variants on toy_math: a paired difference removes that),
and the mean step time.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
WINDOW = 3
FINAL = 5
BEGIN, END = "<!-- compare:begin -->", "<!-- compare:end -->"
HEADLINE_BEGIN, HEADLINE_END = "<!-- compare:headline:begin -->", "<!-- compare:headline:end -->"
PAGE, README = ROOT / "docs" / "results.md", ROOT / "README.md"
PAGE_LINK = "docs/results.md#sample-efficiency-every-algorithm-on-both-cpu-tasks"  # from the README

# The committed grid's conditions (every run of it, so that runs stay comparable): verl-bot's transformers
# rollout and the tiny model with 4 attention heads, as before recipes/cpu_train.sh moved to verl's vLLM rollout
# (which needs 2 heads at hidden size 64). The rollout engine is not what the grid compares.
GRID_CONDITIONS = {"ROLLOUT": "hf", "HEADS": "4"}

# CSV column -> verl metric (file logger); missing metrics are left empty
CSV_COLUMNS = {
    "score": "reward/score/mean",  # mean G of the step's rollouts
    "acc": "reward/acc/mean",  # share solved (toy_lint: no forbidden character; toy_math: correct answer)
    "scorer_failed": "reward/scorer_failed/mean",
    "response_length": "response_length/mean",
    "adv_abs_max": "bot/adv_abs_max",
    "step_time_s": "timing_s/step",
    "num_turns": "training/num_turns/mean",  # verl's: user (tool replies) + assistant turns + 1; 2 per assistant turn
    "wasted_call": "reward/flag/wasted_call/mean",  # toy_turns: share of rollouts with a wasted call (absent: none)
    "direct": "reward/flag/direct/mean",  # toy_turns: share answered without a call (absent: none)
}


@dataclass(frozen=True)
class Task:
    """A CPU task of recipes/cpu_train.sh (`TASK=`) and what counts as reaching it."""

    metric: str  # a CSV column
    threshold: float
    seeds: tuple[int, ...] = (0, 1, 2)  # what `run` trains unless --seeds says otherwise
    flags: tuple[str, ...] = ()  # CSV columns of its scorer's flags (a step without the metric had none)
    multi_turn: bool = False  # verl's ToolAgentLoop: the turn table reports its turns


TASKS = {
    "toy_lint": Task("score", 0.9),
    "toy_math": Task("acc", 0.6, seeds=(0, 1, 2, 3, 4)),  # its seeds differ more: five
    "toy_calc": Task("acc", 0.5, multi_turn=True),  # the tool task (verl's ToolAgentLoop, per-turn values)
    "toy_turns": Task("acc", 0.3, flags=("wasted_call", "direct"), multi_turn=True),  # its number of turns chosen
}
TURN_TASKS = ("toy_calc", "toy_turns")
TURN_BEGIN, TURN_END = "<!-- compare:turns:begin -->", "<!-- compare:turns:end -->"


# Hydra interpolations (`{{` `}}`: an override's braces go through str.format, `{task}`)
CRITIC = ("algorithm.adv_estimator=gae", "critic.enable=true", "critic.model.path=${{actor_rollout_ref.model.path}}",
          "critic.optim.lr=${{actor_rollout_ref.actor.optim.lr}}",
          "critic.ppo_micro_batch_size_per_gpu=${{actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu}}")


@dataclass(frozen=True)
class Variant:
    """One algorithm setting: `ALGO` of recipes/cpu_train.sh, extra environment, extra Hydra overrides
    (`{task}` in an override is the task's name, which is also its data_source)."""

    algo: str
    env: dict[str, str] = field(default_factory=dict)
    overrides: tuple[str, ...] = ()
    what: str = ""
    tasks: tuple[str, ...] = ("toy_lint", "toy_math")  # vps, grail: only where there is an answer


VARIANTS = {
    "bot": Variant("bot", what="BoT-GRPO (the paper)", tasks=("toy_lint", "toy_math", *TURN_TASKS)),
    "grpo": Variant("grpo", what="GRPO on G only", tasks=("toy_lint", "toy_math", *TURN_TASKS)),
    "turn_bot": Variant(
        "bot", overrides=("algorithm.adv_estimator=turn_bot",), tasks=TURN_TASKS,
        what="turn-level BoT (ours): returns over the following turns, a leave-one-out bag baseline",
    ),
    "turn_index_biased": Variant(
        "bot", overrides=("algorithm.adv_estimator=turn_index_biased",), tasks=TURN_TASKS,
        what="the per-turn-index baseline (MT-GRPO's normalisation over T turns): the biased reference",
    ),
    "gspo": Variant("gspo", what="GSPO (sequence ratio) on G only"),
    "dapo": Variant("dapo", what="DAPO: clip-higher, dynamic sampling on the outcome, token-mean"),
    "pure": Variant("pure", what="PURE, min-form credit on the local signal per step"),
    "pure_scale1": Variant(
        "pure", env={"PURE_STEP_SCALE": "1.0"}, tasks=("toy_math",), what="PURE, step scale 1 (`pure`: AIME's 10)"
    ),
    "pass": Variant("pass", what="PASS (reconstructed; process std floor 1e-3, re-run 2026-12-02)"),
    "reco": Variant("reco", what="ReCo (reconstructed; occurrence `count_model`), 4 PPO mini-batches per step"),
    "grpo_mb4": Variant("grpo", env={"MINI_BATCHES": "4"}, what="GRPO with reco's 4 mini-batches per step"),
    "vps": Variant("vps", what="GRPO-VPS (reconstructed; z-score std floor 0.05)", tasks=("toy_math",)),
    "grail": Variant("grail", what="GRAIL (the authors' rules)", tasks=("toy_math",)),
    "bot_token_pool": Variant(
        "bot", overrides=("+algorithm.bot_length_weighting=false",), what="bot without the 1/L_k weighting"
    ),
    "bot_ws0.1": Variant("bot", env={"W_LOCAL": "0.1"}, what="bot, w_s = 0.1"),
    "bot_ws0.5": Variant("bot", env={"W_LOCAL": "0.5"}, what="bot, w_s = 0.5"),
    "bot_ws1.0": Variant("bot", env={"W_LOCAL": "1.0"}, what="bot, w_s = 1.0"),
    "bot_noisy": Variant(
        "bot",
        overrides=("+reward.reward_kwargs.bot.scorers.{task}='builtin:{task}?flip=0.3&seed=0'",),
        what="bot, 30% of the local spans flipped in sign",
    ),
    "bot_floor": Variant("bot", overrides=("+algorithm.bot_std_floor=0.05",), what="bot, group std floor 0.05"),
    # verl's return-based estimators with the `bot` manager: its returns layout (G on the last token, S_t where it
    # lies) against G alone; PPO's critic is the tiny model with a value head, at the actor's learning rate (ours)
    "gae": Variant("grpo", overrides=(*CRITIC, "+reward.reward_kwargs.bot.token_level=returns"),
                   what="PPO with a critic (verl's gae) on the bot manager's returns layout: G and S"),
    "gae_G": Variant("grpo", overrides=CRITIC, what="PPO with a critic (verl's gae) on G only"),
    "rfpp": Variant("grpo", overrides=("algorithm.adv_estimator=reinforce_plus_plus",
                                       "+reward.reward_kwargs.bot.token_level=returns"),
                    what="REINFORCE++ (verl's) on the bot manager's returns layout: G and S"),
    "rfpp_G": Variant("grpo", overrides=("algorithm.adv_estimator=reinforce_plus_plus",),
                      what="REINFORCE++ (verl's) on G only"),
}
RETURNS = ["gae", "gae_G", "rfpp", "rfpp_G"]
MAIN = ["bot", "grpo", "gspo", "dapo", "pure", "pure_scale1", "pass", "reco", "grpo_mb4", "vps", "grail", "turn_bot",
        "turn_index_biased"]
OPEN_QUESTIONS = ["bot_token_pool", "bot_ws0.1", "bot_ws0.5", "bot_ws1.0", "bot_noisy", "bot_floor"]


# ------------------------------------------------------------------------------------------ running
def csv_path(results: Path, task: str, variant: str, seed: int) -> Path:
    return results / "runs" / task / variant / f"s{seed}.csv"


def metrics_to_rows(metrics_file: Path) -> list[dict[str, str]]:
    """verl's file-logger JSONL -> one CSV row per training step (columns `step` + CSV_COLUMNS)."""
    rows = {}
    for line in metrics_file.read_text().splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        data = record.get("data", {})
        if "actor/pg_loss" not in data:  # validation-only records
            continue
        rows[int(record["step"])] = {"step": str(record["step"])} | {
            column: (repr(float(data[key])) if key in data else "") for column, key in CSV_COLUMNS.items()
        }
    return [rows[step] for step in sorted(rows)]


def write_csv(path: Path, rows: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["step", *CSV_COLUMNS])
        writer.writeheader()
        writer.writerows(rows)


def read_csv(path: Path) -> list[dict[str, float | None]]:
    with open(path, newline="") as fh:
        return [{k: (float(v) if v not in ("", None) else None) for k, v in row.items()} for row in csv.DictReader(fh)]


def run_one(task: str, name: str, seed: int, steps: int, results: Path, work: Path) -> Path:
    """One recipes/cpu_train.sh run (skipped when its CSV already has `steps` rows); returns the CSV."""
    target = csv_path(results, task, name, seed)
    if target.exists() and len(read_csv(target)) >= steps:
        return target
    variant = VARIANTS[name]
    out_dir = work / task / name / f"s{seed}"
    env = {
        **os.environ,
        **GRID_CONDITIONS,
        **variant.env,
        "ALGO": variant.algo,
        "TASK": task,
        "SEED": str(seed),
        "STEPS": str(steps),
        "OUT_DIR": str(out_dir),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / "run.log"
    with open(log, "w") as fh:
        cmd = ["bash", str(ROOT / "recipes" / "cpu_train.sh"), *(o.format(task=task) for o in variant.overrides)]
        proc = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise SystemExit(f"{task} {name} seed {seed} failed (exit {proc.returncode}); see {log}")
    write_csv(target, metrics_to_rows(out_dir / "metrics.jsonl"))
    return target


# ------------------------------------------------------------------------------------------ summary
def load_seeds(results: Path, task: str, variant: str) -> dict[int, list[dict[str, float | None]]]:
    """{seed: run} of (task, variant) in seed order, each run cut to the shortest run's steps ({} if none)."""
    runs = {int(f.stem[1:]): read_csv(f) for f in (results / "runs" / task / variant).glob("s*.csv")}
    steps = min((len(r) for r in runs.values()), default=0)
    return {seed: runs[seed][:steps] for seed in sorted(runs)}


def load_runs(results: Path, task: str, variant: str) -> list[list[dict[str, float | None]]]:
    """The seeds' runs of (task, variant), in seed order, each cut to the shortest run's steps ([] if none)."""
    return list(load_seeds(results, task, variant).values())


def final_value(run: list[dict[str, float | None]], column: str, steps: int) -> float:
    """Mean of `column` over the last `FINAL` of the run's first `steps` steps."""
    return statistics.fmean(row[column] for row in run[steps - FINAL : steps])


def paired_with_bot(ours: dict[int, list[dict]], bot: dict[int, list[dict]], column: str = "acc") -> str:
    """{seed: run} of a variant against `bot`'s (`load_seeds`): its final `column` minus `bot`'s on the same seeds
    (same init and data order), the mean difference and on how many of those seeds it ends higher; '' without
    shared seeds."""
    seeds = sorted(set(ours) & set(bot))
    if not seeds:
        return ""
    steps = min(len(ours[seeds[0]]), len(bot[seeds[0]]))
    diffs = [final_value(ours[seed], column, steps) - final_value(bot[seed], column, steps) for seed in seeds]
    mean = round(statistics.fmean(diffs), 2) + 0.0  # + 0.0: "+0.00", not "-0.00"
    return f"{mean:+.2f} ({sum(d > 0 for d in diffs)}/{len(seeds)} higher)"


def steps_to_threshold(values: list[float], threshold: float, window: int = WINDOW) -> int | None:
    """1-based step at which the trailing `window`-step mean first reaches `threshold`; None if never."""
    for end in range(window, len(values) + 1):
        if statistics.fmean(values[end - window : end]) >= threshold:
            return end
    return None


def spread(values: list[float]) -> str:
    """`mean ± std` over seeds (population std; one seed: no spread)."""
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.fmean(values):.2f} ± {statistics.pstdev(values):.2f}"


def summarize(results: Path) -> list[dict[str, str]]:
    """One row per (task, variant) with runs under `results/runs`, in TASKS then VARIANTS order."""
    rows = []
    for task, spec in TASKS.items():
        bot = load_seeds(results, task, "bot")
        for name in VARIANTS:
            seeds = load_seeds(results, task, name)
            if not seeds:
                continue
            runs = list(seeds.values())  # each cut to `steps` by load_seeds
            steps = len(runs[0])
            reached = [steps_to_threshold([row[spec.metric] for row in r], spec.threshold) for r in runs]

            def final(column: str, runs=runs, steps=steps) -> str:
                return spread([final_value(r, column, steps) for r in runs])

            censored = [s if s is not None else steps + 1 for s in reached]
            shown = spread([float(s) for s in censored])
            if any(s is None for s in reached):
                shown = f">{shown}" if all(s is None for s in reached) else f"{shown} ({reached.count(None)} censored)"
            rows.append(
                {
                    "task": task,
                    "variant": name,
                    "seeds": str(len(runs)),
                    "steps": str(steps),
                    "threshold": f"{spec.metric} >= {spec.threshold}",
                    "steps_to_threshold": shown,
                    "final_score": final("score"),
                    "final_acc": final("acc"),
                    "step_time_s": spread([statistics.fmean(row["step_time_s"] for row in r) for r in runs]),
                    "solved_vs_bot": "" if name == "bot" else paired_with_bot(seeds, bot),
                }
            )
    return rows


def write_summary(results: Path, rows: list[dict[str, str]]) -> None:
    with open(results / "summary.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def summary_table(rows: list[dict[str, str]]) -> str:
    """The summary as a Markdown table (docs/results.md's results block)."""
    lines = [
        "| task | variant | seeds | steps to threshold | final G | final solved | solved - bot's | step time (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['task']} | {row['variant']} | {row['seeds']} | {row['steps_to_threshold']} "
            f"({row['threshold']}) | {row['final_score']} | {row['final_acc']} | {row['solved_vs_bot']} "
            f"| {row['step_time_s']} |"
        )
    note = (
        f"Mean ± std over seeds. Steps to threshold: the first step whose trailing {WINDOW}-step mean reaches "
        f"the threshold (never: steps + 1, 'censored'). Final: mean of the last {FINAL} steps. Solved - bot's: "
        "the final solved rate minus `bot`'s on the same seed (same initialisation and data order), averaged "
        "over the seeds both have, and on how many of them the variant ends higher."
    )
    shown = [name for name in VARIANTS if any(row["variant"] == name for row in rows)]
    legend = "\n".join(f"- `{name}`: {VARIANTS[name].what}" for name in shown)
    return "\n".join(lines) + "\n\n" + note + "\n\n" + legend + "\n"


def headline_table(rows: list[dict[str, str]]) -> str:
    """One line per task (the README's results block): `bot` against `grpo` (the paper's comparison), and the
    algorithms of MAIN that end above `bot`'s solved rate on the same seeds."""
    lines = [
        "| task | seeds x steps | steps to threshold: `bot`, `grpo` | final solved: `bot`, `grpo` "
        "| ends above `bot` (solved, paired) | all results |",
        "|---|---|---|---|---|---|",
    ]
    for task in TASKS:
        by = {row["variant"]: row for row in rows if row["task"] == task}
        if "bot" not in by:
            continue
        bot, grpo = by["bot"], by.get("grpo", {})
        above = [
            f"`{name}` {by[name]['solved_vs_bot']}"
            for name in MAIN
            if name in by and by[name]["solved_vs_bot"] and float(by[name]["solved_vs_bot"].split()[0]) > 0
        ]
        lines.append(
            f"| `{task}` | {bot['seeds']} x {bot['steps']} | {bot['steps_to_threshold']}, "
            f"{grpo.get('steps_to_threshold', '-')} ({bot['threshold']}) | {bot['final_acc']}, "
            f"{grpo.get('final_acc', '-')} | {', '.join(above) or 'none'} | [table and curves]({PAGE_LINK}) |"
        )
    return "\n".join(lines) + "\n"


def turn_window(runs: list[list[dict[str, float | None]]], column: str, last: bool, missing: float | None) -> str:
    """`mean ± std` over seeds of `column`'s mean over the first (or last) `FINAL` steps; a step without the value
    counts as `missing` (None: '-' unless every step has it)."""
    values = []
    for run in runs:
        window = run[-FINAL:] if last else run[:FINAL]
        cells = [row.get(column) if row.get(column) is not None else missing for row in window]
        if any(cell is None for cell in cells):
            return "-"
        values.append(statistics.fmean(cells))
    return spread(values)


def turn_rows(results: Path) -> list[dict[str, str]]:
    """Per multi-turn task x variant with runs: assistant turns per rollout (verl's `num_turns` / 2: each
    assistant turn but the last is followed by a tool reply, which verl counts as a user turn, plus 1) and each of
    the task's flags (the share of rollouts carrying it), over the first and the last `FINAL` steps."""
    rows = []
    for task, spec in TASKS.items():
        if not spec.multi_turn:
            continue
        for name in VARIANTS:
            runs = load_runs(results, task, name)
            if not runs:
                continue
            halved = [[{**row, "turns": row["num_turns"] / 2 if row.get("num_turns") is not None else None}
                       for row in run] for run in runs]
            row = {"task": task, "variant": name, "seeds": str(len(runs))}
            for column, missing in (("turns", None), *((flag, 0.0) for flag in spec.flags)):
                first, final = (turn_window(halved, column, last, missing) for last in (False, True))
                row[column] = f"{first} -> {final}"
            rows.append(row)
    return rows


def turn_table(rows: list[dict[str, str]]) -> str:
    """The turn rows as a Markdown table (docs/results.md's turns block)."""
    flags = [flag for spec in TASKS.values() for flag in spec.flags]
    lines = ["| task | variant | seeds | assistant turns per rollout | "
             + " | ".join(f"rollouts with `{flag}`" for flag in flags) + " |",
             "|---|---|---|---|" + "---|" * len(flags)]
    for row in rows:
        cells = [row["turns"], *(row.get(flag, "") for flag in flags)]
        lines.append(f"| {row['task']} | {row['variant']} | {row['seeds']} | " + " | ".join(cells) + " |")
    note = (f"Each cell: the first {FINAL} steps -> the last {FINAL} (mean ± std over seeds). Assistant turns: "
            "verl's `training/num_turns/mean` / 2 ('-': runs made before the column was recorded). A flag's share: "
            "`reward/flag/<flag>/mean`, 0 in a step where no rollout carried it.")
    return "\n".join(lines) + "\n\n" + note + "\n"


def replace_block(text: str, table: str, begin: str = BEGIN, end: str = END) -> str:
    """`text` with what lies between the markers `begin` and `end` replaced by `table`."""
    start, stop = text.index(begin) + len(begin), text.index(end)
    return text[:start] + "\n" + table + text[stop:]


def trailing_mean(values: list[float], window: int = WINDOW) -> list[float]:
    """Mean of the last `window` values at each step (fewer at the start): the curve the threshold reads."""
    return [statistics.fmean(values[max(0, i + 1 - window) : i + 1]) for i in range(len(values))]


def plot(results: Path) -> list[Path]:
    """results/figures/<task>_<metric>_<panel>.png (tasks with runs; panels `main`: the algorithms, `open`: bot
    and its open-question variants): per variant the mean over seeds of the trailing `WINDOW`-step mean, and its
    min-max band over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    (results / "figures").mkdir(parents=True, exist_ok=True)
    panels = {"main": MAIN, "open": ["bot", *OPEN_QUESTIONS], "returns": ["grpo", *RETURNS]}
    colours = plt.get_cmap("tab10").colors
    for task in [t for t in TASKS if (results / "runs" / t).is_dir()]:
        for metric, label in (("score", "mean G"), ("acc", "solved rate")):
            for panel, names in panels.items():
                fig, ax = plt.subplots(figsize=(8, 4.5))
                for i, name in enumerate(names):
                    colour, style = colours[i % len(colours)], "-" if i < len(colours) else "--"
                    runs = load_runs(results, task, name)
                    if not runs:
                        continue
                    steps = len(runs[0])
                    curves = [trailing_mean([row[metric] for row in r[:steps]]) for r in runs]
                    xs = list(range(1, steps + 1))
                    per_step = list(zip(*curves, strict=True))
                    ax.plot(xs, [statistics.fmean(v) for v in per_step], label=f"{name} ({len(runs)})",
                            color=colour, ls=style, lw=2 if name == "bot" else 1.3)
                    ax.fill_between(xs, [min(v) for v in per_step], [max(v) for v in per_step], color=colour,
                                    alpha=0.1)
                title = f"{task}: {label}, trailing {WINDOW}-step mean (mean and min-max over seeds)"
                ax.set(xlabel="training step", ylabel=label, title=title)
                ax.legend(fontsize=8, ncol=2, title="variant (seeds)", title_fontsize=8)
                path = results / "figures" / f"{task}_{metric}_{panel}.png"
                fig.tight_layout()
                fig.savefig(path, dpi=110)
                plt.close(fig)
                out.append(path)
    return out


def report(results: Path, page: Path | None = PAGE, readme: Path | None = README) -> str:
    """Summary CSV, figures, the results block of `page` (the full table) and of `readme` (one line per task),
    each when given; returns the full table."""
    rows = summarize(results)
    if not rows:
        raise SystemExit(f"no runs under {results / 'runs'}")
    write_summary(results, rows)
    for path in plot(results):
        print(f"figure: {path}")
    table = summary_table(rows)
    if page is not None:
        text = replace_block(page.read_text(), table)
        page.write_text(replace_block(text, turn_table(turn_rows(results)), TURN_BEGIN, TURN_END))
    if readme is not None:
        readme.write_text(replace_block(readme.read_text(), headline_table(rows), HEADLINE_BEGIN, HEADLINE_END))
    print(table)
    return table


def plan(tasks: list[str], variants: list[str], seeds: list[int] | None) -> list[tuple[str, str, int]]:
    """The (task, variant, seed) runs of `run`, seed by seed (a partial grid has whole seeds): `seeds` or each
    task's own, and only the tasks a variant runs on."""
    per_task = {task: seeds or TASKS[task].seeds for task in tasks}
    return [
        (task, name, seed)
        for seed in sorted({seed for task_seeds in per_task.values() for seed in task_seeds})
        for task in tasks
        for name in variants
        if seed in per_task[task] and task in VARIANTS[name].tasks
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train what is missing, then report")
    run.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    run.add_argument("--variants", nargs="+", default=MAIN + OPEN_QUESTIONS + RETURNS, choices=list(VARIANTS))
    run.add_argument("--seeds", type=int, nargs="+", help="default: each task's own (Task.seeds)")
    run.add_argument("--steps", type=int, default=40)
    run.add_argument("--work", default=str(ROOT / "outputs" / "compare"), help="the runs' own directories")
    for p in (run, sub.add_parser("report", help="summary and figures from the CSVs alone")):
        p.add_argument("--results", default=str(RESULTS))
    args = parser.parse_args()
    results = Path(args.results)
    if args.command == "run":
        for task, name, seed in plan(args.tasks, args.variants, args.seeds):
            print(f"{task} {name} seed {seed} ({args.steps} steps) ...", flush=True)
            run_one(task, name, seed, args.steps, results, Path(args.work))
    committed = results.resolve() == RESULTS.resolve()  # another folder's results leave the pages alone
    report(results, page=PAGE if committed else None, readme=README if committed else None)


if __name__ == "__main__":
    sys.exit(main())
