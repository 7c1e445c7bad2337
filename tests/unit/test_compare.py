"""benchmarks/compare.py: per-step CSV from verl's metrics, the summary against hand-computed values, and the
results blocks of docs/results.md (the full table) and of the README (one line per task) equal to what
`compare.py report` makes from the committed CSVs."""

import csv
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import compare  # noqa: E402


def write_run(results: Path, task: str, variant: str, seed: int, score: list[float], acc: list[float]) -> None:
    rows = [
        {"step": str(i + 1), "score": repr(s), "acc": repr(a), "scorer_failed": "0.0", "response_length": "20.0",
         "adv_abs_max": "", "step_time_s": "2.0"}
        for i, (s, a) in enumerate(zip(score, acc, strict=True))
    ]
    compare.write_csv(compare.csv_path(results, task, variant, seed), rows)


def test_metrics_become_one_row_per_training_step(tmp_path):
    records = [
        {"step": 1, "data": {"actor/pg_loss": 0.1, "reward/score/mean": 0.5, "reward/acc/mean": 0.25,
                             "timing_s/step": 3.0}},
        {"step": 2, "data": {"val-core/toy_lint/acc/mean@1": 0.5}},  # validation only: not a training step
        {"step": 2, "data": {"actor/pg_loss": 0.2, "reward/score/mean": 0.75, "bot/adv_abs_max": 2.5}},
    ]
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("\n".join(json.dumps(r) for r in records) + "\n\n")
    rows = compare.metrics_to_rows(metrics)
    assert [r["step"] for r in rows] == ["1", "2"]
    assert rows[0]["score"] == "0.5" and rows[0]["acc"] == "0.25" and rows[0]["step_time_s"] == "3.0"
    assert rows[1]["adv_abs_max"] == "2.5" and rows[1]["acc"] == ""  # a metric the step lacks stays empty
    compare.write_csv(tmp_path / "r.csv", rows)
    back = compare.read_csv(tmp_path / "r.csv")
    assert back[1]["score"] == 0.75 and back[1]["acc"] is None


def test_summary_matches_hand_computed_values(tmp_path, monkeypatch):
    monkeypatch.setattr(compare, "FINAL", 2)
    # toy_lint: G threshold 0.9 over a trailing 3-step mean
    write_run(tmp_path, "toy_lint", "bot", 0, [0.8, 0.9, 1.0, 1.0, 1.0], [0, 0, 1, 1, 1])  # 3-step mean 0.9 at 3
    write_run(tmp_path, "toy_lint", "bot", 1, [0.5, 0.9, 0.9, 0.9, 0.9], [0, 0, 0, 1, 1])  # (0.9*3) at 4
    write_run(tmp_path, "toy_lint", "grpo", 0, [0.1] * 5, [0.0] * 5)  # never: censored at steps + 1 = 6
    write_run(tmp_path, "toy_lint", "grpo", 1, [0.1, 0.2, 0.9, 0.9, 0.95], [0.0] * 5)  # mean(0.9,0.9,0.95) at 5
    rows = {r["variant"]: r for r in compare.summarize(tmp_path)}
    assert list(rows) == ["bot", "grpo"]  # VARIANTS order
    bot, grpo = rows["bot"], rows["grpo"]
    assert bot["seeds"] == "2" and bot["steps"] == "5" and bot["threshold"] == "score >= 0.9"
    assert bot["steps_to_threshold"] == "3.50 ± 0.50"  # steps 3 and 4
    assert bot["final_score"] == "0.95 ± 0.05"  # last 2 steps: 1.0 and 0.9
    assert bot["final_acc"] == "1.00 ± 0.00"
    assert grpo["steps_to_threshold"] == "5.50 ± 0.50 (1 censored)"  # 6 (never) and 5
    assert grpo["final_score"] == "0.51 ± 0.41"  # 0.1 and 0.925
    assert bot["solved_vs_bot"] == "" and grpo["solved_vs_bot"] == "-1.00 (0/2 higher)"  # 0 - 1 on both seeds
    table = compare.summary_table(list(rows.values()))
    assert (
        "| toy_lint | grpo | 2 | 5.50 ± 0.50 (1 censored) (score >= 0.9) | 0.51 ± 0.41 | 0.00 ± 0.00 "
        "| -1.00 (0/2 higher) | 2.00 ± 0.00 |"
    ) in table
    assert f"- `bot`: {compare.VARIANTS['bot'].what}" in table and "`pass`" not in table


