"""Named reward streams: built by the `bot` manager, stored by verl's `as_dict`, read by a stream estimator."""

import asyncio
import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

from tests.harness.manager import make_batch, reference_credit, reference_token_rewards, worker_for
from verl_bot.advantage.pass_ import pass_advantage
from verl_bot.advantage.pure import pure_advantage
from verl_bot.credit.spans import token_char_spans
from verl_bot.credit.streams import declare_streams, step_end_mask, streams_for, token_streams, use_streams
from verl_bot.credit.verdict import verdict_format, verdict_outcome
from verl_bot.errors import FATAL_KEY
from verl_bot_demo.scorers import toy_lint

RESPONSES = ["xyz\n\nqrst", "hello\n\n\nworld\nend", "aaa", "", "zz\n\n"]


def brute_force_step_ends(text, spans):
    """Slow reference: a step ends at a blank-line run (two or more newlines with nothing but spaces, tabs or \\r
    between them) that has visible text before it (since the last step's end) and after it; the token holding the
    run's last newline is marked, and the last token (which ends the last step)."""
    ends, seen_text, i = set(), False, 0
    while i < len(text):
        if text[i] != "\n":
            seen_text = seen_text or not text[i].isspace()
            i += 1
            continue
        j, newlines, last_newline = i, 0, i
        while j < len(text) and text[j] in "\n \t\r":
            if text[j] == "\n":
                newlines, last_newline = newlines + 1, j
            j += 1
        if newlines >= 2 and seen_text and text[j:].strip():
            ends.update(t for t, (s, e) in enumerate(spans) if s <= last_newline < e)
            seen_text = False
        i = last_newline + 1
    if len(spans):
        ends.add(len(spans) - 1)
    return [1.0 if t in ends else 0.0 for t in range(len(spans))]


def test_step_end_mask_marks_blank_line_tokens_and_the_last_token(tokenizer):
    for text in [*RESPONSES, "a\n\n\n\nb\n\nc d", "\n\n\n", "no steps at all", "ü\n\nü", "\n\nlead\n\nx",
                 "a\r\n \r\nb\n \n\nc", "a\n\n  \n\nb  \n\n"]:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        decoded, spans = token_char_spans(tokenizer, ids)
        mask = step_end_mask(spans, decoded)
        assert mask.tolist() == brute_force_step_ends(decoded, spans), text
    assert step_end_mask(np.zeros((0, 2), dtype=np.int64), "").tolist() == []


def test_verdict_outcome_reads_solved_correct_compiled_in_that_order():
    assert verdict_outcome({"info": {"correct": True}}) == 1.0
    assert verdict_outcome({"info": {"compiled": False, "rendered": True}}) == 0.0
    assert verdict_outcome({"info": {"solved": 1, "correct": False}}) == 1.0
    assert verdict_outcome({"info": {"correct": True}, "error": "bad item"}) == 0.0
    assert math.isnan(verdict_outcome({"info": {}}))
    # a failed scorer's outcome and format: tests/unit/test_token_credit.py


def test_verdict_format_reads_the_format_part_and_is_zero_without_one():
    assert verdict_format({"global": {"score": 1.2, "parts": {"answer": 1.0, "format": 0.2}}}) == 0.2
    assert verdict_format({"global": {"score": 0.5, "parts": {"clean": 0.75}}}) == 0.0  # toy_lint
    assert verdict_format({"global": {"score": 0.0, "parts": {"format": -1.0}}, "error": "bad item"}) == 0.0


def test_streams_are_declared_only_by_the_stream_estimators():
    assert streams_for("pure") == ("local", "step_end", "outcome")
    assert streams_for("pass") == ("local", "outcome", "format")
    assert streams_for("bot") == () and streams_for("grpo") == ()


