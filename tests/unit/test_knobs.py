"""The one way a knob is declared (`verl_bot.knobs`): the methods', the `bot` manager's, its PRM's and the token
panels'; and the start-up checks that ask every method in use (`verl_bot.launch.preflight`) without naming any.
Expected messages are written out by hand."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from tests.conftest import compose_verl_config
from verl_bot.advantage import ESTIMATORS, EstimatorSpec
from verl_bot.errors import VerlBotConfigError
from verl_bot.knobs import Knob, MethodSettings, config_node, interval_words, knob
from verl_bot.launch import preflight
from verl_bot.launch.preflight import check_config
from verl_bot.losses import LOSSES
from verl_bot.observe.panels import PanelSettings
from verl_bot.rewards.prm import QWEN_PRM_SYSTEM, ROUTER_NEEDS_RM, prm_settings
from verl_bot.rewards.settings import manager_settings


@dataclass(frozen=True)
class ToySettings(MethodSettings, prefix="toy_", label="Toy"):
    rate: float = knob(0.5, bounds="(0, 1]", source="paper", doc="a share")
    steps: int = knob(3, bounds="[1, inf)", source="ours", doc="a count")
    mode: str = knob("a", choices=("a", "b"), other=("a text with one {x}", lambda t: t.count("{x}") == 1),
                     source="ours", doc="a choice or a template")
    on: bool = knob(False, source="code", doc="a switch")
    cap: float | None = knob(None, bounds="(0, inf)", source="ours", doc="computed where it is read")


def test_the_declaration_is_the_fields():
    assert ToySettings.knobs() == (
        Knob("toy_rate", float, 0.5, bounds="(0, 1]", source="paper", doc="a share"),
        Knob("toy_steps", int, 3, bounds="[1, inf)", source="ours", doc="a count"),
        Knob("toy_mode", str, "a", choices=("a", "b"), other=ToySettings.knobs()[2].other, source="ours",
             doc="a choice or a template"),
        Knob("toy_on", bool, False, source="code", doc="a switch"),
        Knob("toy_cap", float, None, bounds="(0, inf)", source="ours", doc="computed where it is read"),
    )
    assert [k.allowed() for k in ToySettings.knobs()] == [
        "a finite number in (0, 1]", "an integer >= 1", "a, b or a text with one {x}", "true or false",
        "a finite number > 0",
    ]
    assert [interval_words(b) for b in ("[0, inf)", "(0, inf)", "(-inf, 0)", "(-inf, 1]", "[1, 2)", "(-inf, inf)")] \
        == [" >= 0", " > 0", " < 0", " <= 1", " in [1, 2)", ""]


def test_the_reader_takes_defaults_texts_of_numbers_and_computed_defaults():
    assert ToySettings.from_config(None) == ToySettings(0.5, 3, "a", False, None)
    got = ToySettings.from_config(OmegaConf.create({"toy_steps": "4", "toy_rate": "0.25", "toy_mode": "<{x}>",
                                                    "toy_on": True, "other_knob": "not ours"}))
    assert got == ToySettings(0.25, 4, "<{x}>", True, None) and isinstance(got.steps, int)
    assert ToySettings.from_config({}, cap=2.0).cap == 2.0  # the computed default where the key is unset
    assert ToySettings.from_config({"toy_cap": 1}, cap=2.0).cap == 1.0  # the key wins
    assert ToySettings.from_config({"toy_steps": 7.0}).as_dict()["steps"] == 7


@pytest.mark.parametrize(
    "given, message",
    [
        ({"toy_steps": 2.5}, "+algorithm.toy_steps=2.5: must be an integer >= 1"),  # a bad type
        ({"toy_on": "yes"}, "+algorithm.toy_on='yes': must be true or false"),
        ({"toy_rate": True}, "+algorithm.toy_rate=True: must be a finite number in (0, 1]"),
        ({"toy_rate": "half"}, "+algorithm.toy_rate='half': must be a finite number in (0, 1]"),
        ({"toy_mode": 1}, "+algorithm.toy_mode=1: must be a, b or a text with one {x}"),
        ({"toy_rate": 0}, "+algorithm.toy_rate=0: must be a finite number in (0, 1]"),  # out of bounds
        ({"toy_rate": float("nan")}, "+algorithm.toy_rate=nan: must be a finite number in (0, 1]"),
        ({"toy_steps": 0}, "+algorithm.toy_steps=0: must be an integer >= 1"),
        ({"toy_mode": "{x}{x}"}, "+algorithm.toy_mode='{x}{x}': must be a, b or a text with one {x}"),
        ({"toy_cap": -1.0}, "+algorithm.toy_cap=-1.0: must be a finite number > 0"),
        ({"toy_rte": 0.1, "toy_x": 1},  # unknown keys
         "unknown +algorithm.toy_rte, +algorithm.toy_x: the Toy knobs are toy_rate, toy_steps, toy_mode, toy_on, "
         "toy_cap"),
    ],
)
def test_a_bad_value_or_key_is_refused_in_one_line(given, message):
    with pytest.raises(VerlBotConfigError) as err:
        ToySettings.from_config(given)
    assert str(err.value) == message


def test_a_settings_object_in_hand_is_valid():
    with pytest.raises(VerlBotConfigError, match=r"^\+algorithm\.toy_steps=0: must be an integer >= 1$"):
        ToySettings(steps=0)
    with pytest.raises(VerlBotConfigError, match=r"^\+algorithm\.toy_cap=0: must be a finite number > 0$"):
        ToySettings.from_config({}, cap=0)  # a computed default is checked too


@dataclass(frozen=True)
class NodeSettings(MethodSettings, node="toy.node", label="Node", nested=("table", "sub")):
    level: bool | str = knob("auto", choices=("auto",), source="ours", doc="a switch, or auto")
    names: tuple[str, ...] | str | None = knob(None, other=("a comma-separated text", lambda t: "," in t),
                                               source="ours", doc="a list, or one text")
    table: dict = field(default_factory=dict)  # a nested mapping: taken as it is


def test_a_node_of_its_own_union_kinds_a_list_and_nested_keys():
    assert NodeSettings.knobs()[0] == Knob("level", (bool, str), "auto", choices=("auto",), source="ours",
                                           doc="a switch, or auto", node="toy.node")
    assert [k.allowed() for k in NodeSettings.knobs()] == ["true, false or auto",
                                                          "a list of texts or a comma-separated text"]
    config = OmegaConf.create({"toy": {"node": {"level": False, "names": ["a", "b"], "table": {"x": "y"},
                                                "sub": {"k": 1}}}})
    got = NodeSettings.from_config(config_node(config, "toy.node"))
    assert (got.level, got.names, dict(got.table)) == (False, ("a", "b"), {"x": "y"})  # `sub`: known, not a field
    assert NodeSettings.from_config({"level": "auto", "names": "a,b"}) == NodeSettings("auto", "a,b")
    assert config_node(config, "toy.none") == {} and config_node({"toy": None}, "toy.node") == {}
    assert NodeSettings.from_config(config_node({}, NodeSettings.node)) == NodeSettings()


@pytest.mark.parametrize(
    "given, message",
    [
        ({"level": "sometimes"}, "+toy.node.level='sometimes': must be true, false or auto"),
        ({"level": 1}, "+toy.node.level=1: must be true, false or auto"),  # a number is no boolean
        ({"names": [1, 2]}, "+toy.node.names=[1, 2]: must be a list of texts or a comma-separated text"),
        ({"names": "ab"}, "+toy.node.names='ab': must be a list of texts or a comma-separated text"),
        ({"lvl": 1, "Table": {}}, "unknown +toy.node.Table, +toy.node.lvl: the Node knobs are level, names, table, "
                                  "sub"),
    ],
)
def test_a_node_of_its_own_is_named_in_its_refusals(given, message):
    with pytest.raises(VerlBotConfigError) as err:
        NodeSettings.from_config(given)
    assert str(err.value) == message


# ------------------------------------------------------------------- the manager's, the PRM's, the panels'
BOT = "+reward.reward_kwargs.bot."


def bot(**knobs):
    return {"reward": {"reward_kwargs": {"bot": knobs}}}


def test_the_managers_knobs_their_layout_and_scorers():
    settings = manager_settings({"algorithm": {"adv_estimator": "grpo"}, **bot(w_local=0.5, scorers={"x": "y"})})
    assert (settings.w_global, settings.w_local, settings.timeout_s, settings.retries) == (1.0, 0.5, 120.0, 2)
    assert (settings.token_level, settings.layout, settings.per_token, settings.scorers) == ("auto", "scalar", False,
                                                                                           {"x": "y"})
    assert manager_settings({"algorithm": {"adv_estimator": "bot"}}).layout == "dense"
    for token_level, layout in ((True, "dense"), ("returns", "returns"), (False, "scalar")):
        assert manager_settings({"algorithm": {"adv_estimator": "grpo"}, **bot(token_level=token_level)}).layout \
            == layout


@pytest.mark.parametrize(
    "given, message",
    [
        ({"w_lcoal": 1}, f"unknown {BOT}w_lcoal: the bot manager knobs are w_global, w_local, local_clip, timeout_s, "
                         "retries, failure_score, token_level, fn_workers, max_failure_rate, failure_patience, "
                         "scorers, prm"),
        ({"token_level": "true"}, f"{BOT}token_level='true': must be true, false, auto or returns"),
        ({"w_global": "x"}, f"{BOT}w_global='x': must be a finite number"),
        ({"local_clip": -1}, f"{BOT}local_clip=-1: must be a finite number >= 0"),
        ({"timeout_s": 0}, f"{BOT}timeout_s=0: must be a finite number > 0"),
        ({"retries": -1}, f"{BOT}retries=-1: must be an integer >= 0"),
        ({"fn_workers": 1.5}, f"{BOT}fn_workers=1.5: must be an integer >= 0"),
        ({"max_failure_rate": 1.5}, f"{BOT}max_failure_rate=1.5: must be a finite number in [0, 1]"),
        ({"failure_patience": 0}, f"{BOT}failure_patience=0: must be an integer >= 1"),
    ],
)
def test_the_managers_refusals(given, message):
    with pytest.raises(VerlBotConfigError) as err:
        manager_settings(bot(**given))
    assert str(err.value) == message


def test_the_prms_knobs_their_computed_and_resolved_defaults():
    assert prm_settings(bot(w_local=0.5)) is None  # no PRM
    prm = {"url": "router", "data_sources": " a, b,", "system": None}
    config = {"reward": {"reward_model": {"model_path": "/prm", "enable": True}, **bot(prm=prm)["reward"]}}
    settings = prm_settings(config)
    assert (settings.url, settings.model, settings.tokenizer, settings.data_sources) == ("router", "/prm", "/prm",
                                                                                       ("a", "b"))
    assert (settings.system, settings.step_separator, settings.positive_index, settings.max_length) == ("", "\n\n",
                                                                                                       1, None)
    given = prm_settings(bot(prm={"url": "http://h:1", "tokenizer": "/tok", "data_sources": ["aime"]}))
    assert (given.model, given.tokenizer, given.data_sources, given.system) == (None, "/tok", ("aime",),
                                                                               QWEN_PRM_SYSTEM)


PRM = "+reward.reward_kwargs.bot.prm."
URL = {"url": "http://h:1", "model": "m"}


@pytest.mark.parametrize(
    "given, message",
    [
        ({"model": "m"}, f"{PRM}url=None: must be router or an http(s):// URL of a vLLM pooling server"),
        ({**URL, "url": "h:1"}, f"{PRM}url='h:1': must be router or an http(s):// URL of a vLLM pooling server"),
        ({**URL, "url": "router"}, ROUTER_NEEDS_RM),  # verl serves no reward model here
        ({"url": "http://h:1"}, "prm needs +reward.reward_kwargs.bot.prm.model (the served PRM) or prm.tokenizer"),
        ({**URL, "step_separator": ""}, f"{PRM}step_separator='': must be a non-empty text"),
        ({**URL, "positive_index": 2}, f"{PRM}positive_index=2: must be an integer in [0, 1]"),
        ({**URL, "transform": "sigmoid"}, f"{PRM}transform='sigmoid': must be one of centred, raw, log"),
        ({**URL, "scale": "big"}, f"{PRM}scale='big': must be a finite number"),
        ({**URL, "data_sources": [1]}, f"{PRM}data_sources=[1]: must be a list of texts or a text of comma-separated "
                                       "ones"),
        ({**URL, "max_length": 0}, f"{PRM}max_length=0: must be an integer >= 1"),
        ({**URL, "stepp_tag": "x"}, f"unknown {PRM}stepp_tag: the PRM knobs are url, model, tokenizer, step_separator, "
                                    "step_tag, positive_index, transform, scale, system, combine, data_sources, "
                                    "max_length"),
    ],
)
def test_the_prms_refusals(given, message):
    with pytest.raises(VerlBotConfigError) as err:
        prm_settings(bot(prm=given))
    assert str(err.value) == message


@pytest.mark.parametrize(
    "given, message",
    [
        ({"token_panel_every": -1}, "+algorithm.token_panel_every=-1: must be an integer >= 0"),
        ({"token_panel_rollouts": 0}, "+algorithm.token_panel_rollouts=0: must be an integer >= 1"),
        ({"token_panel_tokens": 2.5}, "+algorithm.token_panel_tokens=2.5: must be an integer >= 0"),
        ({"token_panel_every": True}, "+algorithm.token_panel_every=True: must be an integer >= 0"),
        ({"token_panel_evry": 1}, "unknown +algorithm.token_panel_evry: the token panel knobs are token_panel_every, "
                                  "token_panel_rollouts, token_panel_tokens"),
    ],
)
def test_the_panels_refusals(given, message):
    assert PanelSettings.from_config({"token_panel_every": "5", "bot_epsilon": 1}).every == 5  # another prefix: not its
    with pytest.raises(VerlBotConfigError) as err:
        PanelSettings.from_config(given)
    assert str(err.value) == message


def test_a_bad_declaration_fails_at_import():
    with pytest.raises(TypeError, match="kind"):
        Knob("x_list", list, [])
    with pytest.raises(ValueError, match="source 'mine'"):
        Knob("x_rate", float, 0.5, source="mine")
    with pytest.raises(ValueError, match="not an interval"):
        Knob("x_rate", float, 0.5, bounds="0..1")


def test_every_method_declares_its_knobs_with_its_prefix_and_a_valid_default():
    specs = {**ESTIMATORS, **LOSSES}
    for name, spec in specs.items():
        assert spec.settings.prefix == f"{name}_", name
        defaults = spec.settings()  # the declared defaults pass their own bounds
        assert all(k.doc and k.key.startswith(spec.settings.prefix) for k in spec.settings.knobs()), name
        assert defaults == spec.settings.from_config({}), name
    assert LOSSES["reco"].settings is ESTIMATORS["reco"].settings  # ReCo's two halves: one declaration


# ------------------------------------------------------------------------------- preflight names no method
def code_strings(source: str) -> list[str]:
    """The string literals of `source` (f-string parts included) but its docstrings."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def method_mentions(strings: list[str]) -> list[str]:
    """The literals that name a verl-bot method: its name alone, `adv_estimator=<name>`, `loss_mode=<name>`, or one
    of its knobs."""
    names = sorted({*ESTIMATORS, *LOSSES})
    knobs = {k.key for spec in (*ESTIMATORS.values(), *LOSSES.values()) for k in spec.settings.knobs()}
    selector = re.compile(rf"(adv_estimator|loss_mode)=({'|'.join(names)})\b")
    return [s for s in strings if s in names or selector.search(s) or any(key in s for key in knobs)]


