"""The `bot` reward manager inside verl's own reward loop, and the dense vector's way to the estimator.

Everything here runs verl 0.9.1's code: its `RewardLoopWorker` builds the
manager from the registry and scores a real `DataProto`; verl's
`AgentLoopOutput.as_dict` (what the v1 trainer stores) and the reward
result into `rm_scores`; verl's `compute_advantage` runs the `bot` estimator.
"""

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

from tests.harness.manager import VOWELS, make_batch, reference_credit, reference_token_rewards, worker_for
from verl_bot.advantage.bot import bot_advantage
from verl_bot.errors import FATAL_KEY, VerlBotConfigError
from verl_bot_demo.scorers import toy_lint

RESPONSES = ["xyz qrst", "hello world", "aaa", "", "café 😀 ok", "zzz"]


class RewardServer(ThreadingHTTPServer):
    """A real REWARD_API server on loopback scoring with `toy_lint`; `mode` makes it fail on purpose."""

    def __init__(self, mode="ok"):
        self.mode, self.requests = mode, 0
        super().__init__(("127.0.0.1", 0), _Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802 - http.server's naming
        self.server.requests += 1
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        mode = self.server.mode
        if mode == "slow":
            time.sleep(3)
        if mode == "http500":
            self.send_response(500)
            self.end_headers()
            return
        items = []
        for item in body["items"]:
            verdict = toy_lint(item["prompt"], item["response"], item.get("ground_truth"), item.get("extra_info"))
            if mode == "nan":
                verdict["global"]["score"] = float("nan")
            items.append({"id": item.get("id"), **verdict, "error": None})
        payload = json.dumps({"items": items}).encode() if mode != "garbage" else b"<html>oops</html>"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def test_the_reference_by_hand(tokenizer):
    """The reference itself on a response whose tokens are known: "hello world" + EOS."""
    ids = tokenizer("hello world", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    pieces = [tokenizer.decode([i], skip_special_tokens=True) for i in ids]
    assert "".join(pieces) == "hello world" and pieces[-1] == ""
    g, local = reference_credit(tokenizer, ids)
    assert g == pytest.approx(0.4) and local[-1] == 0.0  # 3 vowels of 10 visible characters; the EOS gets no S
    for piece, s in zip(pieces[:-1], local[:-1], strict=True):
        assert s == pytest.approx(-sum(c in VOWELS for c in piece) / len(piece))


def test_worker_scores_dense_and_dense_vector_reaches_compute_advantage(tiny_model_dir, tokenizer):
    worker, config = worker_for(tiny_model_dir, "+reward.reward_kwargs.bot.w_local=0.5")
    data, rows = make_batch(tokenizer, RESPONSES)
    outputs = asyncio.run(worker.compute_score_batch(data))

    # 1. the manager: one reward per valid response token, r_t = w_g * G + w_s * S_t
    for out, ids in zip(outputs, rows, strict=True):
        assert len(out["reward_score"]) == len(ids)
        np.testing.assert_allclose(out["reward_score"], reference_token_rewards(tokenizer, ids, 1.0, 0.5))
    hello = outputs[1]["reward_score"]  # "hello world": vowel tokens are penalised below the others
    assert min(hello) < max(hello)
    assert outputs[1]["reward_extra_info"]["score"] == pytest.approx(2 * (1 - 3 / 10) - 1)
    assert set(outputs[0]["reward_extra_info"]) == {
        "score", "clean", "scorer_failed", "scorer_error", "scorer_error_msg", "flags", "solved", "acc", "local_signal"
    }
    # a local signal on some token: the responses with a vowel (toy_lint puts its spans on them)
    assert [o["reward_extra_info"]["local_signal"] for o in outputs] == [0.0, 1.0, 1.0, 0.0, 1.0, 0.0]
    assert [o["reward_extra_info"]["solved"] for o in outputs] == [1.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert [o["reward_extra_info"]["acc"] for o in outputs] == [1.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert [o["reward_extra_info"]["flags"] for o in outputs] == ["", "", "", "empty", "", ""]

    # 2. the v1 trainer's path: verl's AgentLoopOutput.as_dict builds the stored rm_scores
    stored = []
    for out, ids in zip(outputs, rows, strict=True):
        loop_output = AgentLoopOutput(
            prompt_ids=[1, 2], response_ids=ids, response_mask=[1] * len(ids), metrics=AgentLoopMetrics()
        )
        loop_output.reward_score = out["reward_score"]  # exactly what verl's agent loop assigns
        stored.append(loop_output.as_dict()["rm_scores"])
        assert loop_output.reward_score is out["reward_score"]
    for row, out in zip(stored, outputs, strict=True):
        torch.testing.assert_close(row, torch.tensor(out["reward_score"], dtype=torch.float32))

    # 3. the v1 trainer's advantage step on those rows, right-padded as verl pads rm_scores
    padded = torch.nn.utils.rnn.pad_sequence(stored, batch_first=True)
    padded = torch.nn.functional.pad(padded, (0, data.batch["responses"].shape[1] - padded.shape[1]))
    response_mask = data.batch["attention_mask"][:, data.batch["prompts"].shape[1] :]
    uids = np.array(["a", "a", "a", "b", "b", "b"], dtype=object)
    batch = DataProto(
        batch=TensorDict(
            {"token_level_rewards": padded, "token_level_scores": padded, "response_mask": response_mask},
            batch_size=len(padded),
        ),
        non_tensor_batch={"uid": uids},
    )
    result = compute_advantage_for_multi_trajectories(
        batch, batch_keys=[f"{u}_{i}_0" for i, u in enumerate(uids)], adv_estimator="bot", config=config.algorithm
    )
    torch.testing.assert_close(result.batch["advantages"], bot_advantage(padded, response_mask, uids))
    torch.testing.assert_close(result.batch["token_level_rewards"], padded)  # the dense vector survived
    assert (result.batch["advantages"][1] != result.batch["advantages"][1, 0]).any()  # token-level, not one scalar


def test_scalar_reward_keeps_verls_own_path(tiny_model_dir):
    output = AgentLoopOutput(
        prompt_ids=[1], response_ids=[5, 6, 7], response_mask=[1, 1, 1], metrics=AgentLoopMetrics()
    )
    output.reward_score = 2.5
    torch.testing.assert_close(output.as_dict()["rm_scores"], torch.tensor([0.0, 0.0, 2.5]))


def test_dense_vector_of_the_wrong_length_stops_the_run_through_the_fatal_marker():
    """verl would swallow an exception here (group tagged failed, training goes on): zeros + the marker instead."""
    output = AgentLoopOutput(
        prompt_ids=[1], response_ids=[5, 6, 7], response_mask=[1, 1, 1], metrics=AgentLoopMetrics()
    )
    info = {"score": 1.0}
    output.extra_fields["reward_extra_info"] = info
    output.reward_score = [1.0, 2.0]
    stored = output.as_dict()
    torch.testing.assert_close(stored["rm_scores"], torch.zeros(3))
    message = stored["extra_fields"]["reward_extra_info"][FATAL_KEY]
    assert "got 2 token rewards (shape (2,)) for a response of 3 tokens" in message
    assert stored["extra_fields"]["reward_extra_info"]["scorer_failed"] == 1.0
    assert FATAL_KEY not in info  # a copy: multi-output rows share the dict


def test_http_scorer_round_robin_over_servers(tiny_model_dir, tokenizer):
    servers = [RewardServer(), RewardServer()]
    urls = ",".join(s.url for s in servers)
    worker, _ = worker_for(tiny_model_dir, f"+reward.reward_kwargs.bot.scorers.remote='{urls}'")
    data, rows = make_batch(tokenizer, RESPONSES, data_source="remote")
    outputs = asyncio.run(worker.compute_score_batch(data))
    assert [s.requests for s in servers] == [3, 3]
    for out, ids in zip(outputs, rows, strict=True):
        assert out["reward_extra_info"]["scorer_failed"] == 0.0
        np.testing.assert_allclose(out["reward_score"], reference_token_rewards(tokenizer, ids))


@pytest.mark.parametrize("mode", ["http500", "garbage", "nan", "slow", "down"])
def test_failing_scorer_gets_the_sentinel_and_a_flag(tiny_model_dir, tokenizer, mode):
    url = "http://127.0.0.1:9" if mode == "down" else RewardServer(mode).url
    worker, _ = worker_for(
        tiny_model_dir,
        f"+reward.reward_kwargs.bot.scorers.remote='{url}'",
        "+reward.reward_kwargs.bot.timeout_s=1",
        "+reward.reward_kwargs.bot.retries=1",
        "+reward.reward_kwargs.bot.failure_score=-0.5",
    )
    data, rows = make_batch(tokenizer, RESPONSES[:2], data_source="remote")
    outputs = asyncio.run(worker.compute_score_batch(data))
    for out, ids in zip(outputs, rows, strict=True):
        assert out["reward_score"] == [-0.5] * len(ids)
        assert out["reward_extra_info"]["scorer_failed"] == 1.0


def test_python_scorer_that_raises_gets_the_sentinel(tiny_model_dir, tokenizer):
    worker, _ = worker_for(tiny_model_dir, "+reward.reward_kwargs.bot.scorers.boom=python:json:loads")
    data, rows = make_batch(tokenizer, RESPONSES[:1], data_source="boom")
    (out,) = asyncio.run(worker.compute_score_batch(data))
    assert out["reward_score"] == [0.0] * len(rows[0]) and out["reward_extra_info"]["scorer_failed"] == 1.0


def test_unknown_data_source_carries_the_fatal_marker_and_unknown_knob_is_a_clear_error(tiny_model_dir, tokenizer):
    worker, _ = worker_for(tiny_model_dir)
    data, rows = make_batch(tokenizer, RESPONSES[:1], data_source="nobody")
    (out,) = asyncio.run(worker.compute_score_batch(data))
    assert out["reward_score"] == [0.0] * len(rows[0])
    assert "no scorer for data_source='nobody'" in out["reward_extra_info"][FATAL_KEY]
    with pytest.raises(VerlBotConfigError, match=r"^unknown \+reward.reward_kwargs.bot.w_lcoal: the bot manager"):
        worker_for(tiny_model_dir, "+reward.reward_kwargs.bot.w_lcoal=1")


def test_token_level_false_gives_the_global_score_as_verls_scalar(tiny_model_dir, tokenizer):
    worker, _ = worker_for(tiny_model_dir, "+reward.reward_kwargs.bot.token_level=false")
    data, rows = make_batch(tokenizer, ["hello world"])
    (out,) = asyncio.run(worker.compute_score_batch(data))
    assert out["reward_score"] == pytest.approx(2 * (1 - 3 / 10) - 1)
    loop_output = AgentLoopOutput(
        prompt_ids=[1], response_ids=rows[0], response_mask=[1] * len(rows[0]), metrics=AgentLoopMetrics()
    )
    loop_output.reward_score = out["reward_score"]
    rm_scores = loop_output.as_dict()["rm_scores"]
    assert rm_scores[-1] == pytest.approx(out["reward_score"]) and (rm_scores[:-1] == 0).all()


def test_dapo_overlong_shaping_is_added_to_the_global_score(tiny_model_dir, tokenizer):
    from verl_bot.credit.token_credit import overlong_penalty

    # max 10 tokens, cache zone 4: no penalty up to 6 tokens, then -1/4 per token, -1 at 10
    assert [overlong_penalty(n, 10, 4) for n in (5, 6, 7, 8, 10)] == [0.0, 0.0, -0.25, -0.5, -1.0]
    assert overlong_penalty(10, 10, 4, penalty_factor=0.5) == -0.5
    worker, _ = worker_for(
        tiny_model_dir,
        "+reward.reward_kwargs.overlong_buffer_cfg.enable=true",
        "+reward.reward_kwargs.overlong_buffer_cfg.len=4",
        "+reward.reward_kwargs.max_resp_len=6",
    )
    data, rows = make_batch(tokenizer, ["xyz qrst"])  # more than 6 tokens with its EOS
    (out,) = asyncio.run(worker.compute_score_batch(data))
    expected_penalty = overlong_penalty(len(rows[0]), 6, 4)
    assert expected_penalty < 0
    assert out["reward_extra_info"]["overlong"] == pytest.approx(expected_penalty)
    assert out["reward_extra_info"]["score"] == pytest.approx(1.0 + expected_penalty)
    np.testing.assert_allclose(out["reward_score"], reference_token_rewards(tokenizer, rows[0], shift=expected_penalty))
    with pytest.raises(ValueError, match="max_resp_len"):
        worker_for(tiny_model_dir, "+reward.reward_kwargs.overlong_buffer_cfg.enable=true")