def test_manager_sends_streams_for_pure_and_pure_runs_through_verls_compute_advantage(tiny_model_dir, tokenizer):
    worker, config = worker_for(tiny_model_dir, "algorithm.adv_estimator=pure", "+reward.reward_kwargs.bot.w_local=0.5")
    data, rows = make_batch(tokenizer, RESPONSES, uids=["a", "a", "a", "b", "b"])
    outputs = asyncio.run(worker.compute_score_batch(data))

    stored = []
    for out, ids, text in zip(outputs, rows, RESPONSES, strict=True):
        score = out["reward_score"]
        # 1. the composed vector is unchanged; the streams ride next to it
        np.testing.assert_allclose(score["token_rewards"], reference_token_rewards(tokenizer, ids, 1.0, 0.5))
        np.testing.assert_allclose(score["streams"]["local"], reference_credit(tokenizer, ids)[1])
        decoded, spans = token_char_spans(tokenizer, ids)
        assert score["streams"]["step_end"] == brute_force_step_ends(decoded, spans)
        solved = float(bool(text.strip()) and not any(c in "aeiou" for c in text))  # toy_lint: text, no vowel
        assert score["streams"]["outcome"] == [0.0] * (len(ids) - 1) + [solved] * bool(ids)
        assert out["reward_extra_info"]["solved"] == solved

        # 2. verl's AgentLoopOutput.as_dict stores each stream as a trajectory field
        loop_output = AgentLoopOutput(
            prompt_ids=[1, 2], response_ids=ids, response_mask=[1] * len(ids), metrics=AgentLoopMetrics()
        )
        loop_output.reward_score = score
        fields = loop_output.as_dict()
        torch.testing.assert_close(fields["rm_scores"], torch.tensor(score["token_rewards"], dtype=torch.float32))
        for name in ("local", "step_end", "outcome"):
            torch.testing.assert_close(fields[f"bot_stream_{name}"], torch.tensor(score["streams"][name]))
        assert "bot_stream_global" not in fields
        stored.append(fields)

    # 3. verl's compute_advantage with adv_estimator=pure, the streams active as the trainer wrapper makes them
    width = max(len(r) for r in rows)

    def padded(key):
        out = torch.zeros(len(rows), width)
        for i, fields in enumerate(stored):
            out[i, : fields[key].numel()] = fields[key]
        return out

    mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in rows])
    uids = np.array(["a", "a", "a", "b", "b"], dtype=object)
    batch = DataProto(
        batch=TensorDict({"token_level_rewards": padded("rm_scores"), "response_mask": mask}, batch_size=len(rows)),
        non_tensor_batch={"uid": uids},
    )
    streams = {name: padded(f"bot_stream_{name}") for name in ("local", "step_end", "outcome")}
    with use_streams(streams):
        result = compute_advantage_for_multi_trajectories(
            batch, batch_keys=[f"{u}_{i}_0" for i, u in enumerate(uids)], adv_estimator="pure", config=config.algorithm
        )
    solved = torch.tensor([out["reward_extra_info"]["solved"] for out in outputs])
    expected = pure_advantage(streams["local"], streams["step_end"], solved, mask, uids)
    torch.testing.assert_close(result.batch["advantages"], expected[0])
    assert (result.batch["advantages"][:3] != 0).any()


def toy_lint_with_format(prompt, response, ground_truth=None, extra_info=None):
    """toy_lint plus a format part, as the math server reports one: +0.2 for an even length, -1 for an odd one."""
    verdict = toy_lint(prompt, response, ground_truth, extra_info)
    verdict["global"]["parts"]["format"] = 0.2 if len(response) % 2 == 0 else -1.0
    return verdict


