"""verl's legacy trainer (`trainer.use_v1=false`) through verl-bot's adapter (verl_bot/hooks/legacy/), on verl's
own code: its agent loop's `_postprocess` stacking real padded outputs, its `ray_trainer.compute_advantage` and
`compute_data_metrics` on a `DataProto`, its config composed by Hydra. Expected values are written by hand.

The legacy trainer end to end (vLLM rollout, 2 steps): tests/e2e/test_legacy_trainer.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopWorker, _InternalAgentLoopOutput
from verl.trainer.ppo import ray_trainer

from tests.conftest import compose_verl_config
from tests.harness.batches import legacy_batch
from verl_bot.errors import FATAL_KEY, VerlBotConfigError
from verl_bot.hooks.legacy import trainer as legacy_trainer
from verl_bot.hooks.legacy.agent_loop import DENSE_KEY
from verl_bot.training.rows import DENSE_MARK, row_checksum

BOT = ["algorithm.adv_estimator=bot", "reward.reward_manager.name=bot", "trainer.use_v1=false"]
PROMPT, RESPONSE = 3, 5  # padded widths


def padded_output(prompt: list[int], response: list[int], info: dict, dense=None) -> _InternalAgentLoopOutput:
    """One output as verl's legacy `_agent_loop_postprocess` pads it (prompt left, response right), with what
    verl-bot's wrapper of it leaves: a float `reward_score`, the dense one in `extra_fields`."""
    p_pad, r_pad = PROMPT - len(prompt), RESPONSE - len(response)
    prompt_ids = torch.tensor([[0] * p_pad + prompt])
    response_ids = torch.tensor([response + [0] * r_pad])
    attention = torch.tensor([[0] * p_pad + [1] * len(prompt) + [1] * len(response) + [0] * r_pad])
    extra = {"reward_extra_info": info, **({DENSE_KEY: dense} if dense is not None else {})}
    return _InternalAgentLoopOutput(
        prompt_ids=prompt_ids, response_ids=response_ids, input_ids=torch.cat([prompt_ids, response_ids], 1),
        position_ids=torch.clamp(attention.cumsum(-1) - 1, min=0), response_mask=attention[:, PROMPT:],
        attention_mask=attention, reward_score=0.0, num_turns=2, metrics=AgentLoopMetrics(), extra_fields=extra,
    )


@contextlib.contextmanager
def registered(trainer):
    """`trainer` is this process's legacy trainer inside the block (what `RayPPOTrainer.__init__`'s hook does)."""
    legacy_trainer.register(trainer)
    try:
        yield trainer
    finally:
        legacy_trainer._trainer.clear()


@pytest.fixture(scope="module")
def worker():
    """What verl's `_postprocess` reads of its worker: the config and the reward-loop handles."""
    return SimpleNamespace(config=compose_verl_config(BOT), reward_loop_worker_handles=["streaming"])


def test_dense_rows_and_streams_replace_verls_last_token_scalar(worker):
    outputs = [
        padded_output([5, 6], [7, 8, 9], {"score": 1.0, "local_signal": 1.0},
                      {"token_rewards": [0.5, -0.5, 1.0], "streams": {"local": [0.0, -1.0, 0.0]}}),
        padded_output([5], [7, 8, 9, 10, 11], {"score": -1.0, "scorer_error_msg": "x"},  # another key set
                      {"token_rewards": [1.0, 2.0, 3.0, 4.0, 5.0], "streams": {"local": [0.0] * 5}}),
    ]
    out = AgentLoopWorker._postprocess(worker, outputs)
    assert out.batch["rm_scores"].tolist() == [[0.5, -0.5, 1.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0, 5.0]]
    assert out.batch["bot_stream_local"].tolist() == [[0.0, -1.0, 0.0, 0.0, 0.0], [0.0] * 5]
    # each row keeps its own dict; nothing flattened by the first row's keys, no dense reward left behind
    assert list(out.non_tensor_batch["reward_extra_info"]) == [
        {"score": 1.0, "local_signal": 1.0}, {"score": -1.0, "scorer_error_msg": "x"}]
    assert "score" not in out.non_tensor_batch and DENSE_KEY not in out.non_tensor_batch
    assert out.meta_info["reward_extra_keys"] == []
    # the advantage step checks the hook fired and the rows arrive as stored: each row's checksum
    assert out.non_tensor_batch[DENSE_MARK].tolist() == [row_checksum(torch.tensor([0.5, -0.5, 1.0])),
                                                         row_checksum(torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]))]


