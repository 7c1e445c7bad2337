"""Every verl release verl-bot supports has all its touch points, on both trainer paths.

The installed verl is checked by `tests/component/test_touch_points.py`; each other release of
`SUPPORTED_VERSIONS` is installed from PyPI beside it (`pip install --no-deps --target`, kept in
`outputs/verl-<version>/`: the releases share their dependencies) and put first on PYTHONPATH, and
`python -m verl_bot.hooks.touch_points` must find every touch point there (vLLM's rollout included: the CPU
backend is selected). A run trains on it as on the installed one (by hand: docs/verl_versions.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.touch_points import json_report
from verl_bot.hooks.compat import SUPPORTED_VERSIONS

ROOT = Path(__file__).resolve().parents[2]


def installed(version: str) -> Path:
    """verl `version` from PyPI in `outputs/verl-<version>/` (once), without its dependencies."""
    folder = ROOT / "outputs" / f"verl-{version}"
    if not (folder / "verl" / "version" / "version").is_file():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                        "--upgrade", "--target", str(folder), f"verl=={version}"], check=True, timeout=600)
    return folder


@pytest.mark.parametrize("version", [v for v in SUPPORTED_VERSIONS if v != __import__("verl").__version__])
def test_a_supported_verl_release_has_every_touch_point(version):
    env = {**os.environ, "PYTHONPATH": str(installed(version)), "VERL_PLATFORM": "cpu"}
    proc, report = json_report(env)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert report["verl"] == version
    assert {f["status"] for fs in report["paths"].values() for f in fs} == {"found"}
    _, installed_report = json_report({**os.environ, "VERL_PLATFORM": "cpu"})  # the installed verl, for its labels
    labels = {path: sorted(f["label"] for f in fs) for path, fs in report["paths"].items()}
    assert labels == {path: sorted(f["label"] for f in fs) for path, fs in installed_report["paths"].items()}
