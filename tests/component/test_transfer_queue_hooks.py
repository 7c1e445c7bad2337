"""verl's replay buffer and the trainer's batch fields on a real TransferQueue (Ray started in this process).

Trajectories are written the way verl's agent loop writes them (`list_of_dict_to_tensordict`, the same
tags); then verl 0.9.1's own `ReplayBuffer` classifies them:

- DAPO's dynamic sampling on `acc` (what the recipes filter on) drops groups whose outcome is uniform, while
  the continuous `score` keeps almost every group (issue: DAPO filtered on the score and dropped nothing);
- a trajectory carrying verl-bot's fatal marker stops sampling with the marker's message (the buffer of a
  verl-bot run); verl's own buffer classes are untouched and sample trajectories without `extra_fields`;
- the hooks' row readers see each row's extra_fields and data_source in batch order, and padding tags; both
  trainers' batches read the same through verl-bot's `TrainingBatch` interface;
- with `rollout.full_determinism` an armed buffer gives a batch its rows in the order the prompts were put, each
  group's by session, where verl's follows the order the rollouts finished.
"""

import tempfile

import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import compose_verl_config
from verl_bot.errors import FATAL_KEY, VerlBotConfigError
from verl_bot.hooks.legacy.batch import ProtoBatch
from verl_bot.hooks.v1.batch import TQBatch
from verl_bot.hooks.v1.replay_buffer import arm, in_put_order
from verl_bot.training.batch import record_rows, token_values
from verl_bot.training.context import failed_mask


@pytest.fixture(scope="module")
def tq():
    import ray
    import transfer_queue

    temp = tempfile.mkdtemp(prefix="vbtq", dir="/tmp")
    ray.init(num_cpus=4, include_dashboard=False, _temp_dir=temp, log_to_driver=False)
    conf = compose_verl_config(["transfer_queue.backend.SimpleStorage.num_data_storage_units=1"]).transfer_queue
    transfer_queue.init(OmegaConf.create(OmegaConf.to_container(conf, resolve=True)))
    yield transfer_queue
    transfer_queue.close()
    ray.shutdown()


def put_group(tq, uid, infos, partition="train", data_source="toy_math"):
    """A finished GRPO group as verl's agent loop leaves it: the prompt key and one trajectory per rollout
    (`infos` None: trajectories without `extra_fields`, as verl's own replay-buffer tests write them)."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    keys = [f"{uid}_{i}_0" for i in range(len(infos or [None, None]))]
    fields = [
        {"responses": torch.tensor([1, 2, 3]), "data_source": data_source}
        | ({} if infos is None else {"extra_fields": {"reward_extra_info": infos[i]}})
        for i in range(len(keys))
    ]
    tags = [{"status": "success", "global_steps": 0, "min_global_steps": 0, "max_global_steps": 0} for _ in keys]
    tq.kv_batch_put(keys=keys, fields=list_of_dict_to_tensordict(fields), tags=tags, partition_id=partition)
    tq.kv_put(key=uid, partition_id=partition, tag={"is_prompt": True, "status": "finished", "global_steps": 0})
    return keys


def replay_buffer(metric):
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    config = compose_verl_config([])
    return ReplayBuffer(
        trainer_mode="sync",
        trainer_config=config.trainer,
        max_off_policy_threshold=None,
        max_off_policy_strategy="drop",
        sampler_kwargs={},
        refill_fn=lambda n: None,
        filter_groups_metric=metric,
        train_batch_size=4,
        gen_batch_size=1,
    )


def test_dapo_filters_uniform_outcomes_on_acc_but_not_on_the_continuous_score(tq):
    groups = {
        "dapoall": [{"acc": 1.0, "score": 3.1}, {"acc": 1.0, "score": 3.2}],  # all solved, scores differ
        "dapononee": [{"acc": 0.0, "score": -0.8}, {"acc": 0.0, "score": -1.0}],  # none solved
        "dapomixed": [{"acc": 1.0, "score": 3.2}, {"acc": 0.0, "score": -1.0}],  # a learning signal
    }
    for uid, infos in groups.items():
        put_group(tq, uid, infos)
    for metric, expected in (("acc", {"dapoall", "dapononee"}), ("score", set())):
        buffer = replay_buffer(metric)
        buffer._sync_metadata_from_transfer_queue()
        _stale, dapo_uids, _failed, _counts = buffer._terminal_eviction_reasons(0, "train")
        assert dapo_uids & set(groups) == expected, metric
    tq.kv_clear(partition_id="train", keys=[k for uid in groups for k in [uid, f"{uid}_0_0", f"{uid}_1_0"]])


def put_dense_group(tq, uid: str, rollouts: list[tuple[list[float], dict]], partition: str = "dapo") -> list[str]:
    """A finished group of the `bot` manager's rollouts: each (token rewards, reward_extra_info)."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    keys = [f"{uid}_{i}_0" for i in range(len(rollouts))]
    fields = [{"responses": torch.ones(len(rewards), dtype=torch.int64), "rm_scores": torch.tensor(rewards),
               "data_source": "toy", "extra_fields": {"reward_extra_info": info}} for rewards, info in rollouts]
    tags = [{"status": "success", "global_steps": 0, "min_global_steps": 0, "max_global_steps": 0} for _ in keys]
    tq.kv_batch_put(keys=keys, fields=list_of_dict_to_tensordict(fields), tags=tags, partition_id=partition)
    tq.kv_put(key=uid, partition_id=partition, tag={"is_prompt": True, "status": "finished", "global_steps": 0})
    return [uid, *keys]


