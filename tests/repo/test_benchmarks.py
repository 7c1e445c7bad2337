"""The benchmarks stay runnable, and what they print adds up (tiny sizes: the figures themselves come from full
runs, not from tests).

A tiny run cannot check a benchmark's targets, but it can check its arithmetic and its measurements: every
baseline measured in the same run is printed, every time is positive and a best is no more than its median, each
printed ratio is the quotient of the printed times it names (to their rounding), a measured effect shows (GRAIL's
saliency is a share of its update; a wider panel is bigger; an estimator's output is at least one reward tensor
of fresh memory).
"""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NUMBER = r"(\d+(?:\.\d+)?)"


def run_benchmark(name: str, *args, timeout: int = 600) -> str:
    """benchmarks/`name`.py run with `args`; its stdout (the test fails on a non-zero exit)."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def matches(pattern: str, text: str) -> list[tuple[str, ...]]:
    """Every line of `text` matching `pattern` (re.M), as its groups."""
    return [m.groups() for m in re.finditer(pattern, text, re.M)]


def quotient_agrees(printed: float, top: float, bottom: float, top_step: float, bottom_step: float,
                    printed_step: float) -> bool:
    """Whether `printed` (rounded to `printed_step`) can be top/bottom of the unrounded values that printed as
    `top` and `bottom` (rounded to their steps): interval arithmetic, checked by hand in the first test."""
    low = max(top - top_step / 2, 0.0) / (bottom + bottom_step / 2)
    high = (top + top_step / 2) / (bottom - bottom_step / 2) if bottom > bottom_step / 2 else math.inf
    return low - printed_step / 2 <= printed <= high + printed_step / 2


def test_quotient_agrees_within_the_rounding_and_no_further():
    # 0.475 / 0.206 = 2.306 -> "2.31"; the true values lie in [0.4745, 0.4755] / [0.2055, 0.2065]: [2.298, 2.314]
    assert quotient_agrees(2.31, 0.475, 0.206, 0.001, 0.001, 0.01)
    assert not quotient_agrees(2.33, 0.475, 0.206, 0.001, 0.001, 0.01)  # 2.325 > 2.314
    assert not quotient_agrees(2.28, 0.475, 0.206, 0.001, 0.001, 0.01)  # 2.285 < 2.298
    assert quotient_agrees(7.0, 0.7, 0.1, 0.1, 0.1, 0.01)  # 0.65 / 0.15 .. 0.75 / 0.05: a coarse rounding is wide


def test_advantage_benchmark_ratios_are_the_quotients_of_its_times():
    """benchmarks/advantage.py: every (estimator, dtype) pair timed, each ratio the quotient of the printed CPU
    times of bot's path and the baseline at their best dtypes, each estimator's peak memory at least its output."""
    out = run_benchmark("advantage", "--rows", 64, "--tokens", 1024, "--repeats", 3, "--threads", 1)
    estimators, dtypes = ("bot", "bot_no_manager", "grpo", "grpo_vectorized"), ("int64", "float32", "bool")
    table = {(name, dtype): tuple(map(float, times)) for name, dtype, *times in matches(
        rf"^  (\S+)\s+(\S+) mask\s+wall best\s+{NUMBER} median\s+{NUMBER} ms\s+cpu best\s+{NUMBER} median\s+"
        rf"{NUMBER} ms$", out)}
    assert set(table) == {(n, d) for n in estimators for d in dtypes}, out  # every baseline measured in this run
    for wall_best, wall_median, cpu_best, cpu_median in table.values():
        assert 0 < wall_best <= wall_median and 0 < cpu_best <= cpu_median, out
    best = dict(pair.split(" ") for pair in re.search(
        r"^each at its best mask dtype \(lowest median CPU time\): (.+)$", out, re.M).group(1).split(", "))
    assert set(best) == set(estimators), out
    for name, dtype in best.items():  # the lowest median CPU time (ties to the printed rounding)
        assert table[(name, dtype)][3] == min(table[(name, d)][3] for d in dtypes), (name, out)
    ratios = {}  # (bot's path, baseline) -> [(None for the head line or a dtype, best ratio, median ratio)]
    for line in out.splitlines():
        head = re.match(rf"^ratio (\S+)/(\S+)\s+cpu {NUMBER} \(best\) {NUMBER} \(median\)", line)
        sub = re.match(rf"^  (\S+) on (\S+) mask\s+cpu {NUMBER} \(best\) {NUMBER} \(median\)$", line)
        if head:
            key = head.group(1, 2)
            ratios[key] = [(None, float(head.group(3)), float(head.group(4)))]
        elif sub:
            assert sub.group(1) == key[0], line
            ratios[key].append((sub.group(2), float(sub.group(3)), float(sub.group(4))))
    assert set(ratios) == {(p, b) for p in ("bot", "bot_no_manager") for b in ("grpo_vectorized", "grpo")}, out
    for (path, base), rows in ratios.items():
        assert [dtype for dtype, *_ in rows] == [None, *dtypes], out
        assert rows[0][1:] == next(r[1:] for r in rows if r[0] == best[path]), out  # the head: bot at its best
        bottom = table[(base, best[base])]
        for dtype, ratio_best, ratio_median in rows:
            top = table[(path, dtype or best[path])]
            assert quotient_agrees(ratio_best, top[2], bottom[2], 0.01, 0.01, 0.01), (path, base, dtype, out)
            assert quotient_agrees(ratio_median, top[3], bottom[3], 0.01, 0.01, 0.01), (path, base, dtype, out)
            assert 0 < ratio_best < 20 and 0 < ratio_median < 20, out  # plausible at this size, not the target
    memory = dict(matches(rf"(\w+) {NUMBER}(?:,| x rewards)", re.search(
        r"^peak extra memory \(int64 mask\): (.+)$", out, re.M).group(1)))
    assert set(memory) == set(estimators), out
    # each call returns at least one fresh (B, T) float32 tensor (256 KiB: an mmap of its own at the benchmark's
    # 64 KiB threshold), so at least one reward tensor; the bot target at full size is <= 3
    assert all(0.99 <= float(m) < 6 for m in memory.values()), out
    assert re.search(rf"^bot extra memory\s+{re.escape(memory['bot'])} x rewards", out, re.M), out


def test_token_panel_benchmark_ratios_are_the_quotients_of_its_times():
    """benchmarks/token_panel.py, tiny: a real TransferQueue, verl's `Tracking` with wandb (offline) and tensorboard;
    verl's own metrics of the step timed as the baseline in the same run, the panel bigger at 4x."""
    out = run_benchmark("token_panel", "--rows", 16, "--group", 4, "--tokens", 32, "--prompt", 16, "--repeats", 2)
    header = re.search(r"^full step: (\d+) rollouts in groups of (\d+), (\d+) response tokens \(1\.\.32 each\), "
                       r"prompts of 16; quarter step: (\d+) rollouts, (\d+) tokens", out, re.M)
    assert header, out
    rows, group, tokens, quarter_rows, quarter_tokens = map(int, header.groups())
    assert (rows, group, quarter_rows) == (16, 4, 4), out  # the quarter step: max(16 // 4, the group)
    assert rows <= tokens <= rows * 32 and quarter_rows <= quarter_tokens <= quarter_rows * 32, out
    times = {}
    for size, what, *figures in matches(rf"^\s*(full|quarter) step, (.+?): wall best {NUMBER} ms median {NUMBER} "
                                        rf"ms; cpu median {NUMBER} ms$", out):
        scalars = re.fullmatch(r"verl's _compute_metrics \+ Tracking\.log of (\d+) scalars", what)
        knobs = re.fullmatch(r"panel at (defaults|4x) \((4|16) rollouts x (256|1024) tokens\)", what)
        assert scalars or knobs, what
        if scalars:
            assert int(scalars.group(1)) > 10, what  # verl's metrics of the step: rewards, lengths, timings, ...
        times[(size, "baseline" if scalars else knobs.group(1))] = tuple(map(float, figures))
    assert set(times) == {(s, k) for s in ("full", "quarter") for k in ("baseline", "defaults", "4x")}, out
    assert all(0 < wall_best <= wall_median and cpu > 0 for wall_best, wall_median, cpu in times.values()), out
    ratios = matches(rf"^ratio panel/baseline \((full|quarter) step, (defaults|4x)\): wall best {NUMBER} median "
                     rf"{NUMBER}, cpu median {NUMBER}; per step at token_panel_every=10: {NUMBER}$", out)
    assert len(ratios) == 4, out
    for size, knobs, *figures in ratios:
        printed, panel, base = list(map(float, figures)), times[(size, knobs)], times[(size, "baseline")]
        for i in range(3):
            assert quotient_agrees(printed[i], panel[i], base[i], 0.1, 0.1, 0.01), (size, knobs, i, out)
        assert abs(printed[3] - printed[1] / 10) <= 0.0015, out  # a tenth of the median ratio
    sizes = {name: (int(html), int(markdown)) for name, html, markdown in matches(
        r"^panel size at (defaults|4x): HTML (\d+) KiB \(wandb's media file\), Markdown (\d+) KiB", out)}
    assert set(sizes) == {"defaults", "4x"}, out
    # 4x shows 16 rollouts where the defaults show 4 (all of the step's are at most 32 tokens): more of both
    assert 0 < sizes["defaults"][0] < sizes["4x"][0] and 0 < sizes["defaults"][1] < sizes["4x"][1], out
    grow, shrink = map(float, re.search(rf"^ratio panel 4x/defaults \(full step\): wall best {NUMBER}; "
                                        rf"quarter/full step \(defaults\): wall best {NUMBER}$", out, re.M).groups())
    full = times[("full", "defaults")][0]
    assert quotient_agrees(grow, times[("full", "4x")][0], full, 0.1, 0.1, 0.01), out
    assert quotient_agrees(shrink, times[("quarter", "defaults")][0], full, 0.1, 0.1, 0.01), out


