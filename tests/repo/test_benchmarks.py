"""The benchmarks stay runnable (tiny sizes; the figures themselves come from full runs, not from tests)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_advantage_benchmark_prints_ratios():
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "advantage.py"),
        "--rows",
        "16",
        "--tokens",
        "32",
        "--repeats",
        "1",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ratio bot/grpo " in proc.stdout and "bot extra memory" in proc.stdout


def test_token_panel_benchmark_prints_ratios():
    """benchmarks/token_panel.py, tiny: a real TransferQueue, verl's `Tracking` with wandb (offline) and tensorboard."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "token_panel.py"), "--rows", "16", "--group", "4", "--tokens",
           "32", "--prompt", "16", "--repeats", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ratio panel/baseline (full step, defaults): wall " in proc.stdout, proc.stdout
    assert "panel size at defaults: HTML " in proc.stdout and "ratio panel 4x/defaults" in proc.stdout


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


def test_grail_update_benchmark_prints_ratios():
    cmd = [sys.executable, str(ROOT / "benchmarks" / "grail_update.py"), "--hidden", "32", "--layers", "2",
           "--rows", "4", "--prompt", "8", "--response", "24", "--micro", "2", "--repeats", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ratio grail/grpo update time " in proc.stdout and "ratio grail/grpo update peak memory" in proc.stdout


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
    # one of each hostile kind (infinite loop, memory hog, 200k-node DOM) among 6 items, all in flight at once
    cmd = [sys.executable, str(ROOT / "benchmarks" / "react_step.py"), "--items", "6", "--hostile-share", "0.5",
           "--warmup", "0", "--render-timeout-s", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "6/6 ids answered, 0 lost, 0 duplicated" in proc.stdout
    assert "memory_hog" in proc.stdout and "dom_200k" in proc.stdout and "cores" in proc.stdout
