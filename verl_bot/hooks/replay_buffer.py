"""Hook: `verl.trainer.ppo.v1.trainer_base.PPOTrainer._build_replay_buffer` (reward config errors stop the run).

A configuration error in the reward path (no scorer for a `data_source`, a
token-reward vector of the wrong length, credentials a reward server refuses)
reaches TransferQueue as a zero reward whose `reward_extra_info` carries the
`verl_bot.errors.FATAL_KEY` marker (raising there would only tag the group
"failure", and verl would train on without it).

verl's trainer builds its replay buffer (or a custom sampler) once, in
`__init__`. For a run that uses verl-bot (`verl_bot.usage`; any other run gets
verl's buffer as it is, and verl's `ReplayBuffer` classes are never changed) the
wrapper arms that one buffer object: its `_terminal_eviction_reasons`, which
the sampling loop calls on every poll for the train and the validation
partition, in sync and async mode, before DAPO filtering can evict a group,
first reads the `extra_fields` of the trajectories of groups that finished
since its last look (each group once) and raises `VerlBotConfigError` with the
first marker's message: the run stops before log-probs, advantages or any
update of that step. What it remembers is the terminal groups it has read, and
only while verl still holds them (as verl's own DAPO cache does): it never
grows with the number of steps.
A group whose rollouts failed because the rollout engine is gone carries a
marker entry instead (`verl_bot.hooks.rollout_failure`): its tag, which the
buffer already holds, stops the run the same way, with the engine's error.
"""

from __future__ import annotations

import functools
from typing import Any

from verl_bot.errors import FATAL_KEY, RolloutEngineError, VerlBotConfigError
from verl_bot.hooks._patch import original_of, wrap
from verl_bot.hooks.rollout_failure import MARKER_SUFFIX
from verl_bot.usage import in_use

SEEN_ATTR = "_verl_bot_checked_uids"
CHECK = "_terminal_eviction_reasons"


def first_fatal(extra_fields: list) -> tuple[int, str | None]:
    """(number of trajectories carrying the fatal marker, the first one's message or None)."""
    messages = []
    for extra in extra_fields:
        extra = getattr(extra, "data", extra)
        info = extra.get("reward_extra_info", {}) if isinstance(extra, dict) else {}
        if isinstance(info, dict) and info.get(FATAL_KEY):
            messages.append(str(info[FATAL_KEY]))
    return len(messages), (messages[0] if messages else None)


def newly_finished(seen: set[str], terminal: set[str]) -> set[str]:
    """The uids of `terminal` not in `seen`; `seen` keeps only the terminal uids afterwards (bounded)."""
    seen.intersection_update(terminal)
    new = terminal - seen
    seen.update(new)
    return new


def check_finished_groups(buffer: Any, partition_id: str) -> None:
    """Raise `VerlBotConfigError` if a trajectory of a newly finished group carries the fatal marker."""
    import transfer_queue as tq

    seen = buffer.__dict__.setdefault(SEEN_ATTR, {}).setdefault(partition_id, set())
    new = newly_finished(seen, buffer.finished_keys[partition_id] | buffer.failure_keys[partition_id])
    partition = buffer.partitions[partition_id]
    keys = [key for key in partition if key.split("_")[0] in new]
    markers = [partition[key][FATAL_KEY] for key in keys if key.endswith(MARKER_SUFFIX) and FATAL_KEY in partition[key]]
    if markers:
        raise RolloutEngineError(f"{len(markers)} {partition_id} group(s) lost their rollouts: {markers[0]}")
    keys = [key for key in keys if not key.endswith(MARKER_SUFFIX)]
    if not keys:
        return
    data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["extra_fields"])
    if "extra_fields" not in data.keys():  # trajectories written without any (no reward manager of verl-bot's)
        return
    count, message = first_fatal(list(data["extra_fields"]))
    if message is not None:
        raise VerlBotConfigError(
            f"{count} of {len(keys)} finished {partition_id} trajectories hit a reward configuration error, "
            f"the run stops before its next update: {message}"
        )


def arm(buffer: Any) -> Any:
    """Make `buffer`'s (this object's only) `_terminal_eviction_reasons` check for fatal markers first (a custom
    sampler without that method is left as it is: it is not checked)."""
    original = getattr(buffer, CHECK, None)
    if original is None:
        return buffer

    @functools.wraps(original)
    def _terminal_eviction_reasons(global_steps, partition_id, *args, **kwargs):
        check_finished_groups(buffer, partition_id)
        return original(global_steps, partition_id, *args, **kwargs)

    setattr(buffer, CHECK, _terminal_eviction_reasons)
    return buffer


def _make_build_replay_buffer(original):
    @functools.wraps(original)
    def _build_replay_buffer(self, *args, **kwargs):
        buffer = original(self, *args, **kwargs)
        return arm(buffer) if in_use(self.config) else buffer

    return _build_replay_buffer


def install() -> list[str]:
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from verl_bot.compat import check_signature

    check_signature(original_of(ReplayBuffer, CHECK), ["self", "global_steps", "partition_id"], f"ReplayBuffer.{CHECK}")
    return [wrap(PPOTrainer, "_build_replay_buffer", ["self"], _make_build_replay_buffer)]
