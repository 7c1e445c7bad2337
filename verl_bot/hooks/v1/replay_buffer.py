"""Hook: `verl.trainer.ppo.v1.trainer_base.PPOTrainer._build_replay_buffer` (reward config errors stop the run).

For a run that uses verl-bot (`verl_bot.launch.activation`; any other gets verl's buffer as it is) the wrapper arms
the one buffer object verl builds (`arm`): its terminal-eviction check first looks for the `verl_bot.errors.FATAL_KEY`
marker a reward configuration error leaves on a zero reward (raising in the reward path would only tag the group
"failure", and verl would train on) and stops the run; with DAPO's dynamic sampling and the `bot` manager its filter
drops exactly the groups the estimator cannot learn from (`without_signal`); with `full_determinism` its batches'
rows come in one order (`in_put_order`). Explained in docs/run_safety.md, docs/verl_setup.md (DAPO's dynamic
sampling) and docs/long_runs.md (Resume).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from verl_bot.advantage.groups import group_signal
from verl_bot.errors import FATAL_KEY, RolloutEngineError, VerlBotConfigError
from verl_bot.hooks.v1.batch import column_values, rows_of
from verl_bot.hooks.v1.rollout_failure import MARKER_SUFFIX
from verl_bot.hooks.wrap import original_of, wrap
from verl_bot.launch.activation import in_use
from verl_bot.rewards.settings import bot_manager_in_use, manager_settings

SEEN_ATTR = "_verl_bot_checked_uids"
CHECK = "_terminal_eviction_reasons"
ORDER = "_materialize_batch"
DAPO = "_dapo_filtered_keys"
SAMPLE = "sample"
SIGNAL_ATTR = "_verl_bot_group_signal"  # partition -> {uid: Classified}
COUNTS_ATTR = "_verl_bot_filter_counts"  # what the next `sample` reports


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
    """Raise `VerlBotConfigError` if a trajectory of a newly finished group carries the fatal marker.

    Reads the `extra_fields` of the trajectories of the groups that finished since its last look (each group once);
    what it remembers is the terminal groups it has read, and only while verl still holds them (as verl's own DAPO
    cache does): it never grows with the number of iterations. A group whose rollouts failed because the rollout
    engine is gone carries a marker entry instead (`verl_bot.hooks.v1.rollout_failure`): its tag, which the buffer
    already holds, stops the run the same way, with the engine's error.
    """
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
    unknown prompt goes last, by its text).

    Why (`full_determinism`): verl 0.9.1 orders the groups by a set of random uids (`uuid4`, `trainer_base.py:1476`;
    `sorted` over a set, `replay_buffer.py:388`) and a group's rows as they finished (`_materialize_batch` follows
    TransferQueue's metadata), and which session of a group gets which sample depends on the order its requests
    reach the rollout (verl's agent loop names no session to it), so two runs of one seed summed the same rows'
    losses in other orders (float32: weights ~1e-5 apart after two iterations); in one order they are bit-equal,
    and a resumed run is bit-equal to one never stopped. It costs one TransferQueue read of the batch's response ids.
    """
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


@dataclass(frozen=True)
class Classified:
    """One finished group: whether the run's estimator can learn from it, the value it collapses to (verl's counts
    of filtered groups by value), and whether verl's `filter_groups.metric` would drop it."""

    signal: bool
    value: float
    metric_drops: bool


def metric_drops(rows: list[tuple[np.ndarray, dict]], metric: str) -> bool:
    """verl's own classification of a group of (token rewards, reward_extra_info) rows: its metric (`reward`: the
    summed token rewards) the same for every rollout."""
    values = [float(r.sum()) if metric == "reward" else float(info.get(metric, np.nan)) for r, info in rows]
    return len(values) > 1 and float(np.std(values)) == 0.0


def classify(rows: list[tuple[np.ndarray, dict]], layout: str, metric: str) -> Classified:
    """A finished group's `Classified` from its (token rewards, reward_extra_info) rows, failed rollouts left out
    of the signal (they take no part in training)."""
    valid = [r for r, info in rows if not float(info.get("scorer_failed", 0.0) or 0.0) > 0]
    signal, value = group_signal(valid, layout)
    return Classified(signal, value, metric_drops(rows, metric))


def group_rows(partition_id: str, keys: list[str]) -> dict[str, list[tuple[np.ndarray, dict]]]:
    """{uid: [(token rewards (n,), reward_extra_info)]} of the trajectories `keys`, read from TransferQueue."""
    import transfer_queue as tq

    grouped: dict[str, list[tuple[np.ndarray, dict]]] = {}
    if not keys:
        return grouped
    data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["rm_scores", "extra_fields"])
    for key, rewards, extra in zip(keys, rows_of(data["rm_scores"]), column_values(data["extra_fields"]),
                                   strict=True):
        info = extra.get("reward_extra_info") if isinstance(extra, dict) else None
        grouped.setdefault(key.split("_")[0], []).append((rewards.double().numpy(), info if isinstance(info, dict)
                                                          else {}))
    return grouped


