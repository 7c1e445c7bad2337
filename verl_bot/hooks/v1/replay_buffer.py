"""Hook: `verl.trainer.ppo.v1.trainer_base.PPOTrainer._build_replay_buffer` (reward config errors stop the run).

A configuration error in the reward path (no scorer for a `data_source`, a
token-reward vector of the wrong length, credentials a reward server refuses)
reaches TransferQueue as a zero reward whose `reward_extra_info` carries the
`verl_bot.errors.FATAL_KEY` marker (raising there would only tag the group
"failure", and verl would train on without it).

verl's trainer builds its replay buffer (or a custom sampler) once, in
`__init__`. For a run that uses verl-bot (`verl_bot.launch.activation`; any other run gets
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
marker entry instead (`verl_bot.hooks.v1.rollout_failure`): its tag, which the
buffer already holds, stops the run the same way, with the engine's error.

With `actor_rollout_ref.rollout.full_determinism=true` the armed buffer also
gives each batch its rows in one order: its prompts in the order the trainer put
them (the dataloader's), each group's rollouts by their response tokens. verl
0.9.1 orders the groups by a set of random uids (`uuid4`, `trainer_base.py:1476`;
`sorted` over a set, `replay_buffer.py:388`) and a group's rows as they finished
(`_materialize_batch` follows TransferQueue's metadata), and which session of a
group gets which sample depends on the order its requests reach the rollout
(verl's agent loop names no session to it), so two runs of one seed summed the
same rows' losses in other orders (float32: weights ~1e-5 apart after two
steps); in one order they are bit-equal, and a resumed run is bit-equal to one
never stopped. It costs one TransferQueue read of the batch's response ids.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from verl_bot.errors import FATAL_KEY, RolloutEngineError, VerlBotConfigError
from verl_bot.hooks.v1.rollout_failure import MARKER_SUFFIX
from verl_bot.hooks.wrap import original_of, wrap
from verl_bot.launch.activation import in_use

SEEN_ATTR = "_verl_bot_checked_uids"
CHECK = "_terminal_eviction_reasons"
ORDER = "_materialize_batch"


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


def in_put_order(snapshot: dict[str, Any], prompt_order: Iterable[str],
                 responses: dict[str, tuple[int, ...]] | None = None) -> dict[str, Any]:
    """`snapshot` (trajectory key `{uid}_{session_id}_{index}` -> tag) ordered by its prompt's position in
    `prompt_order`, then by its response's token ids (`responses`, when given), then session and index (a key of an
    unknown prompt goes last, by its text)."""
    position = {uid: i for i, uid in enumerate(prompt_order)}
    responses = responses or {}

    def rank(key: str) -> tuple:
        uid, *rest = key.split("_")
        ids = responses.get(key, ())
        return position.get(uid, len(position)), ids, [int(p) if p.isdigit() else -1 for p in rest], key

    return {key: snapshot[key] for key in sorted(snapshot, key=rank)}


def response_ids(partition_id: str, keys: list[str]) -> dict[str, tuple[int, ...]]:
    """Each trajectory's response token ids (as TransferQueue holds them, padding included), by key; {} when the
    trajectories have no `responses`."""
    import transfer_queue as tq

    keys = [key for key in keys if not key.endswith(MARKER_SUFFIX)]
    if not keys:
        return {}
    data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["responses"])
    if "responses" not in data.keys():  # trajectories written without it: ordered by session
        return {}
    column = data["responses"]
    rows = column.unbind() if getattr(column, "is_nested", False) else list(column)
    return {key: tuple(row.tolist()) for key, row in zip(keys, rows, strict=True)}


def armed(buffer: Any) -> bool:
    """False for verl's buffer whose fatal-marker check `arm` never installed (a custom sampler without that
    method is never checked: True)."""
    return getattr(buffer, CHECK, None) is None or CHECK in vars(buffer)


def arm(buffer: Any, ordered: bool = False) -> Any:
    """Make `buffer`'s (this object's only) `_terminal_eviction_reasons` check for fatal markers first (a custom
    sampler without that method is left as it is: it is not checked); `ordered`: its batches' rows in put order
    (`in_put_order`)."""
    original = getattr(buffer, CHECK, None)
    if original is None:
        return buffer

    @functools.wraps(original)
    def _terminal_eviction_reasons(global_steps, partition_id, *args, **kwargs):
        check_finished_groups(buffer, partition_id)
        return original(global_steps, partition_id, *args, **kwargs)

    setattr(buffer, CHECK, _terminal_eviction_reasons)
    materialize = getattr(buffer, ORDER, None)
    if ordered and materialize is not None:

        @functools.wraps(materialize)
        def _materialize_batch(partition_id, selected_prompt_uids, partition_snapshot, *args, **kwargs):
            selected = set(selected_prompt_uids)
            keys = [key for key in partition_snapshot if key.split("_")[0] in selected]
            snapshot = in_put_order(partition_snapshot, buffer.prompt_global_steps[partition_id],
                                    response_ids(partition_id, keys))
            return materialize(partition_id, selected_prompt_uids, snapshot, *args, **kwargs)

        setattr(buffer, ORDER, _materialize_batch)
    return buffer


def _make_build_replay_buffer(original):
    @functools.wraps(original)
    def _build_replay_buffer(self, *args, **kwargs):
        buffer = original(self, *args, **kwargs)
        if not in_use(self.config):
            return buffer
        return arm(buffer, ordered=bool(self.config.actor_rollout_ref.rollout.get("full_determinism", False)))

    return _build_replay_buffer


def install() -> list[str]:
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from verl_bot.hooks.compat import check_signature

    check_signature(original_of(ReplayBuffer, CHECK), ["self", "global_steps", "partition_id"], f"ReplayBuffer.{CHECK}")
    check_signature(original_of(ReplayBuffer, ORDER), ["self", "partition_id", "selected_prompt_uids",
                                                       "partition_snapshot"], f"ReplayBuffer.{ORDER}")
    return [wrap(PPOTrainer, "_build_replay_buffer", ["self"], _make_build_replay_buffer)]
