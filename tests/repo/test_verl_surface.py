"""verl's configuration surface is classified (verl_bot/launch/verl_surface.py), read from the installed verl.

- every entry module, every dotted key of its composed config (with each `model_engine` option) and every value verl
  registers for a code-path choice is classified by the table, and every row of the table classifies something;
- every test a `tested` cell names exists;
- every `refused` cell is refused by `verl_bot.launch.preflight.check_config` on verl's composed config (the entry
  module's, else `verl.trainer.main_ppo`'s) with the overrides of each method it applies to and the cell's own, and
  the same config without the cell's passes;
- docs/verl_settings.md is what `python -m verl_bot.launch.verl_surface --write` writes.
"""

from __future__ import annotations

import copy
import json
import re
from functools import cache
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from verl_bot.errors import VerlBotConfigError
from verl_bot.launch import verl_schema
from verl_bot.launch.preflight import check_config
from verl_bot.launch.verl_surface import (
    BOT_MANAGER,
    CHOICE_ROWS,
    ENTRIES,
    GROUP_OF,
    GROUPS,
    KEY_ROWS,
    METHODS,
    PAGE,
    REFUSED,
    TESTED,
    VERL_GROUP,
    Answer,
    document,
)

ROOT = Path(__file__).resolve().parents[2]
MAIN = "verl.trainer.main_ppo"
ESTIMATOR = "algorithm.adv_estimator"


def _entries() -> dict[str, verl_schema.Entry]:
    return {e.module: e for e in verl_schema.entries()}


def _keys(module: str) -> frozenset[str]:
    entry = _entries()[module]
    return verl_schema.config_keys(entry.config_dir, entry.config_name)


def _classified(key: str) -> bool:
    return any(r.matches(key) for r in KEY_ROWS if not r.when)


def test_every_entry_module_of_verl_is_classified():
    assert sorted(_entries()) == sorted(r.module for r in ENTRIES)
    assert MAIN in _entries() and all(e.config_name for e in _entries().values())


def test_every_key_of_verls_configs_is_classified_and_every_row_classifies_one():
    main_keys = _keys(MAIN)
    checked = set(main_keys)
    for row in ENTRIES:
        if row.covers in ("keys", "own"):
            keys = _keys(row.module)
            checked |= keys if row.covers == "keys" else main_keys & keys
    unclassified = sorted(k for k in checked if not _classified(k))
    assert not unclassified, f"{len(unclassified)} keys of verl's configs the table does not classify: {unclassified}"
    dead = [r.patterns for r in KEY_ROWS if not any(r.matches(k) for k in checked)]
    assert not dead, f"rows that match no key of the installed verl: {dead}"
    assert len(checked) > 1000  # every model_engine option composed


def test_entry_marks_are_top_level_keys_only_their_config_has():
    top = {k.split(".")[0] for k in _keys(MAIN)}
    for row in (r for r in ENTRIES if r.marks):
        own = {k.split(".")[0] for k in _keys(row.module)}
        assert set(row.marks) <= own - top, (row.module, row.marks)


def test_every_choice_of_verl_is_classified_and_every_choice_row_names_one():
    settings = [f"{key}={value}" for key in verl_schema.CHOICES for value in verl_schema.choices(key)]
    assert {"algorithm.adv_estimator=gae", "actor_rollout_ref.rollout.name=sglang",
            "actor_rollout_ref.actor.strategy=megatron", "trainer.v1.trainer_mode=separate_async"} <= set(settings)
    assert not [s for s in settings if s.startswith(ESTIMATOR) and s.split("=")[1] in METHODS]  # verl's own only
    unclassified = [s for s in settings if not any(r.matches(s) for r in CHOICE_ROWS)]
    assert not unclassified, f"choices of the installed verl the table does not classify: {unclassified}"
    dead = [r.patterns for r in CHOICE_ROWS if not any(r.matches(s) for s in settings)]
    assert not dead, f"choice rows that name no choice of the installed verl: {dead}"


def _cells() -> list[tuple[str, str, Answer]]:
    """(row label, column or method, answer) of every cell of the table."""
    rows = [(e.module, e.cells) for e in ENTRIES] + [(", ".join(r.patterns) + r.when, r.cells)
                                                     for r in (*CHOICE_ROWS, *KEY_ROWS)]
    return [(label, name, a) for label, cells in rows for name, a in cells.items()]


def test_every_named_test_exists():
    named = {t for _, _, a in _cells() if a.status == TESTED for t in a.tests}
    assert named and all(a.tests for _, _, a in _cells() if a.status == TESTED)
    missing = []
    for node in sorted(named):
        path, _, name = node.partition("::")
        file = ROOT / path
        if not file.is_file() or not re.search(rf"^(async )?def {re.escape(name)}\(", file.read_text(), re.M):
            missing.append(node)
    assert not missing, f"tests the table names that do not exist: {missing}"


def _methods(column: str) -> list[str]:
    """The methods a cell applies to: a method, every method of a group, or every one (`all`)."""
    verl = list(verl_schema.choices(ESTIMATOR))
    everyone = [*METHODS, *verl]
    if column in GROUPS:
        return [m for m in everyone if GROUP_OF.get(m, VERL_GROUP) == column]
    return everyone if column == "all" else [column]


REFUSALS = [(label, column, method, a) for label, column, a in _cells() if a.status == REFUSED
            for method in _methods(column)]


@pytest.fixture(scope="module")
def vlm_model(tmp_path_factory) -> Path:
    """A local model folder whose HF config is a vision-language model's (no weights: the checks read config.json)."""
    folder = tmp_path_factory.mktemp("vlm")
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2_vl", "vision_config": {"depth": 1}}))
    return folder


@cache
def _composed(module: str):
    entry = _entries()[module]
    return verl_schema.compose(entry.config_dir, entry.config_name, (
        "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.model.path=/nonexistent"))


def _config(module: str, method: str, extra: tuple[str, ...]):
    """The entry module's composed config (once) with the method's and `extra`'s `key=value` overrides set on it as
    Hydra sets a plain key."""
    config = copy.deepcopy(_composed(module))
    for override in (*METHODS.get(method, (f"{ESTIMATOR}={method}", BOT_MANAGER)), *extra):
        key, _, value = override.partition("=")
        OmegaConf.update(config, key, yaml.safe_load(value), merge=False)
    return config


@pytest.mark.parametrize(("label", "column", "method", "cell"), REFUSALS,
                         ids=[f"{label}-{method}" for label, _, method, _ in REFUSALS])
def test_every_refusal_is_preflights_on_verls_config(label, column, method, cell, vlm_model):
    module = label if label in _entries() else MAIN
    if module == MAIN:
        check_config(_config(MAIN, method, ()))  # the method alone runs
    extra = tuple(e.format(vlm_model=vlm_model) for e in cell.example)
    with pytest.raises(VerlBotConfigError) as refusal:
        check_config(_config(module, method, extra))
    assert cell.text in str(refusal.value) and "\n" not in str(refusal.value)


def test_every_column_of_a_cell_is_all_a_group_or_a_method():
    methods = {*METHODS, *verl_schema.choices(ESTIMATOR)}
    assert not [(label, column) for label, column, _ in _cells() if column not in {"all", *GROUPS, *methods}]
    assert sorted(_methods(VERL_GROUP)) == sorted(verl_schema.choices(ESTIMATOR))


def test_the_page_is_what_the_module_writes():
    assert PAGE.read_text(encoding="utf-8") == document(), (
        "docs/verl_settings.md is stale: python -m verl_bot.launch.verl_surface --write")
