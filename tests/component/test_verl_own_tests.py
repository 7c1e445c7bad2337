"""verl's own CPU tests pass and fail the same with verl-bot's plugin loaded as without it (issue 23, item 6).

`benchmarks/verl_own_tests.py` runs any set of them (default: the 30 `*_on_cpu.py` files of verl's wheel, one
process per file and per mode; its docstring has the last full run's figures); here the two files closest to
what verl-bot changes: verl's estimator and loss registries (core algos) and the trainer's multi-trajectory
advantage (`trainer_base.compute_advantage_for_multi_trajectories`, a module global verl-bot wraps).
"""

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "verl_own_tests.py"
SUBSET = ("test_core_algos_on_cpu", "test_multi_trajectories_advantage_on_cpu")


def test_verls_own_tests_have_the_same_outcomes_with_and_without_the_plugin(tmp_path):
    cmd = [sys.executable, str(BENCH), "--out", str(tmp_path), "--jobs", "2", "--files", *SUBSET]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert "outcomes that differ: 0" in proc.stdout and proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("tests/")]
    assert len(lines) == len(SUBSET) and all(" 0 passed" not in line.split("|")[0] for line in lines), lines


def test_a_changed_outcome_is_reported(tmp_path):
    sys.path.insert(0, str(BENCH.parent))
    from verl_own_tests import differences, outcomes

    report = tmp_path / "r.xml"
    report.write_text('<testsuites><testsuite><testcase classname="t" name="a"/><testcase classname="t" name="b">'
                      '<failure message="x"/></testcase></testsuite></testsuites>')
    assert outcomes(report) == {"t::a": "passed", "t::b": "failed"}
    assert differences(outcomes(report), {"t::a": "passed", "t::b": "passed"}) == [
        "t::b: with the plugin failed, without passed"
    ]
    assert differences({"t::a": "passed"}, {}) == ["t::a: with the plugin passed, without absent"]