@pytest.mark.parametrize("metric", ["reward", "acc"])
def test_dapo_with_the_bot_manager_drops_exactly_the_groups_without_signal(tq, metric):
    """verl's own buffer, armed for a `bot` run with dense rewards (r_t = G + S_t): whatever `filter_groups.metric`
    says, the groups dropped are those whose bag of token rewards has no spread (failed rollouts left out); with
    `reward` (the summed token rewards) verl alone would keep `flat` (one G, lengths 2 and 3: sums 2 and 3), with
    `acc` it would drop `local` (one outcome, S separates its rollouts). The counts say which."""
    acc = {"acc": 1.0, "score": 1.0}
    groups = {
        "flat": [([1.0, 1.0], acc), ([1.0, 1.0, 1.0], acc)],  # G = 1 on every token, no S: nothing to learn
        "local": [([1.0, 0.5], acc), ([1.0, 1.0], acc)],  # the same G; S = -0.5 on one token: BoT learns from it
        "mixed": [([1.0], acc), ([0.0, 0.0], {"acc": 0.0, "score": 0.0})],  # G differs
        "failed": [([1.0, 1.0], acc), ([9.0], {**acc, "scorer_failed": 1.0})],  # one valid rollout: nothing
    }
    keys = [key for uid, rollouts in groups.items() for key in put_dense_group(tq, uid + metric, rollouts)]
    buffer = arm(replay_buffer(metric), layout="dense")
    buffer._sync_metadata_from_transfer_queue()
    _stale, dropped, _failed, counts = buffer._terminal_eviction_reasons(0, "dapo")
    assert dropped == {"flat" + metric, "failed" + metric}
    assert counts == {1.0: 2}  # both collapse to a token reward of 1.0 (verl's table of filtered groups by value)
    noted = buffer.__dict__["_verl_bot_filter_counts"]
    if metric == "reward":  # sums 2 != 3 and 2 != 9: verl's metric differs in `flat` and `failed`
        assert noted == {"dropped": 2, "dropped_where_metric_differs": 2, "kept_where_metric_equal": 0}
    else:  # acc: equal in `flat`, `local` and `failed`
        assert noted == {"dropped": 2, "dropped_where_metric_differs": 0, "kept_where_metric_equal": 1}
    buffer._terminal_eviction_reasons(0, "dapo")  # classified once: nothing new to count
    assert noted["dropped"] == 2
    tq.kv_clear(partition_id="dapo", keys=keys)


def test_a_fatal_marker_stops_verls_sampling_loop_with_its_message(tq):
    put_group(tq, "fatalgood", [{"acc": 1.0}, {"acc": 0.0}], partition="val")
    put_group(tq, "fatalbad", [{"acc": 0.0}, {FATAL_KEY: "bot reward manager: no scorer for data_source='nope'"}],
              partition="val")
    buffer = arm(replay_buffer(None))
    with pytest.raises(VerlBotConfigError, match=r"1 of 4 finished val trajectories.*no scorer for data_source='nope'"):
        buffer.sample(global_steps=0, partition_id="val", batch_size=2)
    tq.kv_clear(partition_id="val", keys=[k for uid in ("fatalgood", "fatalbad") for k in [uid, f"{uid}_0_0",
                                                                                            f"{uid}_1_0"]])


@pytest.mark.timeout(180)
@pytest.mark.parametrize("armed", [False, True])
def test_verls_own_buffer_is_untouched_and_samples_trajectories_without_extra_fields(tq, armed):
    """A stock run's buffer: verl's class as verl wrote it (no verl-bot read); an armed buffer reads such
    trajectories without failing (no marker there)."""
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

    assert not any(getattr(vars(cls).get("_terminal_eviction_reasons"), "__wrapped__", None)
                   for cls in (ReplayBuffer, ReplayBufferAsync))
    keys = put_group(tq, f"bare{int(armed)}a", None) + put_group(tq, f"bare{int(armed)}b", None)
    buffer = arm(replay_buffer(None)) if armed else replay_buffer(None)
    batch, _ = buffer.sample(global_steps=0, partition_id="train", batch_size=2)
    assert sorted(batch.keys) == sorted(keys)
    tq.kv_clear(partition_id="train", keys=[*keys, f"bare{int(armed)}a", f"bare{int(armed)}b"])


