"""How a knob is declared: one frozen dataclass per owner, one `knob(...)` per field, one reader.

    @dataclass(frozen=True)
    class PureSettings(MethodSettings, prefix="pure_", label="PURE"):
        temperature: float = knob(0.1, bounds="(0, inf)", source="code", doc="T of the min-form softmax")

`PureSettings.from_config(algorithm)` reads `+algorithm.pure_*` and refuses a bad value or an undeclared key of the
prefix in one line. The `bot` manager (`node="reward.reward_kwargs.bot"`, `nested` mappings), its PRM and the token
panels declare theirs the same way (`config_node`). A field's annotation is its kind (`bool`, `int`, `float`, `str`,
`tuple[str, ...]`, a union; `X | None` when the default is computed where it is read or by `__post_init__`, which
also checks what several knobs decide together); `bounds`, `choices`/`other`, `source` (`paper`, `code`, `ours`, as
docs/ALGORITHMS.md tags it). A method's row in `ESTIMATORS` / `LOSSES` carries its class and its start-up check
(`StartupCheck`). Every knob, checked against these declarations: docs/knobs.md.
"""

from __future__ import annotations

import math
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, ClassVar, TypeVar

from verl_bot.errors import VerlBotConfigError

SOURCES = ("paper", "code", "ours")
KINDS = (bool, int, float, str, tuple)
T = TypeVar("T", bound="MethodSettings")
# A method's start-up check: (verl's composed config, the run's local parquet train files) -> why the method cannot
# run (one line, which `verl_bot.launch.preflight` raises), or None.
StartupCheck = Callable[[Any, list[str]], str | None]


def enum_name(value: Any) -> str:
    """A config value verl may give as its `Enum` (`algorithm.adv_estimator`: `AdvantageEstimator.GRPO`) as its
    name ("grpo"); a string as it is."""
    return str(getattr(value, "value", value))
_INTERVAL = re.compile(r"^([\[(])\s*(-inf|[-+0-9.e]+)\s*,\s*(inf|[-+0-9.e]+)\s*([\])])$")


def config_node(config: Any, path: str) -> Mapping[str, Any]:
    """The mapping at the dotted `path` of `config` (a DictConfig or a dict); {} where a part is missing or None."""
    node = config
    for part in path.split("."):
        node = (node.get(part) if node else None) or {}
    return node


