"""The benchmarks stay runnable (tiny sizes; the figures themselves come from full runs, not from tests)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_advantage_benchmark_prints_ratios():
    cmd = [sys.executable, str(ROOT / "benchmarks" / "advantage.py"), "--rows", "16", "--tokens", "32", "--repeats", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ratio bot/grpo " in proc.stdout and "bot extra memory" in proc.stdout
