"""docs/knobs.md against the code's own settings: a knob cannot exist without its row, nor a row without its knob.

The knobs, read from the code:

- `+algorithm.<name>`: the knobs every method declares (`verl_bot.knobs`: the `settings` of each row of
  `verl_bot.advantage.ESTIMATORS` and `verl_bot.losses.LOSSES`), the token-report keys and the token panel's
  declaration (`verl_bot.observe.panels.PanelSettings`); no method reads a knob of its prefix past its
  declaration (`ast`: no `.get("<prefix>...")` in verl_bot/);
- `+reward.reward_kwargs.bot.<name>`: the manager's declaration (`verl_bot.rewards.settings.ManagerSettings`),
  `scorers`, and `prm.<name>` for the PRM's (`verl_bot.rewards.prm.PrmSettings`; a default of None or with a
  newline is stated in words);
- environment variables: the values of verl_bot/'s `*_ENV` / `*_ENVS` constants and every literal name it reads
  from `os.environ`, but the process variables in `NOT_SETTINGS`.

Where the code has a default (a declared knob), the row's default is it; each method's knob in docs/ALGORITHMS.md
carries the source its declaration gives (`[paper]`, `[code]`, `[ours]`), and so does each knob of the manager, the
PRM and the panels that has a row there or a source other than ours (then its row in docs/knobs.md says it); every
declared knob says what it does (`doc`).
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

from tests.harness.knobs import MANAGER, UNSET, algorithm_knobs, declared_knobs, manager_knob, manager_knobs
from verl_bot.knobs import Knob
from verl_bot.launch.activation import KNOB_PREFIXES
from verl_bot.observe.panels import PanelSettings
from verl_bot.rewards.prm import PrmSettings
from verl_bot.rewards.settings import ManagerSettings

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "knobs.md"
NOT_SETTINGS = {  # read or set by verl-bot, but not a setting of it
    "RANK": "the process's rank, set by the launcher",
    "CUDA_VISIBLE_DEVICES": "the devices a worker sees, set by Ray",
    "PYTHONUNBUFFERED": "set by the demo's console for its log, never read",
    "VERL_LOGGING_LEVEL": "verl's own; the default of VERL_BOT_LOG_LEVEL, in that row",
}
ENV_SUFFIXES = ("_ENV", "_ENVS")


def _trees() -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text()) for p in sorted((ROOT / "verl_bot").rglob("*.py"))}


def _value(node: ast.AST, constants: dict[str, object]) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return -node.operand.value
    return constants.get(getattr(node, "id", None), UNSET)


def _module_constants(tree: ast.Module) -> dict[str, object]:
    return {
        t.id: _value(n.value, {})
        for n in tree.body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name) and _value(n.value, {}) is not UNSET
    }


def read_knobs(trees: list[ast.Module] | None = None) -> dict[str, object]:
    """`<name>` -> default of every `.get("<name>", default)` in verl_bot/ (or `trees`) whose name has a knob
    prefix."""
    found: dict[str, object] = {}
    for tree in trees if trees is not None else _trees().values():
        constants = _module_constants(tree)
        for node in ast.walk(tree):
            func = getattr(node, "func", None)
            if isinstance(node, ast.Call) and getattr(func, "attr", getattr(func, "id", None)) == "get" and node.args:
                name = _value(node.args[0], constants)
                if isinstance(name, str) and name.startswith(KNOB_PREFIXES):
                    found.setdefault(name, _value(node.args[1], constants) if len(node.args) > 1 else UNSET)
    return found


READERS = ((ManagerSettings, ""), (PrmSettings, "prm."), (PanelSettings, ""))  # knobs of no method, name prefix


def environment_variables() -> set[str]:
    """The variables verl_bot/ names in `*_ENV(S)` constants or reads by a literal name, less NOT_SETTINGS."""
    readers = ("os.environ.get", "os.getenv", "os.environ.setdefault")
    found = set()
    for tree in _trees().values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "").endswith(ENV_SUFFIXES) for t in node.targets):
                found |= {n.value for n in ast.walk(node.value) if isinstance(n, ast.Constant)}
            elif isinstance(node, ast.Call) and ast.unparse(node.func) in readers and node.args:
                found |= {node.args[0].value} if isinstance(node.args[0], ast.Constant) else set()
    return found - set(NOT_SETTINGS)


# ------------------------------------------------------------------------------------------ the page
def _section(title: str) -> list[str]:
    text = PAGE.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)].splitlines()


def rows(title: str) -> dict[str, str]:
    """First-cell name -> default cell of the table under `## title` (a cell naming two knobs gives two rows,
    with the defaults in the same order)."""
    found = {}
    for line in _section(title):
        if not line.startswith("| `"):
            continue
        first, default = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:3]]
        names, defaults = re.findall(r"`([^`]+)`", first), re.findall(r"`[^`]*`", default)
        parent = names[0].rsplit(".", 1)[0] + "." if "." in names[0] else ""
        for i, name in enumerate(names):
            cell = defaults[i] if len(names) > 1 and len(defaults) == len(names) else default
            found[name if "." in name or not parent else parent + name] = cell
    return found


def hydra_rows() -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """The Hydra table split: (`+algorithm.*` knobs, `+reward.reward_kwargs.bot.*` knobs, verl's own keys)."""
    knobs, manager, verl = {}, {}, {}
    for key, default in rows("Hydra keys").items():
        if key.startswith("+algorithm."):
            knobs[key.removeprefix("+algorithm.")] = default
        elif key.startswith("+" + MANAGER):
            manager[manager_knob(key.removeprefix("+" + MANAGER))] = default
        else:
            verl[key] = default
    return knobs, manager, verl


def _literal(cell: str) -> object:
    """The default a cell states first: `true`/`false`, a number, else the text in its first backticks."""
    text = (re.findall(r"`([^`]*)`", cell) or [cell])[0]
    if text in ("true", "false"):
        return text == "true"
    try:
        return float(text)
    except ValueError:
        return text


def _same(code: object, cell: str) -> bool:
    stated = _literal(cell)
    if isinstance(code, bool) or isinstance(stated, bool):
        return code is stated
    if isinstance(code, int | float) and isinstance(stated, float):
        return float(code) == stated
    return str(code) == str(stated)


def test_every_algorithm_knob_has_its_row_and_every_row_its_knob():
    code, (page, _, _) = algorithm_knobs(), hydra_rows()
    assert len(code) >= 35  # bot, pure, pass, reco, vps, grail and the token report
    assert sorted(set(code) - set(page)) == [], "knobs without a row in docs/knobs.md"
    assert sorted(set(page) - set(code)) == [], "rows of docs/knobs.md without a knob in the code"


def test_every_manager_knob_has_its_row_and_every_row_its_knob():
    _, page, _ = hydra_rows()
    assert set(page) == set(manager_knobs())


def test_the_rows_defaults_are_the_codes():
    knobs, manager, _ = hydra_rows()
    stated = [(name, default, knobs.get(name, "(no row)")) for name, default in algorithm_knobs().items()
              if default is not UNSET]
    stated += [(name, default, manager.get(name, "(no row)")) for name, default in manager_knobs().items()
               if default is not UNSET]
    assert len(stated) >= 35
    wrong = [f"{name}: code {default!r}, page {cell!r}" for name, default, cell in stated if not _same(default, cell)]
    assert not wrong, "defaults that differ:\n" + "\n".join(wrong)


def test_verls_own_keys_in_the_table_are_not_knobs_of_ours():
    _, _, verl = hydra_rows()
    assert set(verl) == {"algorithm.adv_estimator", "algorithm.norm_adv_by_std_in_grpo"}


def test_every_environment_variable_has_its_row():
    page = set(rows("Environment variables"))
    code = environment_variables()
    assert {"VERL_PLATFORM", "REWARD_SERVER_TOKEN", "VERL_BOT_WEIGHT_SYNC_TIMEOUT_S", "VERL_BOT_LOG_LEVEL"} <= code
    missing = [name for name in sorted(code) if not any(fnmatch.fnmatchcase(name, row) for row in page)]
    assert not missing, "environment variables without a row in docs/knobs.md"
    source = "\n".join(p.read_text() for p in (ROOT / "verl_bot").rglob("*.py"))
    unread = [row for row in sorted(page) if row.rstrip("*") not in source]
    assert not unread, "rows for variables verl_bot/ never names"


def algorithms_rows() -> dict[str, str]:
    """docs/ALGORITHMS.md's knob rows: each knob its first cell names -> the row's source cell (the last)."""
    found = {}
    for line in (ROOT / "docs/ALGORITHMS.md").read_text().splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = re.split(r"(?<!\\)\|", line)[1:-1]
            for name in re.findall(r"`([^`]+)`", cells[0]):
                found[name.removeprefix("+algorithm.")] = cells[-1]
    return found


def test_each_method_in_the_algorithms_page_has_its_knobs_beside_it():
    """docs/ALGORITHMS.md: the knob tables of each method's section name exactly its knobs (with their sources)."""
    named = algorithms_rows()
    code = algorithm_knobs()
    for prefix in ("bot_", "pure_", "pass_", "reco_", "vps_", "grail_"):
        assert {n for n in named if n.startswith(prefix)} == {n for n in code if n.startswith(prefix)}, prefix


def test_each_knobs_source_is_the_one_its_declaration_gives():
    """The declared `source` of a knob is among the tags of its row in docs/ALGORITHMS.md ([paper], [code], [ours])."""
    named = algorithms_rows()
    wrong = [f"{key}: declared {k.source}, page {named.get(key)!r}" for key, k in declared_knobs().items()
             if f"[{k.source}" not in named.get(key, "")]
    assert not wrong, "\n".join(wrong)
    assert len(named) >= 35 and "[code" in named["grail_std"] and "[paper]" in named["bot_length_weighting"]


def reader_knobs() -> dict[str, Knob]:
    """The knobs of the manager (`w_local`), the PRM (`prm.scale`) and the panels (`token_panel_every`), by the name
    the page's rows give them (`hydra_rows`) -> their declarations."""
    return {prefix + k.key: k for settings, prefix in READERS for k in settings.knobs()}


def row_lines() -> dict[str, str]:
    """The Hydra table's rows (whole lines) by the knob their first cell names first, named as `hydra_rows` does."""
    found = {}
    for line in _section("Hydra keys"):
        first = re.findall(r"`([^`]+)`", line.split("|")[1]) if line.startswith("| `") else []
        for key in first[:1]:
            name = manager_knob(key.removeprefix("+" + MANAGER)) if key.startswith("+" + MANAGER) else key
            found.setdefault(name.removeprefix("+algorithm."), line)
    return found


def test_the_manager_prm_and_panel_knobs_say_what_they_do_and_where_their_defaults_come_from():
    """Each knob of the manager, the PRM and the panels has its `doc`; its declared source is the tag of its row in
    docs/ALGORITHMS.md (the manager's weights and layout are there) or, for a default that is not ours, of its row
    here."""
    named, lines, knobs = algorithms_rows(), row_lines(), reader_knobs()
    assert {"w_global", "w_local", "local_clip", "token_level"} <= set(named) & set(knobs)
    assert not [name for name, k in knobs.items() if not k.doc], "knobs without a doc"
    tagged = {name: named[name] if name in named else lines.get(name, "") for name, k in knobs.items()
              if name in named or k.source != "ours"}
    wrong = [f"{name}: declared {knobs[name].source}, page {cell!r}" for name, cell in tagged.items()
             if f"[{knobs[name].source}" not in cell]
    assert not wrong, "\n".join(wrong)
    assert {"prm.step_tag", "prm.positive_index", "prm.system"} <= set(tagged)  # Qwen2.5-Math-PRM's: [code]


def test_no_method_reads_a_knob_past_its_declaration():
    """Every `+algorithm.<method>_*` knob is read through its method's settings, none with a bare `.get`."""
    assert read_knobs() == {}


def test_the_reading_sees_what_it_is_for():
    """The declarations' defaults, a computed default, the `.get` reading and the cell comparison."""
    code = algorithm_knobs()
    assert code["bot_epsilon"] == 1e-6 and code["bot_broadcast_scalar"] is False
    assert code["pure_temperature"] == 0.1 and code["pure_step_scale"] == 1.0
    assert code["vps_std_floor"] == 0.05 and code["grail_answer"] == "auto" and code["pass_min_chunk"] == 1
    assert code["reco_rvar_cap"] is UNSET  # the actor's clip_ratio_c
    planted = ast.parse('KEY = "pass_op"\nx = c.get(KEY, "grpo")\ny = c.get("bot_epsilon")\nz = c.get("other")\n')
    assert read_knobs([planted]) == {"pass_op": "grpo", "bot_epsilon": UNSET}
    assert _same(1e-6, "`1e-6`") and _same(True, "`true`") and not _same(0.5, "`5.0`") and _same("auto", "`auto`")
    assert not _same(False, "`0`") and _same(8, "`8` (`cpu_train.sh`: 4)")