def without_signal(buffer: Any, partition_id: str, layout: str) -> tuple[set[str], Counter]:
    """verl's `_dapo_filtered_keys` for the `bot` manager: the finished groups without signal (each classified once,
    forgotten once verl no longer holds it) and their {value: count}; the counts for `sample` are noted."""
    if partition_id == "val":
        return set(), Counter()
    cache = buffer.__dict__.setdefault(SIGNAL_ATTR, {}).setdefault(partition_id, {})
    finished = buffer.finished_keys[partition_id]
    for uid in set(cache) - finished:
        del cache[uid]
    new = finished - set(cache)
    keys = [key for key in buffer.partitions[partition_id]
            if key.split("_")[0] in new and not key.endswith(MARKER_SUFFIX)]
    grouped = group_rows(partition_id, keys)
    counts = buffer.__dict__.setdefault(COUNTS_ATTR, Counter())
    for uid in new:
        found = cache[uid] = classify(grouped.get(uid, []), layout, buffer.filter_groups_metric)
        counts["dropped"] += not found.signal
        counts["dropped_where_metric_differs"] += not found.signal and not found.metric_drops
        counts["kept_where_metric_equal"] += found.signal and found.metric_drops
    dropped = {uid for uid, found in cache.items() if not found.signal}
    return dropped, Counter(cache[uid].value for uid in dropped)


def filter_by_signal(buffer: Any, layout: str) -> None:
    """Make `buffer`'s DAPO filter `without_signal` (manager layout `layout`), and its `sample` report the counts."""
    original_sample = getattr(buffer, SAMPLE)

    @functools.wraps(original_sample)
    def sample(*args, **kwargs):
        batch, metrics = original_sample(*args, **kwargs)
        counts = buffer.__dict__.pop(COUNTS_ATTR, Counter())
        metrics.update({f"verl_bot/dapo_{name}": float(counts[name])
                        for name in ("dropped", "dropped_where_metric_differs", "kept_where_metric_equal")})
        return batch, metrics

    setattr(buffer, DAPO, lambda partition_id: without_signal(buffer, partition_id, layout))
    setattr(buffer, SAMPLE, sample)


def armed(buffer: Any) -> bool:
    """False for verl's buffer whose fatal-marker check `arm` never installed (a custom sampler without that
    method is never checked: True)."""
    return getattr(buffer, CHECK, None) is None or CHECK in vars(buffer)


def arm(buffer: Any, ordered: bool = False, layout: str | None = None) -> Any:
    """Make `buffer`'s (this object's only) `_terminal_eviction_reasons` check for fatal markers first (a custom
    sampler without that method is left as it is: it is not checked); `ordered`: its batches' rows in put order
    (`in_put_order`); `layout` (the `bot` manager's, when DAPO's filter is on): its filter by signal
    (`filter_by_signal`).

    verl's sampling loop calls `_terminal_eviction_reasons` on every poll, for the train and the validation
    partition, in sync and async mode, before DAPO filtering can evict a group: a marker stops the run before
    log-probs, advantages or any update of that iteration. verl's `ReplayBuffer` classes are never changed.
    """
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
    if layout is not None and getattr(buffer, "filter_groups_metric", None) is not None and hasattr(buffer, DAPO):
        filter_by_signal(buffer, layout)
    return buffer


def _make_build_replay_buffer(original):
    @functools.wraps(original)
    def _build_replay_buffer(self, *args, **kwargs):
        buffer = original(self, *args, **kwargs)
        if not in_use(self.config):
            return buffer
        layout = manager_settings(self.config).layout if bot_manager_in_use(self.config) else None
        ordered = bool(self.config.actor_rollout_ref.rollout.get("full_determinism", False))
        return arm(buffer, ordered=ordered, layout=layout)

    return _build_replay_buffer


def install() -> list[str]:
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from verl_bot.hooks.compat import check_signature

    check_signature(original_of(ReplayBuffer, CHECK), ["self", "global_steps", "partition_id"], f"ReplayBuffer.{CHECK}")
    check_signature(original_of(ReplayBuffer, ORDER), ["self", "partition_id", "selected_prompt_uids",
                                                       "partition_snapshot"], f"ReplayBuffer.{ORDER}")
    check_signature(original_of(ReplayBuffer, DAPO), ["self", "partition_id"], f"ReplayBuffer.{DAPO}")
    check_signature(original_of(ReplayBuffer, SAMPLE), ["self", "global_steps", "partition_id", "batch_size"],
                    f"ReplayBuffer.{SAMPLE}")
    return [wrap(PPOTrainer, "_build_replay_buffer", ["self"], _make_build_replay_buffer)]