def test_row_readers_follow_the_batch_order(tq):
    from verl.utils.transferqueue_utils import KVBatchMeta

    keys = put_group(
        tq, "rowsa", [{"scorer_failed": 1.0}, {"scorer_failed": 0.0}], partition="rows", data_source="react"
    )
    keys += put_group(tq, "rowsb", [{"scorer_failed": 1.0}], partition="rows", data_source="aime")
    tags = [{}, {}, {"is_padding": True}]
    batch = KVBatchMeta(partition_id="rows", keys=keys[::-1], tags=tags)
    rows = TQBatch(batch).rows()
    assert [r["data_source"] for r in rows] == ["aime", "react", "react"]
    assert [r["reward_extra_info"]["scorer_failed"] for r in rows] == [1.0, 0.0, 1.0]
    padding = TQBatch(batch).padding()
    assert padding.tolist() == [False, False, True]
    assert failed_mask(rows, padding).tolist() == [True, False, False]


def test_in_put_order_sorts_by_prompt_position_then_session_and_index():
    snapshot = {key: {"n": i} for i, key in enumerate(
        ["b_1_0", "a_0_1", "zz_0_0", "b_0_0", "a_10_0", "a_2_0", "a_0_0", "b_verl_bot_engine_failure"])}
    ordered = in_put_order(snapshot, ["b", "a"])  # "zz": a prompt it does not know, last
    assert list(ordered) == ["b_verl_bot_engine_failure", "b_0_0", "b_1_0", "a_0_0", "a_0_1", "a_2_0", "a_10_0",
                             "zz_0_0"]
    assert all(ordered[key] is snapshot[key] for key in snapshot)  # the same tags, only the order
    # within a group by the response's tokens first (which session drew which sample is the arrival order's)
    responses = {"a_0_0": (5, 1), "a_0_1": (4, 9, 9), "a_2_0": (5, 0), "a_10_0": (4, 9)}
    ordered = in_put_order(snapshot, ["b", "a"], responses)
    assert [k for k in ordered if k.startswith("a_")] == ["a_10_0", "a_0_1", "a_2_0", "a_0_0"]


def test_with_full_determinism_a_batch_has_its_rows_in_put_order_not_as_they_finished(tq):
    """Three prompts put in the order z, a, m (as the trainer puts a step's prompts: the dataloader's), their
    rollouts finished in another order: the armed, ordered buffer's batch is z's rollouts by their responses' tokens,
    then a's, then m's; verl's own (and an armed buffer without full_determinism) keeps the order they finished in."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    uids = ["ordz", "orda", "ordm"]
    finished = ["orda_1_0", "ordm_0_0", "ordz_1_0", "orda_0_0", "ordz_0_0", "ordm_1_0"]
    for key in finished:  # one at a time, as they finish; session 1 drew the smaller tokens
        response = torch.tensor([1, 2, 3]) if "_1_" in key else torch.tensor([1, 5, 3])
        fields = list_of_dict_to_tensordict([{"responses": response, "data_source": "toy"}])
        tag = {"status": "success", "global_steps": 0, "min_global_steps": 0, "max_global_steps": 0}
        tq.kv_batch_put(keys=[key], fields=fields, tags=[tag], partition_id="order")
    expected = ["ordz_1_0", "ordz_0_0", "orda_1_0", "orda_0_0", "ordm_1_0", "ordm_0_0"]
    for buffer, keys in ((arm(replay_buffer(None), ordered=True), expected), (replay_buffer(None), finished),
                         (arm(replay_buffer(None)), finished)):
        for uid in uids:  # a batch takes its prompts' keys out of TransferQueue: put for each buffer
            tq.kv_put(key=uid, partition_id="order", tag={"is_prompt": True, "status": "finished", "global_steps": 0})
        buffer._sync_metadata_from_transfer_queue()
        sampleable = buffer._sampleable_terminal_keys("order", buffer._terminal_eviction_reasons(0, "order"))
        selected, snapshot, _ = buffer._select_prompt_uids("order", sampleable, 3)
        batch = buffer._materialize_batch("order", selected, snapshot)
        assert batch.keys == keys
    tq.kv_clear(partition_id="order", keys=finished)


# two groups of rollouts, as each trainer holds them: (uid, prompt ids, response ids, token rewards, advantages, info)
ROLLOUTS = [
    ("ga", [5, 6], [7, 8, 9], [0.5, -0.5, 1.0], [1.0, 1.0, 1.0], {"score": 1.0}),
    ("ga", [5, 6], [7], [0.0], [-1.0], {"score": 0.0, "scorer_failed": 1.0}),
    ("gb", [4], [3, 2], [2.0, 2.0], [0.0, 0.0], {"score": 2.0}),
]


def legacy_view(rollouts) -> ProtoBatch:
    """`rollouts` as the legacy trainer's `DataProto`: prompts left-padded, responses right-padded."""
    import numpy as np
    from tensordict import TensorDict
    from verl import DataProto

    width_p, width_r = max(len(r[1]) for r in rollouts), max(len(r[2]) for r in rollouts)
    b = len(rollouts)
    fields = {name: torch.zeros(b, width_r) for name in ("rm_scores", "advantages")}
    prompts, responses = torch.zeros(b, width_p, dtype=torch.int64), torch.zeros(b, width_r, dtype=torch.int64)
    attention = torch.zeros(b, width_p + width_r, dtype=torch.int64)
    for i, (_, prompt, response, rewards, advantages, _) in enumerate(rollouts):
        prompts[i, width_p - len(prompt):] = torch.tensor(prompt)
        responses[i, : len(response)] = torch.tensor(response)
        attention[i, width_p - len(prompt): width_p + len(response)] = 1
        fields["rm_scores"][i, : len(rewards)] = torch.tensor(rewards)
        fields["advantages"][i, : len(advantages)] = torch.tensor(advantages)
    infos = np.empty(b, dtype=object)
    infos[:] = [r[5] for r in rollouts]
    return ProtoBatch(DataProto(
        batch=TensorDict({**fields, "prompts": prompts, "responses": responses, "attention_mask": attention,
                          "response_mask": attention[:, width_p:].clone()}, batch_size=b),
        non_tensor_batch={"uid": np.array([r[0] for r in rollouts], dtype=object), "reward_extra_info": infos,
                          "data_source": np.array(["toy"] * b, dtype=object)},
    ))


