"""verl's registries: verl-bot's estimators, policy losses, reward manager, agent loop (and the CPU backend's
platform and rollout), under their names.

Each is registered with verl's own function when verl imports the registry's
module (`verl_bot.hooks.PLAN`; the CPU backend's when it is selected), and
recorded in the ledger: a later failure takes it out again. A name verl
already knows with another entry (a user's own `pass` estimator, `reco` loss,
`bot` manager, ...) is refused with one `VerlBotConfigError` naming both, and
the user's entry stays: verl's `register_policy_loss` would overwrite it
without a word, its `register_adv_est` fail with a generic message. (A user's entry registered after verl-bot's meets
verl's own rules: its estimator registry refuses it, naming both functions; its
loss and agent-loop registries let it replace verl-bot's, as any re-registration.)
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

from verl_bot.errors import VerlBotConfigError
from verl_bot.hooks.compat import dry, note
from verl_bot.hooks.transaction import LEDGER

MANAGER = "bot"


def _describe(entry: Any) -> str:
    if isinstance(entry, dict):  # the agent-loop registry keeps a Hydra target
        return str(entry.get("_target_"))
    return f"{getattr(entry, '__module__', '?')}.{getattr(entry, '__qualname__', entry)}"


def _enter(kind: str, name: str, ours: Any, registry: MutableMapping, register: Callable[[], Any]) -> str:
    """`register()` (verl's decorator applied to ours) unless `registry` holds another entry under `name`: then
    one line naming both and the two ways out."""
    if dry():  # the dry check (`verl_bot.hooks.touch_points`): verl's registry and its decorator are there
        note(f"{kind}:{name}", "found")
        return f"{kind}:{name}"
    present = registry.get(name)
    if present is not None and present != ours:
        raise VerlBotConfigError(
            f"verl-bot: {kind} {name!r} is already registered in verl as {_describe(present)}, so verl-bot's "
            f"{_describe(ours)} is not: rename yours, or turn verl-bot off with VERL_USE_EXTERNAL_PLUGINS=none"
        )
    register()
    if present is None:
        LEDGER.record(f"{kind}:{name}", lambda: registry.pop(name, None))
    return f"{kind}:{name}"


def _declare_streams() -> None:
    """Tell the `bot` manager which reward streams each estimator reads (`verl_bot.credit.streams`, not verl's)."""
    from verl_bot.advantage import ESTIMATORS
    from verl_bot.credit.streams import declare_streams

    for name, spec in ESTIMATORS.items():
        declare_streams(name, spec.streams)


def estimators_and_losses() -> list[str]:
    """verl-bot's estimators (verl's `register_adv_est`) and policy losses (`register_policy_loss`)."""
    from verl.trainer.ppo import core_algos

    from verl_bot.advantage import ESTIMATORS
    from verl_bot.losses import LOSSES

    _declare_streams()
    done = []
    for name, spec in ESTIMATORS.items():
        register = core_algos.register_adv_est(name)
        done.append(_enter("adv_estimator", name, spec.fn, core_algos.ADV_ESTIMATOR_REGISTRY,
                           lambda register=register, fn=spec.fn: register(fn)))
    for name, spec in LOSSES.items():
        register = core_algos.register_policy_loss(name)
        done.append(_enter("policy_loss", name, spec.fn, core_algos.POLICY_LOSS_REGISTRY,
                           lambda register=register, fn=spec.fn: register(fn)))
    return done


def reward_manager() -> list[str]:
    """verl-bot's `bot` reward manager in verl's reward-loop registry (and the streams the estimators read)."""
    from verl.experimental.reward_loop.reward_manager import registry

    from verl_bot.rewards.manager import BoTRewardManager

    _declare_streams()
    register = registry.register(MANAGER)
    return [_enter("reward_manager", MANAGER, BoTRewardManager, registry.REWARD_MANAGER,
                   lambda: register(BoTRewardManager))]


def agent_loop() -> list[str]:
    """verl-bot's `vps_single_turn` agent loop in verl's agent-loop registry (which keeps its class's path)."""
    from verl.experimental.agent_loop import agent_loop as verl_agent_loop

    from verl_bot.launch.activation import AGENT_LOOPS
    from verl_bot.vps.agent_loop import VPSAgentLoop

    (name,) = AGENT_LOOPS
    register = verl_agent_loop.register(name)
    target = {"_target_": f"{VPSAgentLoop.__module__}.{VPSAgentLoop.__qualname__}"}
    return [_enter("agent_loop", name, target, verl_agent_loop._agent_loop_registry, lambda: register(VPSAgentLoop))]


def cpu_platform(name: str, platform: type) -> str:
    """The CPU backend's platform in verl's `PlatformRegistry` (`verl_bot.cpu`)."""
    from verl.plugin.platform import PlatformRegistry

    return _enter("platform", name, platform, PlatformRegistry._platforms,
                  lambda: PlatformRegistry.register(platform=name)(platform))


def rollout_replica(name: str, loader: Callable[[], type]) -> str:
    """The CPU backend's rollout replica (`loader` returns its class) in verl's `RolloutReplicaRegistry`."""
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    return _enter("rollout_replica", name, loader, RolloutReplicaRegistry._registry,
                  lambda: RolloutReplicaRegistry.register(name, loader))