def test_legacy_step_benchmark_ratio_is_the_quotient_of_its_times():
    """benchmarks/legacy_step.py, tiny: bot through verl-bot's legacy wrappers and verl's grpo, both timed."""
    out = run_benchmark("legacy_step", "--rows", 64, "--tokens", 256, "--repeats", 3)
    assert re.search(r"^legacy step, 64 rows x 256 tokens, groups of 8, 3 rounds, 1 thread\(s\)$", out, re.M), out
    table = {name: tuple(map(float, figures)) for name, *figures in matches(
        rf"^(bot|grpo)\s+cpu best\s+{NUMBER} ms median\s+{NUMBER} ms  wall best\s+{NUMBER} ms$", out)}
    assert set(table) == {"bot", "grpo"}, out
    assert all(0 < best <= median and wall > 0 for best, median, wall in table.values()), out
    best, median = map(float, re.search(rf"^ratio bot/grpo: cpu best {NUMBER} median {NUMBER} ", out, re.M).groups())
    assert quotient_agrees(best, table["bot"][0], table["grpo"][0], 0.01, 0.01, 0.01), out
    assert quotient_agrees(median, table["bot"][1], table["grpo"][1], 0.01, 0.01, 0.01), out
    assert 0 < best < 20 and 0 < median < 20, out  # plausible at this size (the target is for the full batch)


