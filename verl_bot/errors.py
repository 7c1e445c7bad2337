"""Errors that stop a run, and the marker that carries one out of a Ray actor: the ground floor.

A misconfiguration (no scorer for a `data_source`, a token-reward vector of the
wrong length, a reward server that refuses our credentials, ...) must end the
run before its first training step, with its own message as the last error a
user sees. verl 0.9.1 swallows exceptions raised in the reward path (its agent
loop tags the group "failure" and trains on without it), so the reward path
does not raise them: it returns a zero reward whose `reward_extra_info` carries
`FATAL_KEY` = the message, and `verl_bot.hooks.v1.replay_buffer` raises
`VerlBotConfigError` as soon as a sampled trajectory carries the marker,
before log-probs, advantages or the update. `verl_bot.hooks.driver` makes
that message the last line the driver prints.
"""

from __future__ import annotations

FATAL_KEY = "verl_bot_fatal"


class VerlBotConfigError(ValueError):
    """A misconfiguration of verl-bot or of the run: the run must stop (it is never retried)."""


class RolloutEngineError(RuntimeError):
    """The rollout engine (verl's vLLM server or its workers) failed: the run must stop, naming the cause."""


class VerlApiMismatch(RuntimeError):
    """verl's installed version or API is not the one verl-bot was written against."""


def inert(target: str, hook: str, consequence: str) -> VerlBotConfigError:
    """The one-line stop of a verl-bot run in which one of its hooks never fired (verl took another way):
    `target` is verl's method, `hook` verl-bot's module (e.g. "hooks/v1/multi_trajectory.py")."""
    import verl

    return VerlBotConfigError(
        f"verl-bot: verl {verl.__version__}'s trainer went past {target} without verl-bot's hook there "
        f"(verl_bot/{hook}): {consequence}; `python -m verl_bot.hooks.touch_points` lists the touch points"
    )
