"""The layout rules of verl-bot, checked on its source: no import circles; verl's internals touched in one folder."""

import ast
from pathlib import Path

import verl_bot

PACKAGE = Path(verl_bot.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def internal_imports(path: Path, modules: set[str]) -> set[str]:
    """verl_bot modules imported anywhere in `path` (module level or inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        found.update(name for name in names if name in modules)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {name: internal_imports(path, set(paths)) - {name} for name, path in paths.items()}
    # importing a.b.c imports its packages a.b and a first: add those edges too
    for name in list(graph):
        graph[name] |= {".".join(dep.split(".")[:i]) for dep in set(graph[name]) for i in range(2, dep.count(".") + 1)}
        graph[name] -= {"verl_bot", name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1 and not node.startswith(dep + "."):  # a package importing its own submodule
                return stack[stack.index(dep) :] + [dep]
            if dep not in state:
                cycle = visit(dep)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_import_graph_has_no_circle():
    graph = import_graph()
    assert "verl_bot.hooks.v1.compute_advantage" in graph  # the walk sees subpackages
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_a_planted_circle_is_found():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_only_the_plugin_and_the_cpu_backend_install_hooks():
    """The plugin installs the hooks, the CPU backend its own; nothing else reaches into hooks/ (what only reads
    verl's reward functions lives with the reward path, in rewards/: no arrow from a lower floor up into hooks/)."""
    users = {
        name
        for name, deps in import_graph().items()
        if not name.startswith("verl_bot.hooks") and any(d.startswith("verl_bot.hooks") for d in deps)
    }
    assert users == {"verl_bot.plugin", "verl_bot.cpu"}


def test_every_module_of_the_hooks_folder_changes_verl():
    """hooks/ is for what changes verl or its process: a wrapper (`wrap`), a ledger entry, the driver's hook;
    besides them only the folder's own machinery (the transaction, the import trigger, the wrap helper, the
    touch-point checks: `compat`) and each trainer adapter's batch (`v1/batch.py`, `legacy/batch.py`: how its
    trainer's batch reads as verl-bot's `TrainingBatch`)."""
    machinery = {"__init__.py", "transaction.py", "on_import.py", "wrap.py", "compat.py", "batch.py"}
    idle = [
        path.relative_to(PACKAGE / "hooks").as_posix()
        for path in (PACKAGE / "hooks").rglob("*.py")
        if path.name not in machinery
        and not any(needle in path.read_text() for needle in ("wrap(", "LEDGER.", "sys.excepthook ="))
    ]
    assert not idle, idle


def test_estimators_and_the_ground_floor_import_no_wrapper():
    graph = import_graph()
    floor = {"verl_bot.errors"}
    assert all(not graph[name] for name in floor), {name: graph[name] for name in floor}
    for name, deps in graph.items():
        if name.startswith(("verl_bot.advantage", "verl_bot.losses")):
            assert not {d for d in deps if d.startswith(("verl_bot.hooks", "verl_bot.plugin", "verl_bot.rewards"))}, (
                name,
                deps,
            )


def test_verl_internals_are_patched_only_in_the_hooks_folder():
    """Assignments to verl attributes (`verl_x.attr = ...`, `__defaults__`, private registries) live in hooks/."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if "hooks" in path.relative_to(PACKAGE).parts:
            continue
        text = path.read_text()
        for needle in ("__defaults__", "_ROLLOUT_REGISTRY", "ADV_ESTIMATOR_REGISTRY[", "POLICY_LOSS_REGISTRY["):
            if needle in text:
                offenders.append(f"{path.relative_to(PACKAGE)}: {needle}")
    assert not offenders, offenders


def test_the_plugin_imports_nothing_of_the_demo_package():
    """`verl_bot_demo` (the CPU demo's tasks, scorers and tiny models) stands above the plugin: no module of `verl_bot`
    imports it (the `bot` manager names the built-in scorers by module path and loads them when a run uses one)."""
    importing = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            if any(name == "verl_bot_demo" or name.startswith("verl_bot_demo.") for name in names):
                importing.append(str(path.relative_to(PACKAGE.parent)))
    assert not importing, importing