@pytest.mark.parametrize(
    "scorer", ["builtin:toy_lint", "python:tests.component.test_reward_streams:toy_lint_with_format"]
)
def test_manager_sends_the_format_stream_for_pass(tiny_model_dir, tokenizer, scorer):
    worker, config = worker_for(
        tiny_model_dir, "algorithm.adv_estimator=pass", f"+reward.reward_kwargs.bot.scorers.toy_lint={scorer}"
    )
    data, rows = make_batch(tokenizer, RESPONSES, uids=["a", "a", "a", "b", "b"])
    outputs = asyncio.run(worker.compute_score_batch(data))
    formats = []
    for out, ids in zip(outputs, rows, strict=True):
        streams = out["reward_score"]["streams"]
        assert sorted(streams) == ["format", "local", "outcome"]
        text, _ = token_char_spans(tokenizer, ids)
        fmt = toy_lint_with_format("", text)["global"]["parts"]["format"] if scorer.startswith("python") else 0.0
        assert streams["format"] == [0.0] * (len(ids) - 1) + [fmt] * bool(ids)  # on the last token
        assert out["reward_extra_info"].get("format", 0.0) == fmt
        formats.append(fmt)
    assert (set(formats) == {0.2, -1.0}) is scorer.startswith("python")

    # verl's compute_advantage with adv_estimator=pass reads them
    width = max(len(r) for r in rows)
    mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in rows])
    padded = [{k: v + [0.0] * (width - len(v)) for k, v in o["reward_score"]["streams"].items()} for o in outputs]
    streams = {name: torch.tensor([row[name] for row in padded]) for name in ("local", "outcome", "format")}
    uids = np.array(["a", "a", "a", "b", "b"], dtype=object)
    batch = DataProto(
        batch=TensorDict({"token_level_rewards": torch.zeros(5, width), "response_mask": mask}, batch_size=5),
        non_tensor_batch={"uid": uids},
    )
    with use_streams(streams):
        result = compute_advantage_for_multi_trajectories(
            batch, batch_keys=[f"{u}_{i}_0" for i, u in enumerate(uids)], adv_estimator="pass", config=config.algorithm
        )
    solved = torch.tensor([out["reward_extra_info"]["solved"] for out in outputs])
    expected = pass_advantage(streams["local"], solved, torch.tensor(formats), mask, uids)
    torch.testing.assert_close(result.batch["advantages"], expected.advantages)


def test_manager_sends_no_streams_for_other_estimators(tiny_model_dir, tokenizer):
    worker, _ = worker_for(tiny_model_dir, "algorithm.adv_estimator=bot")
    data, _ = make_batch(tokenizer, RESPONSES[:2])
    outputs = asyncio.run(worker.compute_score_batch(data))
    assert all(isinstance(out["reward_score"], list) for out in outputs)


def test_a_stream_of_the_wrong_length_stops_the_run_through_the_fatal_marker():
    output = AgentLoopOutput(prompt_ids=[1], response_ids=[5, 6], response_mask=[1, 1], metrics=AgentLoopMetrics())
    output.reward_score = {"token_rewards": [0.1, 0.2], "streams": {"local": [0.0]}}
    stored = output.as_dict()
    message = stored["extra_fields"]["reward_extra_info"][FATAL_KEY]
    assert "stream 'local': 1 values for a response of 2 tokens" in message
    torch.testing.assert_close(stored["rm_scores"], torch.zeros(2))
    torch.testing.assert_close(stored["bot_stream_local"], torch.zeros(2))


def test_token_streams_builds_every_stream_by_name():
    spans = np.array([[0, 2], [2, 4], [4, 5]])
    streams = token_streams(
        ("global", "local", "step_end", "outcome", "format"),
        0.25,
        np.array([0.0, -1.0, 0.5]),
        spans,
        "ab\n\nc",
        1.0,
        format_score=-1.0,
    )
    assert streams == {
        "global": [0.0, 0.0, 0.25],
        "local": [0.0, -1.0, 0.5],
        "step_end": [0.0, 1.0, 1.0],
        "outcome": [0.0, 0.0, 1.0],
        "format": [0.0, 0.0, -1.0],
    }
    assert token_streams(("global", "outcome"), 0.25, np.zeros(0), np.zeros((0, 2), dtype=np.int64), "", 1.0) == {
        "global": [],
        "outcome": [],
    }
    with pytest.raises(ValueError, match="unknown reward streams"):
        declare_streams("x", ("local", "nope"))
