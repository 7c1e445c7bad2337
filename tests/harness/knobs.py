"""The knobs the code declares, as the documents' tests read them: `+algorithm.<name>` (every method's declaration,
the token report's keys, the token panel's) and `+reward.reward_kwargs.bot.<name>` (the manager's, `scorers`, the
PRM's), each with its default in the code."""

from __future__ import annotations

from verl_bot.advantage import ESTIMATORS
from verl_bot.knobs import Knob, MethodSettings
from verl_bot.losses import LOSSES
from verl_bot.observe import token_records
from verl_bot.observe.panels import PanelSettings
from verl_bot.rewards.prm import PrmSettings
from verl_bot.rewards.settings import ManagerSettings

MANAGER = "reward.reward_kwargs.bot."
UNSET = object()  # a knob whose default the code does not state as a constant


def declared_knobs() -> dict[str, Knob]:
    """`<key>` -> its declaration, over the settings of every estimator and loss (ReCo's halves share theirs)."""
    return {k.key: k for spec in (*ESTIMATORS.values(), *LOSSES.values()) for k in spec.settings.knobs()}


def declared_defaults(settings: type[MethodSettings], prefix: str = "") -> dict[str, object]:
    """`<prefix><name>` -> the default a settings class declares (UNSET where it is computed or resolved, or has a
    newline: the page states those in words)."""
    knobs = settings.knobs()
    return {prefix + k.key: UNSET if k.default is None or "\n" in str(k.default) else k.default for k in knobs}


def algorithm_knobs() -> dict[str, object]:
    """`+algorithm.<name>` knob -> its default in the code (UNSET where it is computed)."""
    return {
        **{key: UNSET if k.default is None else k.default for key, k in declared_knobs().items()},
        token_records.STEPS_KEY: UNSET,
        token_records.GROUPS_KEY: token_records.DEFAULT_GROUPS,
        token_records.DIR_KEY: UNSET,
        **declared_defaults(PanelSettings),
    }


def manager_knobs() -> dict[str, object]:
    """`+reward.reward_kwargs.bot.<name>` knob -> its default in the code: the manager's, `scorers`, the PRM's."""
    return {**declared_defaults(ManagerSettings), "scorers": UNSET, **declared_defaults(PrmSettings, "prm.")}


def manager_knob(key: str) -> str:
    """The manager knob a key under `reward.reward_kwargs.bot.` sets: its first part (`scorers.<data_source>` is
    `scorers`), its first two under `prm`."""
    parts = key.split("=")[0].split(".")
    return ".".join(parts[:2] if parts[0] == "prm" else parts[:1])
