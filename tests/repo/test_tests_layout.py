"""The tests' own layout: no module imports a test module (what several modules share lives in tests/harness/); the
tests that `make test-fast` leaves out (tests/conftest.py's SLOW) are named by tests that exist."""

import ast
import re
import subprocess
from collections import Counter
from pathlib import Path

from tests.conftest import FIRST, SLOW, SPREAD

ROOT = Path(__file__).resolve().parents[2]
TEST_MODULE = re.compile(r"^tests(\.\w+)*\.test_\w+$")


def imported_test_modules(source: str) -> list[str]:
    """The test modules (`tests.<folder>.test_<name>`, or a relative `.test_<name>`) that `source` imports, anywhere
    in it (module level or inside a function)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if TEST_MODULE.match(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            found += [name for name in names if TEST_MODULE.match(name)]
        elif isinstance(node, ast.ImportFrom):
            names = [*(node.module or "").split("."), *(alias.name for alias in node.names)]
            found += ["." * node.level + name for name in names if name.startswith("test_")]
    return found


def python_files() -> list[Path]:
    """The repository's Python files, tracked or new (what git does not ignore)."""
    names = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout
    return [ROOT / name for name in names.splitlines() if (ROOT / name).is_file()]


def test_no_module_imports_a_test_module():
    files = python_files()
    assert ROOT / "tests" / "harness" / "trainer.py" in files and ROOT / "benchmarks" / "outage.py" in files
    offenders = [f"{path.relative_to(ROOT)}: {name}" for path in files
                 for name in imported_test_modules(path.read_text())]
    assert not offenders, "import it from tests/harness/ instead:\n" + "\n".join(offenders)


def test_an_import_of_a_test_module_is_found_in_every_form():
    planted = """
from tests.e2e.test_cpu_e2e import Run
import tests.unit.test_reco as reco
from tests.component import test_prm, conftest


def later():
    from .test_spans import spans
"""
    assert imported_test_modules(planted) == ["tests.e2e.test_cpu_e2e", "tests.unit.test_reco",
                                              "tests.component.test_prm", ".test_spans"]
    shared = "from tests.harness.trainer import Run, workdir\nfrom tests.conftest import free_port\nimport tests\n"
    assert imported_test_modules(shared) == []


def test_the_slow_list_names_test_modules_and_tests_that_exist():
    """conftest.py names a module by its file name (SPREAD, FIRST, SLOW): names unique over the folders; a SLOW entry
    `module::test` names a test function of that module."""
    paths = sorted((ROOT / "tests").rglob("test_*.py"))
    twice = [name for name, n in Counter(path.name for path in paths).items() if n > 1]
    assert not twice, twice
    modules = {path.name: path for path in paths}
    stale = []
    for entry in sorted(SLOW | SPREAD | set(FIRST)):
        module, _, test = entry.partition("::")
        if module not in modules or (test and f"def {test}(" not in modules[module].read_text()):
            stale.append(entry)
    assert not stale, stale
