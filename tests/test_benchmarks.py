"""The benchmarks stay runnable (tiny sizes; the figures themselves come from full runs, not from tests)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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


def test_steps_to_threshold_uses_the_trailing_mean():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from sample_efficiency import steps_to_threshold

    assert steps_to_threshold([0.1, 0.95, 0.2, 0.9, 0.95, 0.96], threshold=0.9, window=3) == 6
    assert steps_to_threshold([0.95, 0.95], threshold=0.9, window=1) == 1
    assert steps_to_threshold([0.5] * 10, threshold=0.9, window=3) is None


def test_grail_update_benchmark_prints_ratios():
    cmd = [sys.executable, str(ROOT / "benchmarks" / "grail_update.py"), "--hidden", "32", "--layers", "2",
           "--rows", "4", "--prompt", "8", "--response", "24", "--micro", "2", "--repeats", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ratio grail/grpo update time " in proc.stdout and "ratio grail/grpo update peak memory" in proc.stdout
