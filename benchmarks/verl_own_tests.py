"""verl's own CPU tests with verl-bot's plugin loaded and without it: every test whose outcome differs.

    .venv/bin/python benchmarks/verl_own_tests.py [--files NAME ...] [--tests DIR] [--out DIR] [--path DIR ...]
                                                  [--jobs N]

verl 0.9.1's wheel installs its `tests/` package: 77 files, 30 of them `*_on_cpu.py` (the default set here).
verl's `release/v0.9.0` branch has 98 `*_on_cpu.py` files, among them the replay-buffer, trainer-base and
engine forward-step tests the wheel leaves out: `--tests DIR` runs the `*_on_cpu.py` files of such a checkout
(DIR is the folder that holds `tests/`). `--files` keeps the files whose path contains one of the NAMEs.

Each file runs twice, each time in a fresh pytest process of its own: with the plugin (verl's default,
`VERL_USE_EXTERNAL_PLUGINS=auto`, and a check that it really loads) and without (`=none`, verl's own switch,
read in `verl/__init__.py`). verl-bot is put on the path through a folder holding only a link to its package,
so that verl's `tests` package is verl's (verl-bot's repository has a `tests` package too). From each run's
JUnit XML it takes every test's outcome (passed, failed, error, skipped) and prints, per file, the counts of
both runs and every test whose outcome differs; the exit status is 1 when any differs. Goal: 0. `--jobs N`
runs N of these processes at a time.

verl's agent-loop tests are `async` and need pytest-asyncio, which verl-bot's environment does not install;
without it they fail in both runs alike. `--path DIR` puts DIR on the test processes' path, e.g. after
`pip install --target outputs/verl_test_deps --no-deps pytest-asyncio==1.5.0`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path

POLICIES = ("auto", "none")
PLUGIN_LOADS = "import sys, verl; print('verl_bot.verl_entry' in sys.modules)"


def wheel_tests() -> tuple[Path, list[str]]:
    """(the folder holding verl's installed `tests/`, its `tests/**/*_on_cpu.py` files as in verl's RECORD)."""
    files = [str(f) for f in metadata.files("verl") or [] if str(f).startswith("tests/") and
             str(f).endswith("_on_cpu.py")]
    return Path(metadata.distribution("verl").locate_file("")), sorted(files)


def checkout_tests(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in (root / "tests").rglob("*_on_cpu.py"))


def plugin_path(workdir: Path, extra: list[Path]) -> str:
    """`extra`, then a folder on which `verl_bot` (this checkout's) is importable and nothing else of its
    repository, as a PYTHONPATH."""
    import verl_bot

    link = workdir / "verl_bot"
    if not link.exists():
        link.symlink_to(Path(verl_bot.__file__).parent, target_is_directory=True)
    return os.pathsep.join([*(str(p.resolve()) for p in extra), str(workdir)])


def environment(policy: str, path: str) -> dict[str, str]:
    return {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": policy, "PYTHONPATH": path}


def outcomes(report: Path) -> dict[str, str]:
    """test id -> passed / failed / error / skipped, from a JUnit XML report (empty if pytest wrote none)."""
    if not report.exists():
        return {}
    found = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}.get(kinds[0] if kinds else "", "passed")
        found[f"{case.get('classname')}::{case.get('name')}"] = outcome
    return found


def run_file(root: Path, file: str, policy: str, env: dict[str, str], out: Path) -> dict[str, str]:
    """One fresh pytest process on `file` under `policy`, in `root`; its outcomes."""
    report = out / f"{file.replace('/', '__')}.{policy}.xml"
    ini = out / "pytest.ini"
    ini.write_text("[pytest]\n")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(ini), "--rootdir", str(root),
           f"--junitxml={report}", str(root / file)]
    subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=900)  # verl's tests read
    # files relative to verl's repository root (verl/trainer/config/...), which `root` is for the wheel too
    return outcomes(report)


def differences(with_plugin: dict[str, str], without: dict[str, str]) -> list[str]:
    """One line per test whose outcome differs (a test only one run has counts as 'absent' in the other)."""
    return [
        f"{test}: with the plugin {with_plugin.get(test, 'absent')}, without {without.get(test, 'absent')}"
        for test in sorted(set(with_plugin) | set(without))
        if with_plugin.get(test) != without.get(test)
    ]


def count(results: dict[str, str]) -> str:
    kinds = ("passed", "failed", "error", "skipped")
    return " ".join(f"{sum(v == k for v in results.values())} {k}" for k in kinds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", type=Path, help="a verl checkout: the folder that holds its tests/")
    parser.add_argument("--files", nargs="*", default=[], help="keep the files whose path contains one of these")
    parser.add_argument("--out", type=Path, help="where the reports go (default: a temporary folder)")
    parser.add_argument("--path", type=Path, nargs="*", default=[], help="folders put on the tests' path")
    parser.add_argument("--jobs", type=int, default=1, help="test processes at a time")
    args = parser.parse_args()
    root, files = (args.tests.resolve(), checkout_tests(args.tests.resolve())) if args.tests else wheel_tests()
    files = [f for f in files if not args.files or any(name in f for name in args.files)]
    out = args.out or Path(tempfile.mkdtemp(prefix="verl_own_tests_"))
    out.mkdir(parents=True, exist_ok=True)
    path = plugin_path(out, args.path)
    with concurrent.futures.ThreadPoolExecutor(max(args.jobs, 1)) as pool:
        checks = {p: pool.submit(subprocess.run, [sys.executable, "-c", PLUGIN_LOADS], env=environment(p, path),
                                 capture_output=True, text=True) for p in POLICIES}
        loads = {p: check.result().stdout.split()[-1:] for p, check in checks.items()}
        if loads != {"auto": ["True"], "none": ["False"]}:
            print(f"verl-bot's plugin does not load as expected (auto/none: {loads}); nothing to compare")
            return 2
        runs = {(f, p): pool.submit(run_file, root, f, p, environment(p, path), out) for f in files for p in POLICIES}
        print(f"{len(files)} files of verl's tests under {root}, each with VERL_USE_EXTERNAL_PLUGINS=auto and =none")
        total = sum(report(file, runs[file, "auto"].result(), runs[file, "none"].result()) for file in files)
    print(f"outcomes that differ: {total} (reports in {out})")
    return 1 if total else 0


def report(file: str, with_plugin: dict[str, str], without: dict[str, str]) -> int:
    """Print one file's counts and its differing tests; returns how many differ."""
    diff = differences(with_plugin, without)
    print(f"{file}: with the plugin {count(with_plugin)} | without {count(without)}"
          f"{' | ' + str(len(diff)) + ' differ' if diff else ''}")
    for line in diff:
        print(f"  DIFFERS {line}")
    return len(diff)

if __name__ == "__main__":
    sys.exit(main())