def test_steps_to_threshold_uses_the_trailing_mean():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from compare import steps_to_threshold

    assert steps_to_threshold([0.1, 0.95, 0.2, 0.9, 0.95, 0.96], threshold=0.9, window=3) == 6
    assert steps_to_threshold([0.95, 0.95], threshold=0.9, window=1) == 1
    assert steps_to_threshold([0.5] * 10, threshold=0.9, window=3) is None


def test_vps_cost_averages_the_steps_after_the_warm_up(tmp_path):
    import json

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from vps_cost import step_means

    metrics = tmp_path / "metrics.jsonl"
    steps = [(1, 50.0), (2, 4.0), (3, 6.0)]
    rows = [{"step": s, "data": {"timing_s/step": t, "timing_s/gen": t / 2}} for s, t in steps]
    metrics.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    means = step_means(metrics, ("timing_s/step", "timing_s/gen", "vps/probe_time_s"), skip=1)
    assert means == {"timing_s/step": 5.0, "timing_s/gen": 2.5}  # step 1 left out; a missing metric too


def test_validation_passk_groups_a_dump_by_prompt(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from sample_efficiency import validation_dumps, validation_passk

    assert validation_dumps(tmp_path) == {}
    # two prompts with the same text (verl's uid tells them apart), 4 samples each
    rows = [("u1", True), ("u1", False), ("u1", False), ("u1", False)] + [("u2", False)] * 4
    dumps = tmp_path / "validation"
    dumps.mkdir()
    (dumps / "3.jsonl").write_text("")
    lines = [
        json.dumps({"input": "same text", "uid": f"{uid}_{i}_0", "solved": solved, "score": 0.0})
        for i, (uid, solved) in enumerate(rows)
    ]
    (dumps / "12.jsonl").write_text("\n".join(lines) + "\n")
    assert list(validation_dumps(tmp_path)) == [3, 12]  # step order, not name order
    table = validation_passk(validation_dumps(tmp_path)[12], ks=[1, 2, 4])
    # u1: 1 of 4 solved -> pass@1 1/4, pass@2 1 - C(3,2)/C(4,2) = 1/2, pass@4 1; u2: none solved -> 0
    assert table == {"pass@1": 0.125, "pass@2": 0.25, "pass@4": 0.5}


def test_grail_update_benchmark_ratios_are_the_quotients_of_its_times():
    """benchmarks/grail_update.py, tiny: GRPO's update timed as the baseline in the same run, GRAIL's saliency a
    share of GRAIL's update (none: GRAIL ran as GRPO), the ratios the quotients of the printed times."""
    out = run_benchmark("grail_update", "--hidden", 32, "--layers", 2, "--rows", 4, "--prompt", 8, "--response", 24,
                        "--micro", 2, "--repeats", 2, timeout=900)
    params = re.search(rf"^model {NUMBER}M parameters \(2 layers, hidden 32\); batch 4 rollouts, prompt 8, response "
                       r"12-24 tokens, micro-batches of 2; best of 2;", out, re.M)
    assert params and float(params.group(1)) > 0, out
    table = {}
    for algo, best, runs, cpu, memory in matches(rf"^(grpo|grail) update: best {NUMBER} s wall \(([\d. /]+)\), "
                                                 rf"{NUMBER} s CPU; peak extra memory {NUMBER} MB$", out):
        runs = [float(r) for r in runs.split(" / ")]
        assert len(runs) == 2 and 0 < float(best) and abs(float(best) - min(runs)) <= 0.0051, out  # to rounding
        assert float(cpu) > 0 and float(memory) >= 0, out
        table[algo] = (float(best), float(cpu), float(memory))
    assert set(table) == {"grpo", "grail"}, out
    share = float(re.search(rf"^grail saliency share of its update \(median\): {NUMBER}$", out, re.M).group(1))
    assert 0 < share < 1, out
    span_ms = float(re.search(rf"^grail span codes \(trainer side\): {NUMBER} ms per 1000 response tokens$", out,
                              re.M).group(1))
    assert 0 < span_ms < 10_000, out
    wall, cpu = map(float, re.search(rf"^ratio grail/grpo update time {NUMBER} \(wall\), {NUMBER} \(CPU\)$", out,
                                     re.M).groups())
    assert quotient_agrees(wall, table["grail"][0], table["grpo"][0], 0.001, 0.001, 0.01), out
    assert quotient_agrees(cpu, table["grail"][1], table["grpo"][1], 0.001, 0.001, 0.01), out
    memory = float(re.search(rf"^ratio grail/grpo update peak memory {NUMBER}$", out, re.M).group(1))
    assert quotient_agrees(memory, table["grail"][2], table["grpo"][2], 1, 1, 0.01), out


def test_the_soak_report_gives_each_process_its_growth_and_slope_after_the_warm_up():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from soak_memory import report, slope_per_100

    assert slope_per_100([(50, 100.0), (150, 110.0)]) == 10.0
    assert slope_per_100([(10, 5.0), (20, 7.0), (30, 9.0)]) == 20.0
    samples = [
        {"step": 10, "title": "ray::TaskRunner", "pid": 1, "rss_mib": 50.0},  # warm-up: left out
        {"step": 50, "title": "ray::TaskRunner", "pid": 1, "rss_mib": 100.0},
        {"step": 150, "title": "ray::TaskRunner", "pid": 1, "rss_mib": 104.0},
        {"step": 50, "title": "ray::WorkerDict", "pid": 2, "rss_mib": 200.0},
        {"step": 150, "title": "ray::WorkerDict", "pid": 2, "rss_mib": 212.0},
    ]
    lines, grows = report(samples, warmup=50)
    assert grows and len(lines) == 2
    assert lines[0].startswith("ray::TaskRunner (pid 1)") and "+4.00 %" in lines[0] and "+4.00 MiB/100" in lines[0]
    assert lines[0].endswith("flat") and lines[1].endswith("GROWS") and "+6.00 %" in lines[1]


def test_react_step_benchmark_answers_every_item_once_with_hostile_items_in_flight():
    """benchmarks/react_step.py, tiny: one of each hostile kind (infinite loop, memory hog, 200k-node DOM) among 6
    items, all in flight at once; the server's own count, the rates and the cores estimate agree with what it
    measured."""
    out = run_benchmark("react_step", "--items", 6, "--hostile-share", 0.5, "--warmup", 0, "--render-timeout-s", 2,
                        timeout=300)
    assert "verdicts     : 6/6 ids answered, 0 lost, 0 duplicated, transport errors 0" in out, out
    assert "hostile      : 3 (50% rounded up): infinite_loop 1, memory_hog 1, dom_200k 1" in out, out
    kinds = {kind: (int(answered), int(items), int(errors), int(compiled), int(hurt), float(slowest), flags)
             for kind, answered, items, errors, compiled, hurt, slowest, flags in matches(
                 rf"^(\w+)\s*: (\d+)/(\d+) answered, server errors (\d+), compiled (\d+), hurt (\d+), slowest "
                 rf"{NUMBER} s; flags: (.+)$", out)}
    assert set(kinds) == {"normal", "infinite_loop", "memory_hog", "dom_200k"}, out
    assert kinds["normal"][:5] == (3, 3, 0, 3, 0) and kinds["normal"][6] == "none", out  # the fixtures compile
    for kind in ("infinite_loop", "memory_hog", "dom_200k"):  # answered, not the server's error result
        assert kinds[kind][:3] == (1, 1, 0), (kind, out)
    for kind in ("infinite_loop", "memory_hog"):  # no page of theirs ever renders: flagged, not compiled
        assert kinds[kind][3] == 0 and kinds[kind][6] != "none", (kind, out)
    assert kinds["infinite_loop"][5] >= 2.0, out  # it ran until the 2 s render limit stopped it
    # the server's own /health count is the items sent, and it still answers
    assert re.search(r"^after        : /health 200 \(browser \w+\), scored 6, ", out, re.M), out
    wall, rate, p50, slowest = map(float, re.search(
        rf"^step wall    : {NUMBER} s = {NUMBER} items/s on .+ \(latency p50 {NUMBER} s, max {NUMBER} s\)$", out,
        re.M).groups())
    assert quotient_agrees(rate, 6, wall, 0, 0.1, 0.01), out
    assert 0 < p50 <= slowest <= wall + 0.1 and max(k[5] for k in kinds.values()) == slowest, out
    cpu, per_item, per_core = map(float, re.search(
        rf"^CPU          : {NUMBER} s for the step = {NUMBER} s per item -> {NUMBER} items/s per core$", out,
        re.M).groups())
    assert cpu > 0 and quotient_agrees(per_item, cpu, 6, 0.1, 0, 0.001), out
    assert quotient_agrees(per_core, 1, per_item, 0, 0.001, 0.01), out
    keep_up = matches(rf"^keep up      : generation\s+{NUMBER} s/step ->\s+{NUMBER} cores \((\d+) whole\)", out)
    assert [float(gen) for gen, *_ in keep_up] == [30.0, 60.0, 120.0], out
    for gen, cores, whole in keep_up:  # items x CPU s per item / generation s per step, rounded up
        assert quotient_agrees(float(cores), 6 * per_item, float(gen), 6 * 0.001, 0, 0.01), out
        assert int(whole) == math.ceil(float(cores) - 0.005) or int(whole) == math.ceil(float(cores) + 0.005), out