def test_both_trainers_batches_read_the_same_through_the_training_batch_interface(tq):
    """The same rollouts written as verl's v1 agent loop writes them to TransferQueue (nested, unpadded) and as the
    legacy trainer holds them (one right-padded `DataProto`) read the same through `TrainingBatch`: rows, ragged
    response-aligned fields, prompts, token records and per-token values (what every piece of verl-bot's step logic
    reads)."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict
    from verl.utils.transferqueue_utils import KVBatchMeta

    keys, fields = [], []
    for n, (uid, prompt, response, rewards, advantages, info) in enumerate(ROLLOUTS):
        keys.append(f"{uid}_{n}_0")
        fields.append({"uid": uid, "data_source": "toy", "extra_fields": {"reward_extra_info": info},
                       "prompts": torch.tensor(prompt), "responses": torch.tensor(response),
                       "response_mask": torch.ones(len(response), dtype=torch.int64),
                       "rm_scores": torch.tensor(rewards), "advantages": torch.tensor(advantages)})
    tq.kv_batch_put(keys=keys, fields=list_of_dict_to_tensordict(fields), partition_id="seam",
                    tags=[{"status": "success"} for _ in keys])
    v1 = TQBatch(KVBatchMeta(partition_id="seam", keys=keys, tags=[{} for _ in keys]))
    legacy = legacy_view(ROLLOUTS)
    for view in (v1, legacy):
        assert [r["uid"] for r in view.rows()] == ["ga", "ga", "gb"]
        assert [r["reward_extra_info"] for r in view.rows()] == [r[5] for r in ROLLOUTS]
        assert view.prompts() == [r[1] for r in ROLLOUTS] and view.prompts([2]) == [[4]]
        ragged = view.ragged(["responses", "rm_scores"], [0, 2])
        assert [t.tolist() for t in ragged["responses"]] == [[7, 8, 9], [3, 2]]
        assert [t.tolist() for t in ragged["rm_scores"]] == [[0.5, -0.5, 1.0], [2.0, 2.0]]
        assert view.padding().tolist() == [False, False, False] and view.sessions() is None
        records = record_rows(view)
        assert [(r["uid"], r["prompt_ids"], r["response_ids"], r["rewards"], r["advantages"]) for r in records] == [
            (uid, prompt, response, rewards, advantages) for uid, prompt, response, rewards, advantages, _ in ROLLOUTS]
        values = token_values(view)
        assert values["rewards"].tolist() == [0.5, -0.5, 1.0, 0.0, 2.0, 2.0]
        assert values["advantages"].tolist() == [1.0, 1.0, 1.0, -1.0, 0.0, 0.0]
    assert v1.keys() == keys and legacy.keys() == ["ga_0", "ga_1", "gb_0"]
    tq.kv_clear(partition_id="seam", keys=keys)
