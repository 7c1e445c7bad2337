"""Every refusal and every run-stopping error of verl-bot has its entry in docs/troubleshooting.md.

The messages come from the source, read with `ast` (no run needed):

- every `VerlBotConfigError`, `RolloutEngineError` (and their subclasses in verl_bot/) built anywhere in verl_bot/:
  the start-up refusals of `verl_bot/launch/preflight.py`, the estimators' option checks it calls, and what stops a run
  (the replay buffer's markers, the weight-sync watch, the driver's `verl-bot: run stopped:` line);
- the one-line reasons the start-up checks return (`*_problem` functions), the messages built for them by
  `*_message` functions and the rollout-failure marker (`engine_failure`);
- the knob problems the option checks collect (`problems` lists) and the `ValueError`s of the checks whose message
  becomes a refusal's (`WRAPPED`: the scorer specs, the local noise, ReCo's weight knobs).

A message's pattern is its literal text up to `KEY_CHARS` characters, module-level string constants filled in and
any value in between (`<...>` on the page). A table row of docs/troubleshooting.md (whitespace collapsed, `\\|`
read as `|`) whose message matches it is its entry; its cause and fix must not be empty, and each row must match
some message (no entry for a message the code no longer has). A message with less than `MIN_KEY` characters of
its own (it wraps another error, or is composed from a declaration: a knob's refusal) is covered by a row that
names the file making it, and such a row is its entry when it also matches it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "verl_bot"
PAGE = ROOT / "docs" / "troubleshooting.md"
ERRORS = {"VerlBotConfigError", "RolloutEngineError"}
WRAPPED = {  # ValueErrors whose message a refusal carries: module -> functions
    "verl_bot/rewards/scorers.py": {"build_scorer", "_noise_option", "_load_function"},
    "verl_bot/rewards/noise.py": {"__post_init__"},
    "verl_bot/advantage/reco.py": {"check_weight_knobs"},
    "verl_bot/observe/token_records.py": {"recorded_steps"},
}
MIN_KEY, KEY_CHARS = 16, 60


def _modules() -> dict[str, ast.Module]:
    return {str(p.relative_to(ROOT)): ast.parse(p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))}


def error_classes(modules: dict[str, ast.Module]) -> set[str]:
    """ERRORS and every class of verl_bot/ that derives from one of them (to a fixpoint)."""
    found = set(ERRORS)
    classes = [n for tree in modules.values() for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    while True:
        more = {c.name for c in classes if any(getattr(b, "id", None) in found for b in c.bases)} - found
        if not more:
            return found
        found |= more


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level `NAME = "text"` assignments."""
    return {
        t.id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
        for t in n.targets
        if isinstance(t, ast.Name)
    }