def test_a_fatal_marker_or_a_vector_of_the_wrong_length_stops_the_run(worker):
    fatal = padded_output([5], [7, 8], {FATAL_KEY: "no scorer for data_source='x'"}, [0.0, 0.0])
    with pytest.raises(VerlBotConfigError, match="no scorer for data_source='x'"):
        AgentLoopWorker._postprocess(worker, [fatal])
    short = padded_output([5], [7, 8, 9], {"score": 0.0}, [1.0, 2.0])  # 2 rewards, 3 tokens
    with pytest.raises(VerlBotConfigError, match="2 token rewards .* response of 3 tokens"):
        AgentLoopWorker._postprocess(worker, [short])


def test_a_scalar_run_is_verls_own_postprocess():
    plain = SimpleNamespace(config=compose_verl_config(["trainer.use_v1=false"]), reward_loop_worker_handles=["x"])
    item = padded_output([5], [7, 8], {"acc": 1.0})
    item.reward_score = 2.0
    out = AgentLoopWorker._postprocess(plain, [item])
    assert out.batch["rm_scores"].tolist() == [[0.0, 2.0, 0.0, 0.0, 0.0]]  # verl's scalar on the last token
    assert out.non_tensor_batch["acc"].tolist() == [1.0]  # verl flattens reward_extra_info itself


def test_a_multi_output_loop_stops_the_legacy_run(worker):
    with pytest.raises(VerlBotConfigError, match="returned 2 outputs for one sample .* trainer.use_v1=true"):
        asyncio.run(AgentLoopWorker._agent_loop_postprocess(worker, [object(), object()], False))


def test_a_dense_step_whose_rows_went_past_the_agent_loop_hook_stops_the_run():
    """Rows of the `bot` manager without the mark of verl-bot's `_postprocess` hook (a verl whose agent loop
    stacks its outputs another way: one scalar per response) stop the advantage step, naming the hook."""
    trainer = SimpleNamespace(config=compose_verl_config(BOT), global_steps=1, total_training_steps=2)
    data = legacy_batch([[1.0, 1.0], [0.0, 0.0]], ["a", "a"], [False, False], marks=None)
    with registered(trainer), pytest.raises(VerlBotConfigError, match=r"went past AgentLoopWorker._postprocess .*"
                                                                  r"\(verl_bot/hooks/legacy/agent_loop.py\)"):
        ray_trainer.compute_advantage(data, "bot", config=trainer.config.algorithm)


