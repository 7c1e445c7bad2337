"""Does a run use verl-bot? Decided from the run's config alone, once per config.

`reason(config)` (and `in_use`): a run uses verl-bot when its config names one of its estimators, its reward manager,
one of its policy losses or its agent loop, or sets one of its keys (`algorithm.token_report_*`, a method's knob
`algorithm.<name>_*`, `reward.reward_kwargs.bot`). Every hook that sees the config asks it; for any other run it
calls verl's original unchanged. verl's trainer keeps one config object for the whole run, so `reason` reads it once
and answers from memory afterwards. The rule and what it guarantees: docs/PLUGIN.md, sections When a run uses
verl-bot and What it changes in a run that does not use it.
"""

from __future__ import annotations

from typing import Any

from verl_bot.advantage import ESTIMATORS
from verl_bot.advantage.vps import AGENT_LOOP
from verl_bot.losses import LOSSES, loss_name
from verl_bot.observe.token_records import DIR_KEY, GROUPS_KEY, STEPS_KEY
from verl_bot.rewards.settings import bot_manager_in_use

AGENT_LOOPS = (AGENT_LOOP,)
ALGORITHM_KEYS = (STEPS_KEY, GROUPS_KEY, DIR_KEY)
KNOB_PREFIXES = tuple(f"{name}_" for name in (*ESTIMATORS, *LOSSES))

_decided: tuple[Any, str | None] | None = None


def _name(value: Any) -> str:
    return str(getattr(value, "value", value))


def why(config: Any) -> str | None:
    """The first thing in `config` that makes the run use verl-bot (e.g. "algorithm.adv_estimator=bot"), or None."""
    algorithm = config.get("algorithm") or {}
    estimator = _name(algorithm.get("adv_estimator"))
    rollout = (config.get("actor_rollout_ref") or {}).get("rollout") or {}
    agent_loop = _name((rollout.get("agent") or {}).get("default_agent_loop"))
    keys = [f"algorithm.{k}" for k in algorithm if k in ALGORITHM_KEYS or str(k).startswith(KNOB_PREFIXES)]
    if ((config.get("reward") or {}).get("reward_kwargs") or {}).get("bot") is not None:
        keys.append("reward.reward_kwargs.bot")
    named = [
        (estimator in ESTIMATORS, f"algorithm.adv_estimator={estimator}"),
        (bot_manager_in_use(config), "reward.reward_manager.name=bot"),
        (loss_name(config) is not None, f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_name(config)}"),
        (agent_loop in AGENT_LOOPS, f"actor_rollout_ref.rollout.agent.default_agent_loop={agent_loop}"),
        (bool(keys), ", ".join(keys)),
    ]
    return next((text for hit, text in named if hit), None)


def reason(config: Any) -> str | None:
    """`why(config)`, read once per config object (the trainer's config lives as long as the run)."""
    global _decided
    if _decided is None or _decided[0] is not config:
        _decided = (config, why(config))
    return _decided[1]


def in_use(config: Any) -> bool:
    """True when the run of `config` uses verl-bot."""
    return reason(config) is not None
