"""Hook: `verl.trainer.ppo.v1.replay_buffer.ReplayBuffer(Async)._terminal_eviction_reasons` (config errors stop runs).

A configuration error in the reward path (no scorer for a `data_source`, a
token-reward vector of the wrong length, credentials a reward server refuses)
reaches TransferQueue as a zero reward whose `reward_extra_info` carries the
`verl_bot.errors.FATAL_KEY` marker (raising there would only tag the group
"failure", and verl would train on without it).

verl's replay buffer calls `_terminal_eviction_reasons` on every poll of its
sampling loop, for the train and the validation partition, in sync and async
mode, before DAPO filtering can evict a group. The wrapper reads the
`extra_fields` of the trajectories of groups that finished since its last look
(each group once) and raises `VerlBotConfigError` with the first marker's
message: the run stops before log-probs, advantages or any update of that step.
A group whose rollouts failed because the rollout engine is gone carries a
marker entry instead (`verl_bot.hooks.rollout_failure`): its tag, which the
buffer already holds, stops the run the same way, with the engine's error.
(A custom sampler, `trainer.v1.sampler.custom_sampler`, that overrides this
method bypasses the check.)
"""

from __future__ import annotations

import functools

from verl_bot.errors import FATAL_KEY, RolloutEngineError, VerlBotConfigError
from verl_bot.hooks._patch import wrap
from verl_bot.hooks.rollout_failure import MARKER_SUFFIX

SEEN_ATTR = "_verl_bot_checked_uids"


def first_fatal(extra_fields: list) -> tuple[int, str | None]:
    """(number of trajectories carrying the fatal marker, the first one's message or None)."""
    messages = []
    for extra in extra_fields:
        extra = getattr(extra, "data", extra)
        info = extra.get("reward_extra_info", {}) if isinstance(extra, dict) else {}
        if isinstance(info, dict) and info.get(FATAL_KEY):
            messages.append(str(info[FATAL_KEY]))
    return len(messages), (messages[0] if messages else None)


def check_finished_groups(buffer, partition_id: str) -> None:
    """Raise `VerlBotConfigError` if a trajectory of a newly finished group carries the fatal marker."""
    import transfer_queue as tq

    seen = buffer.__dict__.setdefault(SEEN_ATTR, {}).setdefault(partition_id, set())
    terminal = buffer.finished_keys[partition_id] | buffer.failure_keys[partition_id]
    new = terminal - seen
    if not new:
        return
    partition = buffer.partitions[partition_id]
    keys = [key for key in partition if key.split("_")[0] in new]
    seen.update(new)
    markers = [partition[key][FATAL_KEY] for key in keys if key.endswith(MARKER_SUFFIX) and FATAL_KEY in partition[key]]
    if markers:
        raise RolloutEngineError(f"{len(markers)} {partition_id} group(s) lost their rollouts: {markers[0]}")
    keys = [key for key in keys if not key.endswith(MARKER_SUFFIX)]
    if not keys:
        return
    data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["extra_fields"])
    count, message = first_fatal(list(data["extra_fields"]))
    if message is not None:
        raise VerlBotConfigError(
            f"{count} of {len(keys)} finished {partition_id} trajectories hit a reward configuration error, "
            f"the run stops before its next update: {message}"
        )


def _make_wrapper(original):
    @functools.wraps(original)
    def _terminal_eviction_reasons(self, global_steps, partition_id, *args, **kwargs):
        check_finished_groups(self, partition_id)
        return original(self, global_steps, partition_id, *args, **kwargs)

    return _terminal_eviction_reasons


def install() -> list[str]:
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

    params = ["self", "global_steps", "partition_id"]
    return [
        wrap(ReplayBuffer, "_terminal_eviction_reasons", params, _make_wrapper),
        wrap(ReplayBufferAsync, "_terminal_eviction_reasons", params, _make_wrapper),
    ]
