"""The CPU task `toy_math`: rule-based step judge, the builtin scorer = the math server with `--judge rule`, the
noisy-local-signal knob of the CPU scorers, the data script, and the tiny model's warm start.

Hand-written responses with hand-computed G (Eq. 8: 3 * 1[correct] + b_format), e_s and step spans
(0.5 * e_s / |S|); the server is the real `python -m reward_servers.math` over HTTP on loopback.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import requests
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reward_servers.math.rule_judge import Chain, check_step, parse_chain, rule_judge_steps
from tests.conftest import compose_verl_config, free_port
from tests.harness.manager import make_batch, token_local, token_pieces, worker_for
from verl_bot.credit.verdict import validate_verdict
from verl_bot.rewards.manager import manager_settings
from verl_bot.rewards.metrics import training_reward_metrics
from verl_bot.rewards.noise import LocalNoise
from verl_bot.rewards.scorers import DEFAULT_SCORERS, build_scorer, build_scorers
from verl_bot_demo import toy_math as task
from verl_bot_demo.scorers import toy_lint, toy_math

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "Compute 3+4-2."  # 3 -> 7 -> 5


def steps(*texts: str, final: str | None = "5") -> str:
    body = "\n\n".join(f"<step {i}>{t}</step {i}>" for i, t in enumerate(texts, 1))
    return f"{body}\n\n<final>{final}</final>" if final is not None else body


def score(response: str, prompt: str = PROMPT, gt: object = "5") -> dict:
    return asyncio.run(toy_math(prompt, response, gt, {}))


def judge(step_texts: list[str], strategy: str, prompt: str = PROMPT) -> list[tuple[int, str]]:
    return [(v.score, v.verdict) for v in asyncio.run(rule_judge_steps(prompt, step_texts, strategy))]


# ------------------------------------------------------------------------------------------ the rule judge


def test_problem_chain_is_read_from_the_text():
    assert parse_chain("Compute 3+4-2.") == Chain(3, (("+", 4), ("-", 2)))
    assert parse_chain("Compute 12 - 3 + 40, then stop") == Chain(12, (("-", 3), ("+", 40)))
    assert parse_chain("Compute 3+4-2.").values() == [7, 5]
    assert parse_chain("What is seven?") is None and parse_chain("Compute 5.") is None


def test_each_step_is_checked_against_the_previous_stated_value():
    chain = parse_chain(PROMPT)
    verdict = [check_step(chain, ["3+4=7", "7-2=5"], s).score for s in range(2)]
    assert verdict == [1, 1]
    assert check_step(chain, ["3+4=8"], 0).score == -1  # wrong result
    assert check_step(chain, ["3-4=-1"], 0).score == -1  # wrong operation
    assert check_step(chain, ["2+4=6"], 0).score == -1  # wrong first operand
    assert check_step(chain, ["3+4=7", "7-3=4"], 1).score == -1  # wrong operand of the problem
    assert check_step(chain, ["3+4=7", "5-2=3"], 1).score == -1  # does not continue from 7
    assert check_step(chain, ["3+4=8", "8-2=6"], 1).score == 1  # continues the WRONG value correctly
    assert check_step(chain, ["3+4=7", "7-2=5", "5+0=5"], 2).score == -1  # past the last operation
    assert check_step(chain, ["three plus four"], 0).score == -1  # does not parse
    assert check_step(chain, ["3+4=x", "7-2=5"], 1).score == 1  # previous states nothing: the true value 7
    assert check_step(chain, [" 3 + 4 = 7 "], 0).score == 1  # spaces are fine
    assert check_step(None, ["3+4=7"], 0).score == 0  # no chain in the problem: uncertain
    assert check_step(chain, ["9" * 5000 + "+4=7"], 0).score == -1  # no int() of a 5000-digit string


def test_strategies_are_the_llm_judges_own():
    """error_propagation: after the first incorrect step every later step is skipped (e_s = 0), as the AIME
    server does; independent: every step judged, a step after a wrong one against the wrong value."""
    prompt = "Compute 3+4-2+1."  # 3 -> 7 -> 5 -> 6
    texts = ["3+4=7", "7-2=4", "4+1=5"]
    assert judge(texts, "error_propagation", prompt) == [(1, "correct"), (-1, "incorrect"), (0, "skipped")]
    assert judge(texts, "independent", prompt) == [(1, "correct"), (-1, "incorrect"), (1, "correct")]
    assert judge(texts, "context_aware", prompt) == [(1, "correct"), (-1, "incorrect"), (1, "correct")]
    assert judge(["3+4=7", "7-2=5", "5+1=6"], "error_propagation", prompt) == [(1, "correct")] * 3


# -------------------------------------------------------------------------------- the builtin scorer (Eq. 8)


def spans_of(verdict: dict) -> list[tuple[int, int, float]]:
    return [(s["start"], s["end"], pytest.approx(s["value"])) for s in verdict["local"]]


def test_right_answer_perfect_format():
    response = steps("3+4=7", "7-2=5")
    v = score(response)
    assert v["error"] is None and v["flags"] == []
    assert v["global"] == {"score": pytest.approx(3.2), "parts": {"answer": 3.0, "format": 0.2}}
    assert v["info"]["correct"] is True and v["info"]["format"] == "ok"
    assert [(s["score"], s["verdict"]) for s in v["info"]["steps"]] == [(1, "correct"), (1, "correct")]
    # step 1 = "<step 1>3+4=7</step 1>" = characters 0..22, step 2 starts after the blank line at 24
    assert response[0:22] == "<step 1>3+4=7</step 1>" and response[24:46] == "<step 2>7-2=5</step 2>"
    assert spans_of(v) == [(0, 22, 0.25), (24, 46, 0.25)]


def test_wrong_step_propagates_and_the_answer_is_wrong():
    prompt = "Compute 3+4-2+1."  # answer 6
    response = steps("3+4=7", "7-2=4", "4+1=5", final="5")
    v = score(response, prompt, "6")
    assert v["global"] == {"score": pytest.approx(0.2), "parts": {"answer": 0.0, "format": 0.2}}
    assert v["info"]["correct"] is False
    assert [s["score"] for s in v["info"]["steps"]] == [1, -1, 0]  # the third step is skipped
    # |S| = 3: +0.5/3 on step 1, -0.5/3 on step 2, nothing on step 3
    assert spans_of(v) == [(0, 22, 0.5 / 3), (24, 46, -0.5 / 3)]


def test_right_answer_after_a_wrong_step_and_broken_format():
    # step 2 is wrong but the final answer happens to be right; the final tag is not closed: mismatched
    response = "<step 1>3+4=7</step 1>\n\n<step 2>7-2=6</step 2>\n\n<final>5"
    v = score(response)
    assert v["info"]["format"] == "mismatched" and v["info"]["correct"] is False  # no complete <final>: no answer
    assert v["global"]["parts"] == {"answer": 0.0, "format": -1.0} and "no_answer" in v["flags"]
    v = score(steps("3+4=7", "7-2=6", final="\\boxed{5}"))
    assert v["info"]["correct"] is True and v["global"]["score"] == pytest.approx(3.2)
    assert spans_of(v) == [(0, 22, 0.25), (24, 46, -0.25)]


def test_no_tags_is_format_missing():
    v = score("the answer is 5")
    assert v["global"] == {"score": -1.0, "parts": {"answer": 0.0, "format": -1.0}} and v["local"] == []
    assert v["info"]["correct"] is False and v["info"]["format"] == "missing"


def test_non_integer_answer_is_wrong_without_math_verify():
    v = score(steps("3+4=7", "7-2=5", final="\\frac{10}{2}"))
    assert v["info"]["correct"] is False and "answer_not_integer" in v["flags"]
    assert score(steps("3+4=7", "7-2=5", final="05"))["info"]["correct"] is True


def test_toy_math_is_the_default_scorer_for_its_data_source():
    assert DEFAULT_SCORERS["toy_math"] == "builtin:toy_math"
    scorer = build_scorers({})["toy_math"]
    v = asyncio.run(scorer.score({"prompt": PROMPT, "response": steps("3+4=7", "7-2=5"), "ground_truth": "5"}))
    assert validate_verdict(v)["global"]["score"] == pytest.approx(3.2)


def test_bad_ground_truth_is_an_item_error_not_a_crash():
    for gt in (None, "", "five", "2.5", "-3", {"x": 1}):
        v = score(steps("3+4=7", "7-2=5"), gt=gt)
        assert v["error"] and v["global"]["score"] == 0.0, gt


RESPONSES = [
    steps("3+4=7", "7-2=5"),
    steps("3+4=8", "8-2=6", final="6"),
    steps("3+4=7", "7-2=5", final="\\boxed{5}"),
    "<step 1>3+4=7</step 1><step 3>7-2=5</step 3><final>5</final>",
    "<step 1>3+4=7<final>5</final>",
    "<final>5</final>",
    "",
    "5",
    "caf\u00e9 \U0001f600 <step 1>\u00bd+\u00bd=1</step 1> <final>\uff15</final>",
    "<step 1>" + "3+4=7 " * 20000 + "</step 1><final>5</final>",
    "\ufffd<step 1>3+4=7</step 1>\n\n<step 2>7-2=5</step 2>\n\n<final>5</final>\ufffd",
]


@given(st.text(alphabet=st.sampled_from(list("<>/steps finalx0123456789+-=\n \\{}boxed")), max_size=80) | st.text())
@settings(max_examples=150, deadline=None)
def test_any_response_gets_a_valid_verdict(response):
    verdict = validate_verdict(score(response))
    assert verdict["error"] is None and isinstance(verdict["info"]["correct"], bool)
    assert set(verdict["global"]["parts"]) == {"answer", "format"}
    for span in verdict["local"]:
        assert 0 <= span["start"] < span["end"] <= len(response)


def test_odd_responses_get_a_verdict():
    for response in RESPONSES:
        verdict = validate_verdict(score(response))
        assert verdict["error"] is None, response[:80]
    big = score(RESPONSES[9])
    assert big["info"]["steps"][0]["score"] == -1 and big["info"]["correct"] is True


# ---------------------------------------------------------------------- same verdict over HTTP (the server)


@pytest.fixture(scope="module")
def rule_server():
    """`python -m reward_servers.math --judge rule --no-math-verify` on a free loopback port."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "reward_servers.math", "--judge", "rule", "--no-math-verify", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "MATH_JUDGE_BASE_URL": ""},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(url + "/health", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode(errors="replace") if proc.poll() is not None else ""
                pytest.fail(f"math server did not come up: {out[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_server_with_rule_judge_gives_the_builtin_verdict(rule_server):
    health = requests.get(rule_server + "/health", timeout=10).json()
    assert health["judge"] == "rule" and health["workers"] == 0 and health["status"] == "ok"
    cases = [(PROMPT, r, "5") for r in RESPONSES] + [
        ("Compute 3+4-2+1.", steps("3+4=7", "7-2=4", "4+1=5", final="5"), "6"),
        ("Compute 9-9+4.", steps("9-9=0", "0+4=4", final="4"), 4),
        ("What is seven?", steps("3+4=7", final="7"), "7"),
        (PROMPT, steps("3+4=7", "7-2=5"), "five"),
    ]
    items = [{"id": i, "prompt": p, "response": r, "ground_truth": gt} for i, (p, r, gt) in enumerate(cases)]
    answer = requests.post(rule_server + "/score", json={"items": items}, timeout=60)
    assert answer.status_code == 200, answer.text
    served = answer.json()["items"]
    assert len(served) == len(cases)
    for (prompt, response, gt), remote in zip(cases, served, strict=True):
        local = score(response, prompt, gt)
        remote.pop("id")
        local.pop("id")
        assert json.loads(json.dumps(local)) == remote, response[:80]
    assert served[11]["info"]["steps"][1]["verdict"] == "incorrect" and served[12]["info"]["correct"] is True
    assert served[13]["local"] == [] and [s["verdict"] for s in served[13]["info"]["steps"]] == ["uncertain"]
    assert served[14]["error"] is not None


THINK_NATIVE = "<think>3+4 is 7 and 7-2 is 5.</think>\n\n3+4=7\n\n7-2=5\n\nSo \\boxed{5}"


def test_rule_judge_on_a_reasoning_models_output(rule_server):
    """The think block is skipped (its draft steps would be -1); a native answer's paragraphs are judged by the rule
    judge as steps; a response cut off inside its think block has no answer. Same verdicts in-process."""
    cases = {
        "native": THINK_NATIVE,
        "drafts": "<think><step 1>3+4=8</step 1><final>6</final></think>\n\n" + steps("3+4=7", "7-2=5"),
        "cut": "<think>3+4=7 so \\boxed{5}",
    }
    items = [{"id": k, "prompt": PROMPT, "response": r, "ground_truth": "5"} for k, r in cases.items()]
    answer = requests.post(rule_server + "/score", json={"items": items}, timeout=60).json()
    served = {o.pop("id"): o for o in answer["items"]}
    for name, response in cases.items():
        local = score(response)
        local.pop("id")
        assert json.loads(json.dumps(local)) == served[name], name
    native = served["native"]
    assert THINK_NATIVE[39:44] == "3+4=7" and THINK_NATIVE[46:51] == "7-2=5"
    assert native["global"] == {"score": 3.0, "parts": {"answer": 3.0, "format": 0.0}}
    assert native["info"]["format"] == "native" and native["info"]["step_source"] == "paragraphs"
    assert spans_of(native) == [(39, 44, 0.25), (46, 51, 0.25)]
    drafts = served["drafts"]
    assert drafts["global"]["score"] == pytest.approx(3.2) and [s["score"] for s in drafts["info"]["steps"]] == [1, 1]
    assert spans_of(drafts) == [(55, 77, 0.25), (79, 101, 0.25)]
    assert cases["drafts"][55:77] == "<step 1>3+4=7</step 1>"
    cut = served["cut"]
    assert cut["global"]["score"] == -1.5 and cut["local"] == [] and "think_truncated" in cut["flags"]


def test_cli_refuses_a_rule_judge_with_an_endpoint():
    res = subprocess.run(
        [sys.executable, "-m", "reward_servers.math", "--judge", "rule", "--judge-base-url", "http://x/v1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode != 0 and "--judge rule takes no --judge-base-url" in res.stderr


# -------------------------------------------------------------------------------------- noisy local signal


def test_noise_is_deterministic_for_seed_and_text():
    verdict = toy_lint("", "a" + "xa" * 400)  # 401 spans of -1
    noise = LocalNoise(flip=0.3, jitter=0.2, seed=7)
    a, b = noise.apply(verdict, "a" + "xa" * 400), noise.apply(verdict, "a" + "xa" * 400)
    assert a == b and a["global"] == verdict["global"]  # G untouched
    other_seed = LocalNoise(flip=0.3, jitter=0.2, seed=8).apply(verdict, "a" + "xa" * 400)
    assert [s["value"] for s in other_seed["local"]] != [s["value"] for s in a["local"]]
    assert verdict["local"][0]["value"] == -1.0  # the input is not modified
    assert [(s["start"], s["end"]) for s in a["local"]] == [(s["start"], s["end"]) for s in verdict["local"]]


def test_flip_share_is_honoured_and_nested():
    spans = [{"start": i, "end": i + 1, "value": -1.0} for i in range(4000)]
    verdict = {"global": {"score": 0.0, "parts": {}}, "local": spans, "info": {}}
    shares = {}
    flipped_sets = {}
    for p in (0.0, 0.1, 0.3, 1.0):
        out = LocalNoise(flip=p, seed=3).apply(verdict, "text")
        values = np.array([s["value"] for s in out["local"]])
        assert set(np.unique(values)) <= {-1.0, 1.0}  # flip only: values keep their size
        flipped_sets[p] = set(np.flatnonzero(values > 0))
        shares[p] = len(flipped_sets[p]) / len(spans)
        if p > 0:
            assert out["info"]["local_noise"] == {"flip": p, "jitter": 0.0, "seed": 3, "flipped": len(flipped_sets[p])}
    assert shares[0.0] == 0.0 and shares[1.0] == 1.0
    assert abs(shares[0.1] - 0.1) < 0.02 and abs(shares[0.3] - 0.3) < 0.03  # 4000 draws: ~4 sigma
    assert flipped_sets[0.1] <= flipped_sets[0.3]


def test_jitter_scales_values_by_a_gaussian_factor():
    spans = [{"start": i, "end": i + 1, "value": 2.0} for i in range(4000)]
    out = LocalNoise(jitter=0.1, seed=0).apply({"global": {"score": 1.0}, "local": spans}, "x")
    factors = np.array([s["value"] for s in out["local"]]) / 2.0
    assert abs(factors.mean() - 1.0) < 0.01 and abs(factors.std() - 0.1) < 0.01


def test_noise_spec_options_and_their_errors():
    response = "hello world, a cat"
    clean = toy_lint("", response)
    scorer = build_scorer("builtin:toy_lint?flip=1&seed=2")
    noisy = asyncio.run(scorer.score({"prompt": "", "response": response}))
    assert [s["value"] for s in noisy["local"]] == [-s["value"] for s in clean["local"]]
    assert noisy["global"] == clean["global"] and noisy["info"]["local_noise"]["flipped"] == len(clean["local"])
    assert build_scorer("builtin:toy_math").noise is None and build_scorer("builtin:toy_lint?flip=0").noise.flip == 0
    for bad in ("builtin:toy_lint?flp=0.2", "builtin:toy_lint?flip=2", "builtin:toy_lint?flip=x", "builtin:toy_lint?"):
        with pytest.raises(ValueError, match="scorer spec"):
            build_scorer(bad)
    for bad in ("builtin:toy_math?jitter=-1", "builtin:toy_math?jitter=inf", "builtin:toy_math?flip=nan"):
        with pytest.raises(ValueError, match="jitter|flip"):
            build_scorer(bad)


def test_noise_knob_through_hydra_and_the_manager_settings():
    config = compose_verl_config(
        [
            "reward.reward_manager.name=bot",
            "+reward.reward_kwargs.bot.scorers.toy_math='builtin:toy_math?flip=0.25&jitter=0.5&seed=4'",
        ]
    )
    scorers = build_scorers(manager_settings(config).scorers)
    assert scorers["toy_math"].noise == LocalNoise(flip=0.25, jitter=0.5, seed=4)
    assert scorers["toy_lint"].noise is None
    response = steps("3+4=7", "7-2=5")
    first = asyncio.run(scorers["toy_math"].score({"prompt": PROMPT, "response": response, "ground_truth": "5"}))
    again = asyncio.run(scorers["toy_math"].score({"prompt": PROMPT, "response": response, "ground_truth": "5"}))
    assert first == again and first["global"]["score"] == pytest.approx(3.2)
    assert [s["value"] for s in first["local"]] != [0.25, 0.25]


def toy_math_batch(tokenizer, responses, uids):
    """A verl DataProto of toy_math rows (prompt PROMPT, ground truth "5") for the reward loop."""
    data, rows = make_batch(tokenizer, responses, data_source="toy_math", uids=uids)
    n = len(responses)
    data.non_tensor_batch["raw_prompt"] = np.array([[{"role": "user", "content": PROMPT}]] * n + [None], object)[:n]
    data.non_tensor_batch["reward_model"] = np.array([{"style": "rule", "ground_truth": "5"}] * n, dtype=object)
    return data, rows


def test_toy_math_through_verls_reward_loop_with_streams_and_noise(tiny_model_dir, tokenizer):
    """verl's RewardLoopWorker, the `bot` manager, the default scorer of `toy_math`, the reward streams of
    `pure` (outcome = info.correct, steps end at the blank lines) and the noisy knob through Hydra."""
    responses = [steps("3+4=7", "7-2=5"), steps("3+4=8", "8-2=6", final="6"), "no idea"]
    clean_worker, _ = worker_for(tiny_model_dir, "algorithm.adv_estimator=pure")
    noisy_worker, _ = worker_for(
        tiny_model_dir,
        "algorithm.adv_estimator=pure",
        "+reward.reward_kwargs.bot.scorers.toy_math='builtin:toy_math?flip=1&seed=0'",
    )
    data, rows = toy_math_batch(tokenizer, responses, ["a", "a", "a"])
    clean = asyncio.run(clean_worker.compute_score_batch(data))
    noisy = asyncio.run(noisy_worker.compute_score_batch(data))
    assert [o["reward_extra_info"]["solved"] for o in clean] == [1.0, 0.0, 0.0]
    assert [o["reward_extra_info"]["score"] for o in clean] == pytest.approx([3.2, 0.2, -1.0])
    keys = {"score", "answer", "format", "scorer_failed", "scorer_error", "scorer_error_msg", "flags", "solved", "acc",
            "local_signal"}
    assert set(clean[0]["reward_extra_info"]) == keys
    assert [o["reward_extra_info"]["local_signal"] for o in clean] == [1.0, 1.0, 0.0]  # "no idea": no step, no S
    for out, ids, text in zip(clean, rows, responses, strict=True):
        streams = out["reward_score"]["streams"]
        assert streams["outcome"][-1] == out["reward_extra_info"]["solved"]
        assert sum(streams["step_end"]) == text.count("\n\n") + 1  # every blank line, and the last token
        verdict = score("".join(token_pieces(tokenizer, ids)))  # the scorer's own verdict on the response
        expected_local = token_local(tokenizer, ids, verdict["local"])
        np.testing.assert_allclose(streams["local"], expected_local)
        np.testing.assert_allclose(out["reward_score"]["token_rewards"], verdict["global"]["score"] + expected_local)
    for a, b in zip(clean, noisy, strict=True):  # flip=1: every local value changes sign, G stays
        flipped = -np.array(a["reward_score"]["streams"]["local"])
        np.testing.assert_allclose(b["reward_score"]["streams"]["local"], flipped)
        assert b["reward_extra_info"] == a["reward_extra_info"]
    assert min(clean[1]["reward_score"]["streams"]["local"]) == pytest.approx(-0.25)


def test_a_reasoning_models_rollouts_show_in_the_step_metrics(tiny_model_dir, tokenizer):
    """verl's reward loop, the `bot` manager, toy_math: a rollout cut off inside its think block is flagged, and
    arrives as `reward/flag/think_truncated/mean`; `reward/local_signal/mean` is the share of rollouts with any S_t
    (a native answer with steps before it: 1; cut off: 0; a native answer alone, no step: 0)."""
    responses = [THINK_NATIVE, "<think>3+4=7 so \\boxed{5}", "<think>3+4=7, 7-2=5</think>\n\n\\boxed{5}"]
    worker, _ = worker_for(tiny_model_dir)
    data, _ = toy_math_batch(tokenizer, responses, ["a", "a", "a"])
    infos = [o["reward_extra_info"] for o in asyncio.run(worker.compute_score_batch(data))]
    assert [i["score"] for i in infos] == pytest.approx([3.0, -1.5, 3.0])
    assert [i["flags"] for i in infos] == ["", "no_answer,think_truncated", ""]
    assert [i["local_signal"] for i in infos] == [1.0, 0.0, 0.0]
    metrics = training_reward_metrics([{"reward_extra_info": i} for i in infos])
    assert metrics["reward/flag/think_truncated/mean"] == pytest.approx(1 / 3)
    assert metrics["reward/local_signal/mean"] == pytest.approx(1 / 3)
    assert metrics["reward/think_truncated/mean"] == pytest.approx(-0.5 / 3)


# ----------------------------------------------------------------------------------------------- data script


def load_data_script():
    spec = importlib.util.spec_from_file_location("toy_math_data", ROOT / "recipes" / "data" / "toy_math.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_data_script_writes_verl_rows(tmp_path):
    cmd = [sys.executable, str(ROOT / "recipes" / "data" / "toy_math.py"), "--train", "40", "--test", "8"]
    subprocess.run([*cmd, "--out", str(tmp_path)], check=True, capture_output=True, timeout=300)
    train = pd.read_parquet(tmp_path / "train.parquet")
    test = pd.read_parquet(tmp_path / "test.parquet")
    assert len(train) == 40 and len(test) == 8
    expected = load_data_script().rows(40, 0, "train")  # deterministic for the seed
    assert train["prompt"].map(lambda p: p[0]["content"]).tolist() == [r["prompt"][0]["content"] for r in expected]
    assert train["reward_model"].tolist() == [r["reward_model"] for r in expected]
    assert set(train.columns) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    for _, row in pd.concat([train, test]).iterrows():
        assert row["data_source"] == "toy_math" and row["ability"] == "math"
        (message,) = row["prompt"]
        assert message["role"] == "user" and message["content"].startswith("Compute ")
        chain = parse_chain(message["content"])
        assert 2 <= len(chain.ops) <= 4 and row["extra_info"]["steps"] == len(chain.ops)
        values = chain.values()
        assert all(0 <= v <= 9 for v in values)
        assert row["reward_model"]["style"] == "rule" and row["reward_model"]["ground_truth"] == str(values[-1])
    assert set(train["prompt"].map(lambda p: p[0]["content"])) != set(test["prompt"].map(lambda p: p[0]["content"]))


def test_the_aime_recipes_cpu_problems_are_the_data_scripts_and_have_answers_aime_py_reads(tmp_path):
    """recipes/data/aime_cpu.jsonl (the AIME recipes' data on the CPU platform) is what its documented command
    writes, and recipes/data/aime.py turns it into rows whose ground truth is each chain's value."""
    shipped = ROOT / "recipes" / "data" / "aime_cpu.jsonl"
    script = ROOT / "recipes" / "data" / "toy_math.py"
    subprocess.run([sys.executable, str(script), "--aime-jsonl", str(tmp_path / "a.jsonl"), "--train", "80",
                    "--seed", "7"], check=True, capture_output=True, timeout=300)
    assert (tmp_path / "a.jsonl").read_text() == shipped.read_text()
    subprocess.run([sys.executable, str(ROOT / "recipes" / "data" / "aime.py"), "--input", str(shipped),
                    "--out-dir", str(tmp_path / "aime")], check=True, capture_output=True, timeout=300)
    rows = pd.concat([pd.read_parquet(tmp_path / "aime" / f"{s}.parquet") for s in ("train", "test")])
    assert len(rows) == 80
    for _, row in rows.iterrows():
        problem = row["extra_info"]["problem"]
        assert problem in row["prompt"][-1]["content"]
        assert row["reward_model"]["ground_truth"] == str(parse_chain(problem).values()[-1])


def test_worked_solutions_are_judged_correct_and_injected_errors_wrong():
    import random

    rng = random.Random(0)
    wrong = 0
    for p in task.problems(200, seed=5):
        assert p.values() == parse_chain(p.prompt).values()
        right = score(task.solution(p), p.prompt, str(p.answer))
        assert right["info"]["correct"] and right["global"]["score"] == pytest.approx(3.2)
        noisy = score(task.solution(p, rng, error_rate=0.5), p.prompt, str(p.answer))
        e = [s["score"] for s in noisy["info"]["steps"]]
        assert noisy["info"]["format"] == "ok" and e in ([1] * len(e), *([1] * k + [-1] + [0] * (len(e) - k - 1)
                                                                        for k in range(len(e))))
        wrong += -1 in e
    assert 100 < wrong < 200  # at error rate 0.5 most chains of 2-3 steps have a wrong step


# ------------------------------------------------------------------------------------------------ warm start


def test_warm_start_is_deterministic_and_writes_the_format(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl_bot_demo.tiny_model import build_model

    short = {"steps": 20, "batch_size": 16, "error_rate": 0.3}
    model_a, _ = build_model(tmp_path / "a", seed=3, warm_start="toy_math", warm_start_kwargs=short)
    model_b, _ = build_model(tmp_path / "b", seed=3, warm_start="toy_math", warm_start_kwargs=short)
    for (name, a), b in zip(model_a.state_dict().items(), model_b.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    model_c, _ = build_model(tmp_path / "c", seed=4, warm_start="toy_math", warm_start_kwargs=short)
    assert not torch.equal(model_a.lm_head.weight, model_c.lm_head.weight)

    build_model(tmp_path / "d", seed=3, warm_start="toy_math", warm_start_kwargs={"steps": 150, "batch_size": 32})
    summary = json.loads((tmp_path / "d" / "verl_bot_tiny.json").read_text())["warm_start"]
    assert summary["task"] == "toy_math" and summary["steps"] == 150 and summary["final_loss"] < 1.0

    # the tags are single tokens; the tokenizer round-trips the task's text
    tok = AutoTokenizer.from_pretrained(tmp_path / "d")
    text = task.solution(task.problems(1, seed=0)[0])
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    assert len(tok.tokenize("<step 1></step 1><final></final>")) == 4

    model = AutoModelForCausalLM.from_pretrained(tmp_path / "d")
    problems = task.problems(8, seed=11)
    formatted = 0
    for p in problems:
        messages = [{"role": "user", "content": p.prompt}]
        prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = torch.tensor([tok(prompt, add_special_tokens=False)["input_ids"]])
        out = model.generate(ids, max_new_tokens=48, do_sample=False, eos_token_id=tok.eos_token_id)
        response = tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
        formatted += score(response, p.prompt, str(p.answer))["info"]["format"] == "ok"
    assert formatted >= 6, formatted


def test_toy_lint_model_and_tokenizer_are_unchanged(tiny_model_dir, tokenizer):
    """Without a warm start the tokenizer has no tag tokens and the model is the random one (toy_lint)."""
    assert len(tokenizer) == 400
    assert "warm_start" not in json.loads((tiny_model_dir / "verl_bot_tiny.json").read_text())
    assert len(tokenizer.tokenize("<step 1>")) > 1