def test_paired_difference_uses_the_seeds_both_have(tmp_path, monkeypatch):
    monkeypatch.setattr(compare, "FINAL", 1)
    write_run(tmp_path, "toy_math", "bot", 0, [1.0] * 3, [0.2, 0.4, 0.5])
    write_run(tmp_path, "toy_math", "bot", 10, [1.0] * 3, [0.2, 0.4, 0.25])  # seed 10 after seed 2, not before
    write_run(tmp_path, "toy_math", "pass", 0, [1.0] * 3, [0.2, 0.4, 0.75])  # +0.25
    write_run(tmp_path, "toy_math", "pass", 2, [1.0] * 3, [0.0, 0.0, 0.0])  # no bot run with seed 2: left out
    write_run(tmp_path, "toy_math", "pass", 10, [1.0] * 3, [0.2, 0.4, 0.0])  # -0.25
    assert list(compare.load_seeds(tmp_path, "toy_math", "pass")) == [0, 2, 10]
    bot = compare.load_seeds(tmp_path, "toy_math", "bot")
    assert compare.paired_with_bot(compare.load_seeds(tmp_path, "toy_math", "pass"), bot) == "+0.00 (1/2 higher)"
    assert compare.paired_with_bot(compare.load_seeds(tmp_path, "toy_math", "grpo"), bot) == ""  # no runs


