"""How a method declares its knobs: one frozen dataclass per method, one `knob(...)` per field, one reader.

An estimator (`verl_bot.advantage`) or a policy loss (`verl_bot.losses`) keeps its knobs in verl's `algorithm`
config as `+algorithm.<prefix><name>=...` (verl's own configs refuse keys they do not know). It declares them
once, beside its code:

    @dataclass(frozen=True)
    class PureSettings(MethodSettings, prefix="pure_", label="PURE"):
        temperature: float = knob(0.1, bounds="(0, inf)", source="code", doc="T of the min-form softmax")

and reads them with `PureSettings.from_config(algorithm)`, which refuses, in one line naming the key, the value
and what the knob takes, a value of the wrong kind or out of bounds and a key of the method's prefix that it does
not declare. The field's annotation is the knob's kind (`bool`, `int`, `float` or `str`; `float | None` for a
default computed where the knob is read, passed to `from_config`); `bounds` is an interval of numbers (finite
ones: `[0, inf)` is a finite number >= 0), `choices` the texts a `str` knob takes (`other`: what else it takes,
and the test); `source` is where the default comes from, as docs/ALGORITHMS.md tags it: the method's `paper`,
its authors' `code`, or `ours`. A value that several knobs decide together is checked in the class's
`__post_init__`, after the base class's. The method's row in `ESTIMATORS` / `LOSSES` carries the class and the
method's own start-up check (a `StartupCheck`), so the start-up checks (`verl_bot.launch.preflight`) ask every
method in use without naming any, and docs/knobs.md's test reads every knob from here.
"""

from __future__ import annotations

import math
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, ClassVar, TypeVar

from verl_bot.errors import VerlBotConfigError

SOURCES = ("paper", "code", "ours")
KINDS = (bool, int, float, str)
T = TypeVar("T", bound="MethodSettings")
# A method's start-up check: (verl's composed config, the run's local parquet train files) -> why the method cannot
# run (one line, which `verl_bot.launch.preflight` raises), or None.
StartupCheck = Callable[[Any, list[str]], str | None]


def enum_name(value: Any) -> str:
    """A config value verl may give as its `Enum` (`algorithm.adv_estimator`: `AdvantageEstimator.GRPO`) as its
    name ("grpo"); a string as it is."""
    return str(getattr(value, "value", value))
_INTERVAL = re.compile(r"^([\[(])\s*(-inf|[-+0-9.e]+)\s*,\s*(inf|[-+0-9.e]+)\s*([\])])$")


@dataclass(frozen=True)
class Knob:
    """One knob of a method: `+algorithm.<key>`, of kind `kind`, `default` unless set (None: computed where the
    knob is read), the values it takes (`bounds` for numbers, `choices` and `other` for texts), where the default
    comes from (`source`) and what it does (`doc`)."""

    key: str
    kind: type
    default: Any
    bounds: str | None = None
    choices: tuple[str, ...] = ()
    other: tuple[str, Callable[[str], bool]] | None = None
    source: str = "ours"
    doc: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise TypeError(f"knob {self.key}: kind {self.kind!r} is not one of {KINDS}")
        if self.source not in SOURCES:
            raise ValueError(f"knob {self.key}: source {self.source!r} is not one of {SOURCES}")
        if self.bounds is not None:
            interval(self.bounds)  # a declaration error shows at import

    def allowed(self) -> str:
        """What the knob takes, in words: `true or false`, `a finite number >= 0`, `an integer >= 1`,
        `one of suffix, sequence, chunk`, ..."""
        if self.kind is bool:
            return "true or false"
        if self.kind is str:
            texts = ", ".join(self.choices)
            if self.other is None:
                return f"one of {texts}" if texts else "a text"
            return f"{texts} or {self.other[0]}" if texts else self.other[0]
        what = "an integer" if self.kind is int else "a finite number"
        return f"{what}{interval_words(self.bounds)}"

    def parse(self, raw: Any) -> Any:
        """The knob's value from `raw` (a number may come as its text); VerlBotConfigError naming the key, the
        value and `allowed()` for a value of another kind or out of bounds. None stays None."""
        if raw is None:
            return None
        value = _convert(self.kind, raw)
        if value is None or not self._takes(value):
            raise VerlBotConfigError(f"+algorithm.{self.key}={raw!r}: must be {self.allowed()}")
        return value

    def _takes(self, value: Any) -> bool:
        if self.kind is bool:
            return True
        if self.kind is str:
            if not self.choices and self.other is None:
                return True  # any text
            return value in self.choices or (self.other is not None and self.other[1](value))
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
    or its text (an integer from an integral one), never from a bool; a text only from a text."""
    if kind is bool or isinstance(raw, bool):
        return raw if kind is bool and isinstance(raw, bool) else None
    if kind is str:
        return raw if isinstance(raw, str) else None
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


@dataclass(frozen=True)
class MethodSettings:
    """Base of a method's settings: subclass it as a frozen dataclass with `prefix` (`"pass_"`) and `label`
    (`"PASS"`, for messages) and one `knob(...)` field per knob. Constructing one checks every value
    (`Knob.parse`), so a settings object in hand is valid."""

    prefix: ClassVar[str] = ""
    label: ClassVar[str] = ""

    def __init_subclass__(cls, prefix: str = "", label: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.prefix, cls.label = prefix or cls.prefix, label or cls.label

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
            kind = hints[f.name]
            if typing.get_origin(kind) in (typing.Union, types.UnionType):  # `float | None`: computed default
                (kind,) = [arg for arg in typing.get_args(kind) if arg is not type(None)]
            default = None if f.default is MISSING else f.default
            found.append(Knob(f"{cls.prefix}{f.name}", kind, default, **f.metadata["knob"]))
        return tuple(found)

    @classmethod
    def from_config(cls: type[T], algorithm: Mapping[str, Any] | None, **computed: Any) -> T:
        """The settings from verl's `algorithm` config (a DictConfig, a dict, or None: the defaults).

        Each `<prefix><name>` key sets the knob `name`; `computed` gives the default of a knob the config leaves
        unset where the method computes it (e.g. from verl's own keys). Raises VerlBotConfigError in one line for
        a key of the prefix that names no knob, or a value the knob does not take.
        """
        algorithm = algorithm if algorithm is not None else {}
        keys = {spec.key: spec.key[len(cls.prefix) :] for spec in cls.knobs()}
        given = {str(k): algorithm[k] for k in algorithm.keys() if str(k).startswith(cls.prefix)}
        unknown = sorted(set(given) - set(keys))
        if unknown:
            raise VerlBotConfigError(
                f"unknown {', '.join('+algorithm.' + k for k in unknown)}: the {cls.label} knobs are "
                f"{', '.join(keys)}"
            )
        values = {name: given[key] for key, name in keys.items() if key in given}
        return cls(**{**computed, **values})

    def as_dict(self) -> dict[str, Any]:
        """The values by field name (what `cls(**...)` takes back)."""
        return asdict(self)