def test_preflight_names_no_method():
    assert method_mentions(code_strings(Path(preflight.__file__).read_text())) == []
    planted = 'def f(c):\n    """adv_estimator=grail"""\n    if c == "grail": return f"x {c} bot_std_floor"\n'
    assert method_mentions(code_strings(planted)) == ["grail", " bot_std_floor"]


@dataclass(frozen=True)
class FakeSettings(MethodSettings, prefix="fake_", label="Fake"):
    level: int = knob(1, bounds="[0, 3]", source="ours", doc="how fake")


def test_preflight_asks_a_registered_method_for_its_knobs_and_its_check(monkeypatch, tmp_path):
    asked = []

    def fake_check(config, train_files):
        asked.append((int(config.algorithm.fake_level), train_files))
        return "adv_estimator=fake: refused by its own check" if config.algorithm.fake_level == 2 else None

    monkeypatch.setitem(ESTIMATORS, "fake", EstimatorSpec(lambda *a, **k: None, token_level=False,
                                                          settings=FakeSettings, check=fake_check))
    data = tmp_path / "train.parquet"
    pd.DataFrame([{"data_source": "x", "prompt": []}]).to_parquet(data)
    base = ["algorithm.adv_estimator=fake", f"data.train_files={data}", "data.val_files=/nowhere/val.parquet"]
    check_config(compose_verl_config([*base, "+algorithm.fake_level=1"]))
    assert asked == [(1, [str(data)])]
    with pytest.raises(VerlBotConfigError) as err:
        check_config(compose_verl_config([*base, "+algorithm.fake_level=2"]))
    assert str(err.value) == "adv_estimator=fake: refused by its own check"
    with pytest.raises(VerlBotConfigError) as err:
        check_config(compose_verl_config([*base, "+algorithm.fake_level=5"]))
    assert str(err.value) == "+algorithm.fake_level=5: must be an integer in [0, 3]"
    with pytest.raises(VerlBotConfigError) as err:
        check_config(compose_verl_config([*base, "+algorithm.fake_lvl=1"]))
    assert str(err.value) == "unknown +algorithm.fake_lvl: the Fake knobs are fake_level"
    assert len(asked) == 2  # a bad knob stops the run before the method's check is asked