def fragments(node: ast.AST, constants: dict[str, str]) -> list[str | None]:
    """The literal text of a message expression in order; None where a value is filled in."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Name) and node.id in constants:
        return [constants[node.id]]
    if isinstance(node, ast.JoinedStr):
        return [part for value in node.values for part in fragments(value, constants)]
    if isinstance(node, ast.FormattedValue):
        return fragments(node.value, constants) if isinstance(node.value, ast.Name) and node.value.id in constants \
            else [None]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return fragments(node.left, constants) + fragments(node.right, constants)
    if isinstance(node, ast.Subscript):  # a message cut to a length keeps its start
        return fragments(node.value, constants)
    return [None]


def pattern(parts: list[str | None], chars: int = KEY_CHARS) -> tuple[str, int]:
    """(regex, characters of text) of a message: its literal text, whitespace collapsed, up to `chars` characters,
    with `.*?` where a value may be filled in (the page writes `<...>` there); values before the first text and
    after the last are left out."""
    pieces, used = [], 0
    for part in parts:
        if part is None:
            if pieces and pieces[-1] != ".*?":
                pieces.append(".*?")
            continue
        text = re.sub(r"\s+", " ", part)[: chars - used]
        if text:
            pieces.append(re.escape(text))
            used += len(text)
        if used >= chars:
            break
    while pieces and pieces[-1] == ".*?":
        pieces.pop()
    return "".join(pieces), used


def _called(node: ast.AST) -> str | None:
    func = getattr(node, "func", None)
    return getattr(func, "id", None) or getattr(func, "attr", None)


def _problem_messages(function: ast.FunctionDef, constants: dict[str, str]) -> list[tuple[list, int]]:
    """(fragments, line) of what a start-up check returns or collects: `return <text>` of a `*_problem` or
    `*_failure` function or of a `*_message` function (a message two checks share), the arguments of
    `problems.append`, and the (name, text) tuples of a `problems = [...]` list (the message names the knob:
    `name text`)."""
    found = []
    for node in ast.walk(function):
        if isinstance(node, ast.Return) and function.name.endswith(("_problem", "_failure", "_message")) and node.value:
            if any(part is not None for part in fragments(node.value, constants)):  # not `return None`, `str(exc)`
                found.append((fragments(node.value, constants), node.lineno))
        elif _called(node) == "append" and getattr(node.func.value, "id", None) == "problems":
            found += [(fragments(arg, constants), node.lineno) for arg in node.args]
        elif isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "problems":
            for row in [e for e in getattr(node.value, "elts", []) if isinstance(e, ast.Tuple)]:
                name, text = row.elts[-2:]
                found.append((fragments(name, constants) + [" "] + fragments(text, constants), row.lineno))
    return found


def _messages_of(path: str, tree: ast.Module, classes: set[str]) -> list[tuple[list, int]]:
    constants = _constants(tree)
    found = [(fragments(n.args[0], constants), n.lineno)
             for n in ast.walk(tree) if isinstance(n, ast.Call) and _called(n) in classes and n.args]
    for function in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
        found += _problem_messages(function, constants)
        if function.name in WRAPPED.get(path, ()):
            found += [(fragments(n.exc.args[0], constants), n.lineno) for n in ast.walk(function)
                      if isinstance(n, ast.Raise) and _called(n.exc) == "ValueError" and n.exc.args]
    return found


def messages() -> dict[str, tuple[str, int]]:
    """regex -> (`path:line` where verl_bot/ makes the message, its literal characters), for every message of the
    module docstring."""
    modules = _modules()
    classes = error_classes(modules)
    found: dict[str, tuple[str, int]] = {}
    for path, tree in modules.items():
        for parts, line in _messages_of(path, tree, classes):
            regex, chars = pattern(parts)
            if chars:
                found.setdefault(regex, (f"{path}:{line}", chars))
    return found


def entries(text: str) -> list[tuple[str, str, str]]:
    """(message, cause, fix) of every table row of the page below its header rows (whitespace collapsed)."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("| ") or line.startswith(("| message |", "|---")):
            continue
        cells = [" ".join(c.replace("\\|", "|").split()) for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        rows.append(tuple(cells) if len(cells) == 3 else (line, "", ""))
    return rows


def covered(regex: str, where: str, chars: int, rows: list[tuple[str, str, str]]) -> bool:
    """A message has its entry: a row whose message matches it; a message with less than MIN_KEY characters of
    its own text (it wraps another error) is covered by a row that names the file that makes it."""
    if chars < MIN_KEY:
        return any(where.split(":")[0] in " ".join(row) for row in rows)
    return any(re.search(regex, message) for message, _, _ in rows)


def test_every_refusal_and_stop_has_an_entry():
    rows = entries(PAGE.read_text())
    assert len(rows) >= 40
    missing = [f"{where}: {regex}" for regex, (where, chars) in messages().items()
               if not covered(regex, where, chars, rows)]
    assert not missing, "messages without an entry in docs/troubleshooting.md:\n" + "\n".join(missing)


def test_every_entry_is_a_message_of_the_code_with_its_cause_and_fix():
    found = messages()
    for row in entries(PAGE.read_text()):
        message, cause, fix = row
        assert cause and fix, f"an entry without its cause or fix: {message[:80]}"
        assert any(re.search(regex, message) and covered(regex, where, chars, [row])
                   for regex, (where, chars) in found.items()), f"an entry for no message of verl_bot/: {message[:80]}"


def test_the_extraction_sees_what_it_is_for():
    """Messages of every kind are found: a raise, a subclass, a returned reason, a collected knob problem, a
    wrapped ValueError, a module constant filled in; a message that starts with a value is keyed on its text."""
    found = {regex.replace("\\", ""): where for regex, (where, _) in messages().items()}
    for text, where in (
        ("algorithm.filter_groups.enable=true on a legacy trainer", "verl_bot/launch/trainer_modes.py"),
        ("bot reward manager: no scorer for data_source=", "verl_bot/launch/preflight.py"),  # and the manager's
        ("(credentials refused)", "verl_bot/rewards/scorers.py"),  # a subclass: ScorerRefused
        ("algorithm.token_report_steps must be a list", "verl_bot/observe/token_records.py"),  # STEPS_KEY filled in
        ("adv_estimator=grail with actor_rollout_ref.actor.strategy=fs", "verl_bot/advantage/grail.py"),  # a method's
        ("+.*?=.*?: must be ", "verl_bot/knobs.py"),  # a knob's value, every declaration's
        ("unknown .*?: the .*? knobs are ", "verl_bot/knobs.py"),  # a key no method declares
        ("has no chat template, and verl's dataset", "verl_bot/launch/preflight.py"),  # a *_message
        ("reco_w_max must be >= 1 (the weights are rescaled", "verl_bot/advantage/reco.py"),  # wrapped ValueError
        ("group(s) lost their rollouts:", "verl_bot/hooks/v1/replay_buffer.py"),  # starts with a value
    ):
        assert any(text in k and w.startswith(where) for k, w in found.items()), text
    parts = fragments(ast.parse('f"{n} group(s) lost: {PREFIX}x{y}"').body[0].value, {"PREFIX": "verl-bot: "})
    assert parts == [None, " group(s) lost: ", "verl-bot: ", "x", None]
    assert pattern(parts) == (re.escape(" group(s) lost: verl-bot: x"), 27)
    assert pattern(["abc ", None, "defgh"], chars=6) == ("abc\\ .*?de", 6)
    assert entries("| message | cause | fix |\n|---|---|---|\n| `a \\| b` | c | d |\n| x | y |") == [
        ("`a | b`", "c", "d"), ("| x | y |", "", "")
    ]


def test_the_page_shows_how_a_stopped_run_ends():
    """The driver's last line (`verl_bot/hooks/driver.py`, PREFIX) is what a user searches for."""
    prefix = _constants(_modules()["verl_bot/hooks/driver.py"])["PREFIX"]
    assert prefix == "verl-bot: run stopped:"
    assert f"`{prefix} <Type>: <message>`" in PAGE.read_text()
