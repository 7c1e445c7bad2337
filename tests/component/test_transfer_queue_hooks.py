"""verl's replay buffer and the trainer's batch fields on a real TransferQueue (Ray started in this process).

Trajectories are written the way verl's agent loop writes them (`list_of_dict_to_tensordict`, the same
tags); then verl 0.9.1's own `ReplayBuffer` classifies them:

- DAPO's dynamic sampling on `acc` (what the recipes filter on) drops groups whose outcome is uniform, while
  the continuous `score` keeps almost every group (issue: DAPO filtered on the score and dropped nothing);
- a trajectory carrying verl-bot's fatal marker stops sampling with the marker's message (the buffer of a
  verl-bot run); verl's own buffer classes are untouched and sample trajectories without `extra_fields`;
- the hooks' row readers see each row's extra_fields and data_source in batch order, and padding tags;
- with `rollout.full_determinism` an armed buffer gives a batch its rows in the order the prompts were put, each
  group's by session, where verl's follows the order the rollouts finished.
"""

import tempfile

import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import compose_verl_config
from verl_bot.errors import FATAL_KEY, VerlBotConfigError
from verl_bot.hooks.v1.compute_advantage import fetch_rows, padding_mask
from verl_bot.hooks.v1.replay_buffer import arm, in_put_order
from verl_bot.step.context import failed_mask


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
    rows = fetch_rows(batch)
    assert [r["data_source"] for r in rows] == ["aime", "react", "react"]
    assert [r["reward_extra_info"]["scorer_failed"] for r in rows] == [1.0, 0.0, 1.0]
    padding = padding_mask(batch)
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
