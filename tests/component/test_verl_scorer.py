"""verl's own reward functions as scorers of the `bot` manager, inside verl's real reward loop.

verl 0.9.1's `RewardLoopWorker` builds the manager the way the trainer does (verl's `load_reward_manager`
loads `reward.custom_reward_function` or hands over `default_compute_score`); the manager scores real
`DataProto` rows. Sync functions run in real worker processes; math-verify (which needs the main thread of its
process for `signal.alarm`) and a hung call show why.
"""

import asyncio
import re

import numpy as np
import pytest
from verl.utils.reward_score import default_compute_score, gsm8k

from tests.harness.manager import make_batch, token_local, token_pieces, worker_for
from verl_bot.credit.verdict import InvalidVerdict
from verl_bot.errors import FATAL_KEY
from verl_bot.rewards.verl_functions import default_data_sources, default_knows
from verl_bot.rewards.verl_scorer import verdict_from_result
from verl_bot_demo.scorers import toy_lint

# A user's verl reward function file: verl's signature, a dict with parts and a local span, and the
# behaviours the manager must handle (math-verify, a hang, "not my data source", a crash).
CUSTOM_FN = """
import time

def compute_score(data_source, solution_str, ground_truth, extra_info=None, penalty=-1.0):
    if data_source == "mathv":
        from math_verify import parse, verify  # signal.alarm inside: main thread only
        return float(verify(parse("$" + ground_truth + "$"), parse(solution_str)))
    if data_source == "hang":
        if "hang" in solution_str:
            time.sleep(60)
        return 0.25
    if data_source == "other":
        raise NotImplementedError(f"Reward function is not implemented for {data_source=}")
    if data_source == "broken":
        raise ValueError("the user's function crashed")
    hits = sum(ch in ground_truth for ch in solution_str)
    return {
        "score": hits / max(len(solution_str), 1),
        "hits": hits,
        "exact": solution_str == ground_truth,
        "note": "not a number: dropped",
        "local": [{"start": 0, "end": 3, "value": penalty}],
    }

async def async_score(data_source, solution_str, ground_truth, extra_info=None):
    return {"score": 0.5, "length": len(solution_str)}
"""


def set_ground_truth(data, ground_truth):
    for i in range(len(data)):
        data.non_tensor_batch["reward_model"][i] = {"style": "rule", "ground_truth": ground_truth}


def score(worker, data):
    return asyncio.run(worker.compute_score_batch(data))


@pytest.fixture(scope="module")
def custom_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("custom_fn") / "my_reward.py"
    path.write_text(CUSTOM_FN)
    return path


@pytest.fixture(scope="module")
def custom_worker(tiny_model_dir, custom_file):
    """One reward-loop worker with the custom function (one worker process), shared by the tests below."""
    worker, _ = worker_for(
        tiny_model_dir,
        f"reward.custom_reward_function.path={custom_file}",
        "reward.custom_reward_function.name=compute_score",
        "+reward.custom_reward_function.reward_kwargs.penalty=-0.5",
        "+reward.reward_kwargs.bot.fn_workers=1",
        "+reward.reward_kwargs.bot.timeout_s=3",
    )
    yield worker
    worker.reward_manager.verl_scorer.close()