@dataclass(frozen=True)
class Knob:
    """One knob: `+<node>.<key>`, of kind `kind` (a tuple of kinds for a union), `default` unless set (None:
    computed where the knob is read, or resolved by its class), the values it takes (`bounds` for numbers,
    `choices` and `other` for texts), where the default comes from (`source`) and what it does (`doc`)."""

    key: str
    kind: type | tuple[type, ...]
    default: Any
    bounds: str | None = None
    choices: tuple[str, ...] = ()
    other: tuple[str, Callable[[str], bool]] | None = None
    source: str = "ours"
    doc: str = ""
    node: str = "algorithm"

    def __post_init__(self) -> None:
        if not all(kind in KINDS for kind in self.kinds):
            raise TypeError(f"knob {self.key}: kind {self.kind!r} is not one of {KINDS}")
        if self.source not in SOURCES:
            raise ValueError(f"knob {self.key}: source {self.source!r} is not one of {SOURCES}")
        if self.bounds is not None:
            interval(self.bounds)  # a declaration error shows at import

    @property
    def kinds(self) -> tuple[type, ...]:
        return self.kind if isinstance(self.kind, tuple) else (self.kind,)

    @property
    def path(self) -> str:
        """Where the knob is in verl's config: `algorithm.bot_epsilon`, `reward.reward_kwargs.bot.w_local`."""
        return f"{self.node}.{self.key}"

    def allowed(self) -> str:
        """What the knob takes, in words: `true or false`, `a finite number >= 0`, `an integer >= 1`,
        `one of suffix, sequence, chunk`, `true, false, auto or returns`, ..."""
        if self.kinds == (str,) and self.choices and self.other is None:
            return f"one of {', '.join(self.choices)}"
        words = [word for kind in self.kinds for word in self._words(kind)]
        return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"

    def _words(self, kind: type) -> list[str]:
        if kind is bool:
            return ["true", "false"]
        if kind is tuple:
            return ["a list of texts"]
        if kind is str:
            words = [*self.choices, *([self.other[0]] if self.other else [])]
            return words or ["a text"]
        return [f"{'an integer' if kind is int else 'a finite number'}{interval_words(self.bounds)}"]

    def refused(self, raw: Any) -> VerlBotConfigError:
        """The one-line refusal of `raw`: the key, the value and `allowed()`."""
        return VerlBotConfigError(f"+{self.path}={raw!r}: must be {self.allowed()}")

    def parse(self, raw: Any) -> Any:
        """The knob's value from `raw` (a number may come as its text), of the first of its kinds that takes it;
        VerlBotConfigError (`refused`) for a value of another kind or out of bounds. None stays None."""
        if raw is None:
            return None
        for kind in self.kinds:
            value = _convert(kind, raw)
            if value is not None and self._takes(kind, value):
                return value
        raise self.refused(raw)

    def _takes(self, kind: type, value: Any) -> bool:
        if kind in (bool, tuple):
            return True
        if kind is str:
            if not self.choices and self.other is None:
                return True  # any text
            return value in self.choices or (self.other is not None and bool(self.other[1](value)))
        if not math.isfinite(value):
            return False
        if self.bounds is None:
            return True
        (low, low_closed), (high, high_closed) = interval(self.bounds)
        above = value >= low if low_closed else value > low
        below = value <= high if high_closed else value < high
        return above and below


def _convert(kind: type, raw: Any) -> Any:
    """`raw` as a value of `kind`, or None when it is not one: a bool only from a bool; a number from a number
    or its text (an integer from an integral one), never from a bool; a text only from a text; a tuple of texts
    from a list of texts."""
    if kind is bool or isinstance(raw, bool):
        return raw if kind is bool and isinstance(raw, bool) else None
    if kind is str:
        return raw if isinstance(raw, str) else None
    if kind is tuple:
        texts = isinstance(raw, Sequence) and not isinstance(raw, str) and all(isinstance(x, str) for x in raw)
        return tuple(raw) if texts else None
    try:
        number = float(raw)
    except (TypeError, ValueError):
        return None
    if kind is float:
        return number
    return int(number) if number.is_integer() else None


def interval(bounds: str) -> tuple[tuple[float, bool], tuple[float, bool]]:
    """`"[0, inf)"` -> ((0.0, closed), (inf, open)); ValueError for another form."""
    match = _INTERVAL.match(bounds.strip())
    if match is None:
        raise ValueError(f"bounds {bounds!r}: not an interval like '[0, inf)' or '(0, 1]'")
    opening, low, high, closing = match.groups()
    return (float(low), opening == "["), (float(high), closing == "]")


def interval_words(bounds: str | None) -> str:
    """`" >= 0"`, `" > 0"`, `" < 0"`, `" in (0, 1]"` or `""` (any finite number) for an interval."""
    if bounds is None:
        return ""
    (low, low_closed), (high, high_closed) = interval(bounds)
    if math.isinf(low) and math.isinf(high):
        return ""
    if math.isinf(high):
        return f" {'>=' if low_closed else '>'} {low:g}"
    if math.isinf(low):
        return f" {'<=' if high_closed else '<'} {high:g}"
    return f" in {'[' if low_closed else '('}{low:g}, {high:g}{']' if high_closed else ')'}"