def test_legacy_advantages_are_bot_of_the_rows_whose_scorer_answered():
    trainer = SimpleNamespace(config=compose_verl_config(BOT), global_steps=1, total_training_steps=2)
    # group a: three rollouts, the third failed; group b: two rollouts, one failed (the other is left alone)
    data = legacy_batch([[1.0, 1.0], [0.0, 0.0], [9.0, 9.0], [2.0], [5.0]], ["a", "a", "a", "b", "b"],
                        [False, False, True, False, True])
    with registered(trainer):
        out = ray_trainer.compute_advantage(data, "bot", config=trainer.config.algorithm)
        metrics = ray_trainer.compute_data_metrics(out, use_critic=False)
    # group a without its failed row: 4 tokens of weight 1/(K L) = 1/4, rewards 1,1,0,0: mean 0.5, std 0.5
    # (the bag's weighted std, BoT's Eq. 3, + its eps 1e-6): A = +1 on row 0, -1 on row 1
    expected = torch.tensor([[1.0, 1.0], [-1.0, -1.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    torch.testing.assert_close(out.batch["advantages"], expected, atol=1e-5, rtol=0)
    assert metrics["verl_bot/scorer_failed_rows"] == 2.0 and metrics["verl_bot/zero_advantage_rows"] == 3.0
    assert metrics["reward/scorer_failed/mean"] == pytest.approx(2 / 5)
    assert data.non_tensor_batch["uid"].tolist() == ["a", "a", "a", "b", "b"]  # the caller's uids back


@pytest.mark.parametrize("overrides, message", [
    (["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"],
     "algorithm.filter_groups.enable=true on a legacy trainer"),
])
def test_what_the_legacy_trainer_cannot_run_is_refused_before_ray(overrides, message):
    from verl_bot.launch.trainer_modes import trainer_mode_problem

    assert message in trainer_mode_problem(compose_verl_config([*BOT, *overrides]), "legacy")
    assert trainer_mode_problem(compose_verl_config([*BOT, *overrides]), "v1") is None  # v1: runs
    assert trainer_mode_problem(compose_verl_config(["algorithm.adv_estimator=grail"]), "legacy") is None


def test_verl_090s_legacy_trainer_on_the_cpu_is_refused_before_ray_without_flash_attn(monkeypatch):
    """verl 0.9.0's legacy trainer unpads with flash-attn (its `attention_utils` has no torch fallback): found by
    training on it here, where the run stopped after its first rollout; v1 and verl 0.9.1 run."""
    import verl

    from verl_bot.launch.trainer_modes import trainer_mode_problem

    legacy_cpu = compose_verl_config(["trainer.use_v1=false", "trainer.device=cpu"])
    assert trainer_mode_problem(legacy_cpu, "legacy") is None  # verl 0.9.1
    monkeypatch.setattr(verl, "__version__", "0.9.0")
    assert "trainer.use_v1=false on the CPU with verl 0.9.0" in trainer_mode_problem(legacy_cpu, "legacy")
    assert trainer_mode_problem(compose_verl_config(["trainer.device=cpu"]), "v1") is None  # v1
    assert trainer_mode_problem(compose_verl_config(["trainer.use_v1=false"]), "legacy") is None  # a GPU node


def test_without_a_legacy_verl_bot_trainer_the_functions_are_verls():
    data = legacy_batch([[1.0, 1.0], [0.0, 0.0]], ["a", "a"], [False, True])
    out = ray_trainer.compute_advantage(data, "grpo", config=compose_verl_config(BOT).algorithm)
    # verl's GRPO on both rows (no exclusion without a verl-bot trainer): scores 2 and 0, mean 1, std sqrt(2)
    expected = torch.tensor([1.0, -1.0]) / (2**0.5 + 1e-6)
    torch.testing.assert_close(out.batch["advantages"][:, 0], expected)


def test_the_legacy_step_sends_its_token_panel_to_verls_trackers(tokenizer, tmp_path, monkeypatch):
    """The legacy `fit` makes verl's `Tracking` itself: the step's panel and histograms reach real wandb (offline)
    and TensorBoard files through it, at the step's number, from the step's `DataProto`."""
    from tests.harness.trackers import offline_trackers, tensorboard_panels, wandb_panels

    config = compose_verl_config([*BOT, "trainer.logger=[wandb,tensorboard]", "trainer.total_training_steps=2"])
    trainer = SimpleNamespace(config=config, global_steps=1, total_training_steps=2, tokenizer=tokenizer)
    texts = ["say a", "say b"]
    prompts = [tokenizer.encode(t) for t in texts]
    # G = 1 and 0 (w_g = w_s = 1): r_t = G + S_t; S_t on the masked tokens: -0.5, 0 | 0, 0 | +0.5 | -1, 0
    rollouts = [(0, [1.0, 0.5, 1.0], 1.0), (0, [1.0, 1.0], 1.0), (1, [0.5], 0.0), (1, [-1.0, 0.0], 0.0)]
    width_p, width_r = max(len(p) for p in prompts), 3
    batch = {name: torch.zeros(4, width_r) for name in ("rm_scores", "advantages", "returns")}
    prompt_ids = torch.zeros(4, width_p, dtype=torch.int64)
    response_ids = torch.zeros(4, width_r, dtype=torch.int64)
    attention = torch.zeros(4, width_p + width_r, dtype=torch.int64)
    for i, (g, rewards, _) in enumerate(rollouts):
        prompt_ids[i, width_p - len(prompts[g]):] = torch.tensor(prompts[g])
        attention[i, width_p - len(prompts[g]): width_p + len(rewards)] = 1
        response_ids[i, : len(rewards)] = torch.tensor(tokenizer.encode("x" * len(rewards))[: len(rewards)])
        batch["rm_scores"][i, : len(rewards)] = torch.tensor(rewards)
        batch["advantages"][i, : len(rewards)] = torch.tensor(rewards) - 0.5
    infos = np.empty(4, dtype=object)
    infos[:] = [{"score": score} for _, _, score in rollouts]
    data = DataProto(
        batch=TensorDict({**batch, "token_level_rewards": batch["rm_scores"].clone(),
                          "token_level_scores": batch["rm_scores"].clone(), "prompts": prompt_ids,
                          "responses": response_ids, "attention_mask": attention,
                          "response_mask": attention[:, width_p:].clone()}, batch_size=4),
        non_tensor_batch={"uid": np.array(["a", "a", "b", "b"], dtype=object), "reward_extra_info": infos,
                          "data_source": np.array(["toy"] * 4, dtype=object)},
    )
    with offline_trackers(tmp_path, monkeypatch, ["wandb", "tensorboard"]) as trackers, registered(trainer):
        ray_trainer.compute_data_metrics(data, use_critic=False)
        trackers.log({"reward/score/mean": 0.5}, step=1)  # verl's scalars of the step: the panel goes first
    shown = wandb_panels(tmp_path)
    assert list(shown) == [1]
    counts, bins = shown[1]["histograms"]["verl_bot/S_t"]
    assert sum(counts) == 8 and (bins[0], bins[-1]) == pytest.approx((-1.0, 0.5))  # 8 response tokens
    assert "say a" in shown[1]["html"] and "say b" in shown[1]["html"]
    texts_tb, histograms, scalars = tensorboard_panels(tmp_path / "tb")
    assert list(texts_tb) == [1] and histograms["verl_bot/A_t"][1].num == 8 and "reward/score/mean" in scalars
