"""verl's configuration surface, read from the installed verl: its entry modules, their composed configs as dotted
keys, and the values of the settings that pick a code path (estimator, policy loss, rollout engine, ...).

Nothing here is verl-bot's opinion: `verl_bot.launch.verl_surface` classifies what this module finds.

- entry modules: the modules of verl's package with a `main` decorated with `hydra.main` or a call of `run_ppo`
  (read with `ast`: nothing is imported);
- configs: each entry's default config, composed by Hydra (`compose`) with each option of verl's `model_engine`
  config group (dp, megatron, ...: the engine picks the actor's, reference's and critic's subtrees), flattened to
  dotted leaf keys (`flatten`);
- choices: the names verl registers for the settings that pick a code path (`CHOICES`), read from the calls that
  register them in verl's source.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

ENGINE_GROUP = "model_engine"  # verl's config group that picks the training engine's subtrees
TRAINER_CONFIG = "trainer/config"  # verl's own config folder (a search path of every entry's config)


@dataclass(frozen=True)
class Registration:
    """Where verl registers the names of one setting: the files (a glob under verl's package), the registering
    call (its last name), and the keyword holding the name (None: the first positional argument)."""

    files: str
    call: str
    keyword: str | None = None


# the settings whose value picks a code path -> how verl registers the values it takes
CHOICES: dict[str, Registration] = {
    "algorithm.adv_estimator": Registration("trainer/ppo/core_algos.py", "register_adv_est"),
    "actor_rollout_ref.actor.policy_loss.loss_mode": Registration("trainer/ppo/core_algos.py", "register_policy_loss"),
    "actor_rollout_ref.rollout.name": Registration("workers/rollout/replica.py", "register"),
    "actor_rollout_ref.actor.strategy": Registration("workers/engine/**/*.py", "register", "backend"),
    "trainer.v1.trainer_mode": Registration("trainer/ppo/v1/*.py", "register_trainer"),
}


@dataclass(frozen=True)
class Entry:
    """A verl module that starts a run: its dotted name and the folder and name of its Hydra config."""

    module: str
    config_dir: Path | None
    config_name: str | None


def verl_root() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("verl")
    return Path(spec.submodule_search_locations[0])


def _call_name(node: ast.AST) -> str | None:
    func = node.func if isinstance(node, ast.Call) else None
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _keyword(call: ast.Call, name: str) -> Any:
    return next((ast.literal_eval(k.value) for k in call.keywords if k.arg == name), None)


def _hydra_main(tree: ast.Module) -> ast.Call | None:
    decorators = (d for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) for d in n.decorator_list)
    return next((d for d in decorators if isinstance(d, ast.Call) and ast.unparse(d.func) == "hydra.main"), None)


def _entry(path: Path, root: Path) -> Entry | None:
    text = path.read_text(encoding="utf-8")
    if "hydra.main" not in text and "run_ppo(" not in text:
        return None
    tree = ast.parse(text)
    main = _hydra_main(tree)
    runs = any(_call_name(n) == "run_ppo" for n in ast.walk(tree) if isinstance(n, ast.Call))
    if main is None and not runs:
        return None
    module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
    if main is None:
        return Entry(module, None, None)
    return Entry(module, path.parent / _keyword(main, "config_path"), _keyword(main, "config_name"))


@cache
def entries() -> tuple[Entry, ...]:
    """verl's entry modules (a `hydra.main` or a `run_ppo` call), sorted by name."""
    root = verl_root()
    found = (_entry(path, root) for path in sorted(root.rglob("*.py")))
    return tuple(sorted((e for e in found if e is not None), key=lambda e: e.module))


def engine_options() -> tuple[str, ...]:
    """The options of verl's `model_engine` config group (dp, megatron, torchtitan, veomni)."""
    return tuple(sorted(p.stem for p in (verl_root() / TRAINER_CONFIG / ENGINE_GROUP).glob("*.yaml")))


def compose(config_dir: Path, config_name: str, overrides: tuple[str, ...] = ()) -> Any:
    """verl's config `config_name` of `config_dir` composed by Hydra with `overrides` (verl's own config folder on
    the search path, as its experimental trainers' configs expect)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    search = f"hydra.searchpath=[file://{verl_root() / TRAINER_CONFIG}]"
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return hydra_compose(config_name=config_name, overrides=[search, *overrides])


def flatten(node: Any, prefix: str = "") -> Iterator[str]:
    """The dotted leaf keys of a plain (to_container) config: a value, a list or an empty mapping is a leaf."""
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from flatten(value, f"{prefix}.{key}" if prefix else str(key))
    elif prefix:
        yield prefix


@cache
def config_keys(config_dir: Path, config_name: str) -> frozenset[str]:
    """The dotted leaf keys of the config, over every option of the `model_engine` group."""
    from omegaconf import OmegaConf

    keys: set[str] = set()
    for engine in engine_options():
        config = compose(config_dir, config_name, (f"{ENGINE_GROUP}={engine}",))
        keys.update(flatten(OmegaConf.to_container(config, resolve=False)))
    return frozenset(keys)


def _class_constants(tree: ast.Module) -> dict[str, str]:
    """`Class.NAME` -> its string value, for the class-level string constants of a module (verl's enums)."""
    return {
        f"{c.name}.{t.id}": a.value.value
        for c in tree.body if isinstance(c, ast.ClassDef)
        for a in c.body if isinstance(a, ast.Assign) and isinstance(a.value, ast.Constant)
        for t in a.targets if isinstance(t, ast.Name) and isinstance(a.value.value, str)
    }


def _registered(call: ast.Call, keyword: str | None, constants: dict[str, str]) -> list[str]:
    node = next((k.value for k in call.keywords if k.arg == keyword), None) if keyword else (
        call.args[0] if call.args else None)
    values = node.elts if isinstance(node, ast.List | ast.Tuple) else [node] if node is not None else []
    names = [constants.get(ast.unparse(v)) if isinstance(v, ast.Attribute) else v.value for v in values
             if isinstance(v, ast.Attribute | ast.Constant)]
    return [n for n in names if isinstance(n, str)]


@cache
def choices(key: str) -> tuple[str, ...]:
    """The values verl registers for the setting `key` of `CHOICES`, read from its source (sorted)."""
    how = CHOICES[key]
    found: set[str] = set()
    for path in sorted(verl_root().glob(how.files)):
        text = path.read_text(encoding="utf-8")
        if how.call not in text:
            continue
        tree = ast.parse(text)
        constants = _class_constants(tree)
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call) and _call_name(n) == how.call):
            found.update(_registered(call, how.keyword, constants))
    return tuple(sorted(found))