def test_verl_default_data_sources_are_read_from_its_source():
    names, prefixes = default_data_sources()
    # verl 0.9.1's default_compute_score, read by hand
    assert names == {
        "openai/gsm8k",
        "lighteval/MATH",
        "DigitalLearningGmbH/MATH-lighteval",
        "HuggingFaceH4/MATH-500",
        "math_dapo",
        "math",
        "math_dapo_reasoning",
        "numina_aops_forum",
        "numina_synthetic_math",
        "numina_amc_aime",
        "numina_synthetic_amc",
        "numina_cn_k12",
        "numina_olympiads",
        "codecontests",
        "apps",
        "codeforces",
        "taco",
        "hiyouga/geometry3k",
        *(f"searchR1_{s}" for s in ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")),
    }
    assert prefixes == ("aime",)
    assert default_knows("openai/gsm8k") and default_knows("aime24") and not default_knows("nobody")
    # what the decision stands for: verl scores a known source, and raises for an unknown one
    assert default_compute_score("openai/gsm8k", "so #### 72", "72") == 1.0
    with pytest.raises(NotImplementedError):
        default_compute_score("nobody", "so #### 72", "72")


def test_verdict_from_a_verl_result():
    assert verdict_from_result(0.5) == {"global": {"score": 0.5, "parts": {"acc": 0.5}}, "local": []}
    assert verdict_from_result(True)["global"]["score"] == 1.0
    assert verdict_from_result(np.float32(0.25))["global"]["score"] == 0.25
    span = {"start": 1, "end": 4, "value": -1.0}
    verdict = verdict_from_result({"score": 1, "acc": True, "pred": "72", "n": np.int64(3), "local": [span]})
    assert verdict == {"global": {"score": 1, "parts": {"acc": 1.0, "n": 3.0}}, "local": [span]}
    with pytest.raises(InvalidVerdict, match="needs a 'score'"):
        verdict_from_result({"acc": 1.0})
    with pytest.raises(InvalidVerdict, match="not a number or a dict"):
        verdict_from_result("1.0")


def test_gsm8k_rows_get_verls_gsm8k_score(tiny_model_dir, tokenizer):
    """Only `reward.reward_manager.name=bot`: verl's default_compute_score scores the openai/gsm8k rows."""
    worker, _ = worker_for(tiny_model_dir, "+reward.reward_kwargs.bot.fn_workers=1")
    responses = ["3 + 4 = 7 #### 72", "#### 71", "the answer is 72", "#### 7,2", ""]
    data, rows = make_batch(tokenizer, responses, data_source="openai/gsm8k")
    set_ground_truth(data, "72")
    try:
        outputs = score(worker, data)
    finally:
        worker.reward_manager.verl_scorer.close()
    scores = [out["reward_extra_info"]["score"] for out in outputs]
    assert scores == [float(gsm8k.compute_score(text, "72")) for text in responses] == [1.0, 0.0, 0.0, 1.0, 0.0]
    for out, ids in zip(outputs, rows, strict=True):
        assert out["reward_score"] == [out["reward_extra_info"]["score"]] * len(ids)  # G on every token, no S
        assert out["reward_extra_info"]["scorer_failed"] == 0.0
        assert set(out["reward_extra_info"]) == {
            "score", "acc", "scorer_failed", "scorer_error", "scorer_error_msg", "flags", "local_signal"
        }
        assert out["reward_extra_info"]["local_signal"] == 0.0  # verl's scalar functions: no S, bot is GRPO there
        assert out["reward_extra_info"]["acc"] == out["reward_extra_info"]["score"]  # as verl's naive reports it


def test_custom_function_dict_gives_g_parts_and_local_spans(custom_worker, tokenizer):
    responses = ["abcabc", "xyz abc", "a"]
    data, rows = make_batch(tokenizer, responses, data_source="my_task")
    set_ground_truth(data, "abc")
    outputs = score(custom_worker, data)
    for out, ids, response in zip(outputs, rows, responses, strict=True):
        text = "".join(token_pieces(tokenizer, ids))
        assert text == response
        hits = sum(ch in "abc" for ch in text)
        g = hits / len(text)
        s = token_local(tokenizer, ids, [{"start": 0, "end": 3, "value": -0.5}])  # the span of the function's kwargs
        np.testing.assert_allclose(out["reward_score"], g + s)
        info = out["reward_extra_info"]
        assert info == {
            "score": pytest.approx(g),
            "hits": float(hits),
            "exact": float(text == "abc"),
            "scorer_failed": 0.0,
            "scorer_error": 0.0,
            "scorer_error_msg": "",
            "flags": "",
            "local_signal": 1.0,
        }
    assert min(outputs[1]["reward_score"]) < max(outputs[1]["reward_score"])  # S reached the tokens


def test_configured_scorers_win_over_the_custom_function(custom_worker, tokenizer):
    data, rows = make_batch(tokenizer, ["hello world"], data_source="toy_lint")
    (out,) = score(custom_worker, data)
    verdict = toy_lint("", "".join(token_pieces(tokenizer, rows[0])))  # toy_lint's own verdict on the response
    expected = verdict["global"]["score"] + token_local(tokenizer, rows[0], verdict["local"])
    np.testing.assert_allclose(out["reward_score"], expected)
    assert "clean" in out["reward_extra_info"]  # toy_lint's part, not the custom function's


def test_math_verify_runs_in_a_worker_process_not_in_threads(custom_worker, tiny_model_dir, custom_file, tokenizer):
    data, _ = make_batch(tokenizer, ["so x = \\boxed{1/2}", "so x = \\boxed{3}"], data_source="mathv")
    set_ground_truth(data, "0.5")
    outputs = score(custom_worker, data)
    assert [o["reward_extra_info"]["score"] for o in outputs] == [1.0, 0.0]
    assert [o["reward_extra_info"]["scorer_failed"] for o in outputs] == [0.0, 0.0]
    # verl's way (the reward loop's threads): math-verify refuses to run outside a main thread
    threaded, _ = worker_for(
        tiny_model_dir,
        f"reward.custom_reward_function.path={custom_file}",
        "+reward.reward_kwargs.bot.fn_workers=0",
    )
    outputs = score(threaded, data)
    assert [o["reward_extra_info"]["scorer_failed"] for o in outputs] == [1.0, 1.0]


def test_a_hung_call_is_killed_and_the_worker_replaced(custom_worker, tokenizer):
    data, rows = make_batch(tokenizer, ["hang on", "fine"], data_source="hang")
    outputs = score(custom_worker, data)
    assert outputs[0]["reward_score"] == [0.0] * len(rows[0])  # the failure sentinel
    assert outputs[0]["reward_extra_info"]["scorer_failed"] == 1.0
    assert outputs[1]["reward_extra_info"] == {
        "score": 0.25, "acc": 0.25, "scorer_failed": 0.0, "scorer_error": 0.0, "scorer_error_msg": "", "flags": "",
        "local_signal": 0.0,
    }
    pool = custom_worker.reward_manager.verl_scorer._pool
    assert pool.restarts >= 1
    data, _ = make_batch(tokenizer, ["fine again"], data_source="hang")
    (out,) = score(custom_worker, data)  # the replaced worker scores
    assert out["reward_extra_info"]["score"] == 0.25


def test_not_implemented_is_a_configuration_error_and_a_crash_a_sentinel(custom_worker, tokenizer):
    data, _ = make_batch(tokenizer, ["x"], data_source="other")
    (out,) = score(custom_worker, data)  # a configuration error: the marker that stops the run
    assert re.search(
        r"no scorer for data_source='other': reward.custom_reward_function \(", out["reward_extra_info"][FATAL_KEY]
    )
    data, rows = make_batch(tokenizer, ["x"], data_source="broken")
    (out,) = score(custom_worker, data)
    assert out["reward_score"] == [0.0] * len(rows[0]) and out["reward_extra_info"]["scorer_failed"] == 1.0


def test_async_custom_function_is_awaited_in_the_reward_loop(tiny_model_dir, custom_file, tokenizer):
    worker, _ = worker_for(
        tiny_model_dir,
        f"reward.custom_reward_function.path={custom_file}",
        "reward.custom_reward_function.name=async_score",
    )
    data, rows = make_batch(tokenizer, ["four"], data_source="anything")
    (out,) = score(worker, data)
    assert out["reward_score"] == [0.5] * len(rows[0])
    assert out["reward_extra_info"]["length"] == 4.0
    assert worker.reward_manager.verl_scorer._pool is None  # no worker process for an async function


def test_unknown_data_source_without_custom_function_is_the_clear_error(tiny_model_dir, tokenizer):
    worker, _ = worker_for(tiny_model_dir)
    data, _ = make_batch(tokenizer, ["x"], data_source="nobody")
    (out,) = score(worker, data)
    message = out["reward_extra_info"][FATAL_KEY]
    assert message.startswith("bot reward manager: no scorer for data_source='nobody'")
    assert "default_compute_score does not know it" in message and "scorers.nobody=" in message
    assert worker.reward_manager.verl_scorer._pool is None  # decided without calling anything
    assert "\n" not in message  # one line
