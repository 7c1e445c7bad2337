"""The contract between verl-bot and its reward servers (`verl_bot_contract`) is standard library only and written
once: neither side defines its own verdict span, validator, step or think split, or loopback rule; and no module of
the plugin imports a server when it is imported (only a function that needs one, on a run that uses it; the import
of the plugin in a process without the servers: tests/component/test_no_web_stack.py)."""

import ast
import sys
from pathlib import Path

import verl_bot_contract

ROOT = Path(verl_bot_contract.__file__).parents[1]
ONCE = {"Span", "validate_verdict", "finite", "is_loopback", "split_steps", "split_think", "Step", "ThinkSplit"}


def imported_roots_of(node: ast.Import | ast.ImportFrom) -> set[str]:
    """The top-level packages one import statement imports."""
    if isinstance(node, ast.Import):
        return {alias.name.split(".")[0] for alias in node.names}
    return {node.module.split(".")[0]} if node.module and node.level == 0 else set()


def imported_roots(path: Path) -> set[str]:
    """The top-level packages `path` imports (anywhere in it)."""
    nodes = ast.walk(ast.parse(path.read_text()))
    return set().union(*(imported_roots_of(n) for n in nodes if isinstance(n, ast.Import | ast.ImportFrom)))


def defined_names(path: Path) -> set[str]:
    """The classes, functions and assigned names at the top of `path`."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def test_the_contract_imports_only_the_standard_library_and_itself():
    for path in (ROOT / "verl_bot_contract").rglob("*.py"):
        foreign = imported_roots(path) - set(sys.stdlib_module_names) - {"__future__", "verl_bot_contract"}
        assert not foreign, (path.name, foreign)


def test_the_contract_is_written_once():
    twins = {
        f"{path.relative_to(ROOT)}: {name}"
        for package in ("verl_bot", "reward_servers")
        for path in (ROOT / package).rglob("*.py")
        if "node_modules" not in path.parts
        for name in defined_names(path) & ONCE
    }
    assert not twins, sorted(twins)
    assert ONCE <= set().union(*(defined_names(p) for p in (ROOT / "verl_bot_contract").glob("*.py")))


def test_no_module_of_the_plugin_imports_a_server_at_its_top():
    found = {
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for package in ("verl_bot", "verl_bot_vllm", "verl_bot_contract")
        for path in (ROOT / package).rglob("*.py")
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.Import | ast.ImportFrom) and "reward_servers" in imported_roots_of(node)
    }
    assert not found, sorted(found)