def test_report_writes_summary_figures_and_only_the_pages_blocks(tmp_path):
    write_run(tmp_path, "toy_math", "bot", 0, [1.0, 2.0, 2.5, 2.5], [0.4, 0.6, 0.7, 0.8])
    page, readme = tmp_path / "results.md", tmp_path / "README.md"
    page.write_text(f"intro\n{compare.BEGIN}\nold table\n{compare.END}\noutro\n{compare.TURN_BEGIN}\nold\n"
                    f"{compare.TURN_END}\n")
    readme.write_text(f"top\n{compare.HEADLINE_BEGIN}\nold lines\n{compare.HEADLINE_END}\nend\n{compare.BEGIN}")
    table = compare.report(tmp_path, page=page, readme=readme)
    turns = compare.turn_table([])  # toy_math is not a multi-turn task: the turn table has no row
    assert page.read_text() == (f"intro\n{compare.BEGIN}\n{table}{compare.END}\noutro\n{compare.TURN_BEGIN}\n{turns}"
                                f"{compare.TURN_END}\n")
    headline = compare.headline_table(compare.summarize(tmp_path))
    block = f"{compare.HEADLINE_BEGIN}\n{headline}{compare.HEADLINE_END}"
    assert readme.read_text() == f"top\n{block}\nend\n{compare.BEGIN}"  # the full table's marker left alone
    with open(tmp_path / "summary.csv", newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    assert row["task"] == "toy_math" and row["steps_to_threshold"] == "4.00"  # step 3: 0.57; step 4: 0.7 >= 0.6
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == [
        f"toy_math_{metric}_{panel}.png" for metric in ("acc", "score") for panel in ("main", "open", "returns")
    ]


def test_the_readme_line_of_a_task_is_bot_against_grpo_and_what_ends_above_bot(tmp_path):
    acc = [0.4, 0.6, 0.7, 0.8, 0.8, 0.9]  # trailing 3-step mean 0.57 at step 3, 0.70 at 4; last 5: 0.76
    write_run(tmp_path, "toy_math", "bot", 0, [1.0] * 6, acc)
    write_run(tmp_path, "toy_math", "grpo", 0, [1.0] * 6, [0.0] * 6)  # never: steps + 1 = 7
    write_run(tmp_path, "toy_math", "pass", 0, [1.0] * 6, [a + 0.1 for a in acc])  # +0.10 over bot
    write_run(tmp_path, "toy_math", "bot_floor", 0, [1.0] * 6, [1.0] * 6)  # an open question: not listed
    lines = compare.headline_table(compare.summarize(tmp_path)).splitlines()
    assert len(lines) == 3  # header, separator, toy_math (toy_lint has no runs)
    assert lines[2] == (
        "| `toy_math` | 1 x 6 | 4.00, >7.00 (acc >= 0.6) | 0.76, 0.00 | `pass` +0.10 (1/1 higher) "
        f"| [table and curves]({compare.PAGE_LINK}) |"
    )


def test_the_turn_table_by_hand(tmp_path, monkeypatch):
    monkeypatch.setattr(compare, "FINAL", 2)
    for seed, (turns, wasted) in enumerate([([4.0, 4.0, 6.0, 4.0], ["0.5", "", "", ""]),
                                            ([4.0, 6.0, 4.0, 4.0], ["", "1.0", "", "0.25"])]):
        rows = [{"step": str(i + 1), "score": "1.0", "acc": "1.0", "scorer_failed": "0.0", "response_length": "9",
                 "adv_abs_max": "", "step_time_s": "2.0", "num_turns": repr(n), "wasted_call": w, "direct": ""}
                for i, (n, w) in enumerate(zip(turns, wasted, strict=True))]
        compare.write_csv(compare.csv_path(tmp_path, "toy_turns", "turn_bot", seed), rows)
    write_run(tmp_path, "toy_calc", "bot", 0, [1.0] * 4, [1.0] * 4)  # an older CSV: no turn columns
    (calc, turns) = compare.turn_rows(tmp_path)
    assert calc == {"task": "toy_calc", "variant": "bot", "seeds": "1", "turns": "- -> -"}
    # assistant turns, num_turns / 2: seeds' first 2 steps 2 and 2.5, last 2 steps 2.5 and 2; wasted calls, a step
    # without the flag counting 0: first 0.25 and 0.5, last 0 and 0.125
    assert turns == {"task": "toy_turns", "variant": "turn_bot", "seeds": "2", "turns": "2.25 ± 0.25 -> 2.25 ± 0.25",
                     "wasted_call": "0.38 ± 0.12 -> 0.06 ± 0.06", "direct": "0.00 ± 0.00 -> 0.00 ± 0.00"}
    lines = compare.turn_table([calc, turns]).splitlines()
    assert lines[0] == ("| task | variant | seeds | assistant turns per rollout | rollouts with `wasted_call` "
                        "| rollouts with `direct` |")
    assert lines[3] == ("| toy_turns | turn_bot | 2 | 2.25 ± 0.25 -> 2.25 ± 0.25 | 0.38 ± 0.12 -> 0.06 ± 0.06 "
                        "| 0.00 ± 0.00 -> 0.00 ± 0.00 |")


def test_trailing_mean_is_what_the_threshold_reads():
    assert compare.trailing_mean([0.0, 3.0, 6.0, 9.0], window=3) == [0.0, 1.5, 3.0, 6.0]


def _block(path: Path, begin: str, end: str) -> str:
    text = path.read_text()
    return text[text.index(begin) + len(begin) : text.index(end)]


def test_the_pages_numbers_are_the_committed_csvs():
    rows = compare.summarize(compare.RESULTS)
    assert _block(compare.PAGE, compare.BEGIN, compare.END) == "\n" + compare.summary_table(rows)
    turns = _block(compare.PAGE, compare.TURN_BEGIN, compare.TURN_END)
    assert turns == "\n" + compare.turn_table(compare.turn_rows(compare.RESULTS))
    assert "| toy_turns | turn_bot | 3 |" in turns and "| toy_calc | turn_index_biased | 3 |" in turns
    headline = _block(compare.README, compare.HEADLINE_BEGIN, compare.HEADLINE_END)
    assert headline == "\n" + compare.headline_table(rows)
    assert "| `toy_lint` | 3 x 40 |" in headline and "| `toy_math` | 5 x 40 |" in headline
    with open(compare.RESULTS / "summary.csv", newline="") as fh:
        assert list(csv.DictReader(fh)) == rows


def test_run_plans_each_tasks_seeds_and_only_the_tasks_a_variant_runs_on():
    runs = compare.plan(["toy_lint", "toy_math"], ["bot", "vps"], None)
    assert runs[:3] == [("toy_lint", "bot", 0), ("toy_math", "bot", 0), ("toy_math", "vps", 0)]  # seed by seed
    assert [r for r in runs if r[0] == "toy_lint"] == [("toy_lint", "bot", s) for s in (0, 1, 2)]  # no vps there
    assert {s for t, _, s in runs if t == "toy_math"} == {0, 1, 2, 3, 4}
    assert len(runs) == 3 + 2 * 5
    assert compare.plan(["toy_lint", "toy_math"], ["bot"], [7]) == [("toy_lint", "bot", 7), ("toy_math", "bot", 7)]