def knob(
    default: Any,
    *,
    bounds: str | None = None,
    choices: tuple[str, ...] = (),
    other: tuple[str, Callable[[str], bool]] | None = None,
    source: str,
    doc: str,
) -> Any:
    """A field of a `MethodSettings` class: its default and the rest of its `Knob` (kind: the annotation)."""
    spec = {"bounds": bounds, "choices": tuple(choices), "other": other, "source": source, "doc": doc}
    return field(default=default, metadata={"knob": spec})


def _kinds(annotation: Any) -> type | tuple[type, ...]:
    """The knob kind(s) of a field's annotation: `float` -> float, `bool | str` -> (bool, str), `tuple[str, ...]`
    -> tuple; None in a union is left out (an unset knob)."""
    args = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) else ()
    kinds = tuple(typing.get_origin(arg) or arg for arg in args or (annotation,) if arg is not type(None))
    return kinds[0] if len(kinds) == 1 else kinds


@dataclass(frozen=True)
class MethodSettings:
    """Base of a settings class: subclass it as a frozen dataclass with `prefix` (`"pass_"`), `label` (`"PASS"`,
    for messages), the config `node` it is read from (`"algorithm"` unless given), the node's `nested` keys that
    are no knobs, and one `knob(...)` field per knob. Constructing one checks every value (`Knob.parse`), so a
    settings object in hand is valid."""

    prefix: ClassVar[str] = ""
    label: ClassVar[str] = ""
    node: ClassVar[str] = "algorithm"
    nested: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, prefix: str = "", label: str = "", node: str = "", nested: tuple[str, ...] = (),
                          **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.prefix, cls.label = prefix or cls.prefix, label or cls.label
        cls.node, cls.nested = node or cls.node, nested or cls.nested

    def __post_init__(self) -> None:
        for spec in self.knobs():
            name = spec.key[len(self.prefix) :]
            object.__setattr__(self, name, spec.parse(getattr(self, name)))

    @classmethod
    def knobs(cls) -> tuple[Knob, ...]:
        """The declared knobs, in field order."""
        hints = typing.get_type_hints(cls)
        found = []
        for f in fields(cls):
            if "knob" not in f.metadata:
                continue
            default = None if f.default is MISSING else f.default
            found.append(Knob(f"{cls.prefix}{f.name}", _kinds(hints[f.name]), default, **f.metadata["knob"],
                              node=cls.node))
        return tuple(found)

    @classmethod
    def knob_named(cls, name: str) -> Knob:
        """The declaration of the knob `name` (without the prefix)."""
        return next(spec for spec in cls.knobs() if spec.key == cls.prefix + name)

    @classmethod
    def from_config(cls: type[T], config: Mapping[str, Any] | None, **computed: Any) -> T:
        """The settings from `config`, their config node (verl's `algorithm` config, or the mapping at `cls.node`:
        a DictConfig, a dict, or None: the defaults).

        Each `<prefix><name>` key sets the knob `name`; a `nested` key that names a field of the class sets it as
        it is; `computed` gives the default of a knob the config leaves unset where it is computed (e.g. from
        verl's own keys), or a field that is no knob. Raises VerlBotConfigError in one line for a key of the prefix
        that names no knob, or a value the knob does not take.
        """
        config = config if config is not None else {}
        keys = {spec.key: spec.key[len(cls.prefix) :] for spec in cls.knobs()}
        given = {str(k): config[k] for k in config.keys() if str(k).startswith(cls.prefix)}
        unknown = sorted(set(given) - set(keys) - set(cls.nested))
        if unknown:
            raise VerlBotConfigError(
                f"unknown {', '.join(f'+{cls.node}.{k}' for k in unknown)}: the {cls.label} knobs are "
                f"{', '.join([*keys, *cls.nested])}"
            )
        names = {f.name for f in fields(cls)}
        values = {name: given[key] for key, name in keys.items() if key in given}
        values |= {key: given[key] for key in cls.nested if key in given and key in names}
        return cls(**{**computed, **values})

    def as_dict(self) -> dict[str, Any]:
        """The values by field name (what `cls(**...)` takes back)."""
        return asdict(self)
