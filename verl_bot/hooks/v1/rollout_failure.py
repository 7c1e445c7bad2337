"""Hook: `verl.experimental.agent_loop.agent_loop.AgentLoopWorker._run_agent_loop` (a dead engine stops the run).

verl's v1 agent loop catches every exception of a rollout, logs it in the agent-loop worker and tags the prompt's
group "failure": right for a rollout that failed on its own (a tool that timed out), wrong when the rollout engine is
gone (every later rollout fails the same way, and the run ends with verl's "selected terminal groups with no
materializable trajectories", or refills forever, instead of the cause). For an engine failure (`engine_failure`:
vLLM's `EngineDeadError`, a rollout server's Ray actor that died, a `RolloutEngineError`) the wrapper leaves a marker
that stops the run with the cause. Installed before verl's v1 agent-loop module (`verl.trainer.ppo.v1.agent_loop_tq`)
is imported: its `AgentLoopWorkerTQ` is a Ray actor class, and Ray copies the methods it inherits when the class is
decorated.
"""

from __future__ import annotations

import functools
import re

from verl_bot.errors import FATAL_KEY
from verl_bot.hooks.wrap import PATCHED_ATTR, wrap
from verl_bot.launch.activation import in_use

MARKER_SUFFIX = "_verl_bot_engine_failure"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
ENGINE_FAILURES = frozenset(
    {"EngineDeadError", "ActorDiedError", "ActorUnavailableError", "RayActorError", "RolloutEngineError"}
)


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        inner = getattr(exc, "cause", None)
        exc = inner if isinstance(inner, BaseException) else (exc.__cause__ or exc.__context__)


def engine_failure(exc: BaseException) -> str | None:
    """`the rollout engine failed (<Type>: <first line>)` for the innermost exception in `exc`'s chain (Ray's
    `cause`, `__cause__`, `__context__`) whose class or a base class is one of `ENGINE_FAILURES`; None when there
    is none (any other failure)."""
    found = None
    for err in _chain(exc):
        kinds = [cls.__name__ for cls in type(err).__mro__ if cls.__name__ in ENGINE_FAILURES]
        if kinds:
            found = (kinds[0], err)
    if found is None:
        return None
    kind, err = found
    text = err.args[0] if err.args and isinstance(err.args[0], str) else str(err)  # Ray's copies repeat the args
    first = ANSI.sub("", (text.strip().splitlines() or [""])[0])
    return f"the rollout engine failed ({kind}: {first})"[:1000]


def _make_wrapper(original):
    """Agent-loop worker side: when a rollout fails because the engine is gone (`engine_failure`), one marker entry
    for the prompt's group goes to TransferQueue, a key `<uid>_verl_bot_engine_failure` whose tag carries
    `verl_bot.errors.FATAL_KEY` = the cause, then the error is raised as before; `verl_bot.hooks.v1.replay_buffer`
    finds the marker in the buffer's view of the partition at its next poll and stops the run with that message.
    Any other failure takes verl's own path unchanged, and so does every failure of a run that does not use
    verl-bot (no marker is written)."""

    @functools.wraps(original)
    async def _run_agent_loop(self, sampling_params, trajectory, *args, **kwargs):
        try:
            return await original(self, sampling_params, trajectory, *args, **kwargs)
        except Exception as exc:
            message = engine_failure(exc)
            uid = kwargs.get("uid")
            # (the legacy trainer, without TransferQueue, gets the error itself: it propagates to its driver)
            v1 = self.config.trainer.get("use_v1", True)
            if message is not None and uid is not None and in_use(self.config) and v1:
                import transfer_queue as tq

                partition = "val" if trajectory.get("validate") else "train"
                await tq.async_kv_put(key=f"{uid}{MARKER_SUFFIX}", partition_id=partition, tag={FATAL_KEY: message})
            raise

    return _run_agent_loop


V1_AGENT_LOOP = "verl.trainer.ppo.v1.agent_loop_tq"
V1_WORKER = "AgentLoopWorkerTQ"


def install() -> list[str]:
    import sys

    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    from verl_bot.hooks.compat import VerlApiMismatch, dry

    v1 = sys.modules.get(V1_AGENT_LOOP)  # half imported (it imports verl's agent loop first) is in time
    if hasattr(v1, V1_WORKER) and not getattr(AgentLoopWorker._run_agent_loop, PATCHED_ATTR, False) and not dry():
        raise VerlApiMismatch(
            f"verl-bot: {V1_AGENT_LOOP} was imported before verl-bot's hooks; its Ray actor class keeps verl's own "
            "AgentLoopWorker._run_agent_loop (import verl before it, as verl's trainer does)"
        )

    return [wrap(AgentLoopWorker, "_run_agent_loop", ["self", "sampling_params", "trajectory"], _make_wrapper)]
