"""The math reward server over real HTTP: real math-verify in worker processes, a deterministic fake step judge.

Hand-written responses: right, wrong, badly formatted, adversarial, and every bad input of issue 5.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from reward_servers.common.fake_judge import FakeJudge, last_user_text
from reward_servers.common.judge import JudgeConfig
from reward_servers.common.service import ServerThread, create_app
from reward_servers.math.config import MathConfig
from reward_servers.math.server import MathScorer
from tests.conftest import free_port
from tests.harness.math_judge import RULES, steps

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def judge():
    with FakeJudge(RULES, model="fake-step-judge") as fj:
        yield fj


@pytest.fixture(scope="module")
def server(judge):
    cfg = MathConfig(
        workers=2,
        judge_enabled=True,
        judge=JudgeConfig(base_url=judge.base_url, timeout_s=0.5, max_retries=1, backoff_s=0.01),
        item_timeout_s=4.0,
        verify_timeout_s=2,
    )
    with ServerThread(create_app(MathScorer(cfg), max_request_bytes=8 * 1024 * 1024)) as srv:
        yield srv


def score(srv, items, options=None, raw: bytes | None = None) -> list[dict]:
    body = raw if raw is not None else json.dumps({"items": items, "options": options or {}}).encode()
    r = requests.post(srv.url + "/score", data=body, headers={"Content-Type": "application/json"}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["items"]


def one(srv, response, gt=33, **kw) -> dict:
    item = {"id": "x", "prompt": "Compute 3 * 11.", "response": response, "ground_truth": gt, **kw}
    return score(srv, [item], kw.pop("options", None))[0]


# ----------------------------------------------------------------------------------------------- basics


def test_health(server):
    h = requests.get(server.url + "/health").json()
    assert h["status"] == "ok" and h["workers"] == 2 and h["judge"] == "reachable" and h["name"] == "math"


def test_right_answer_perfect_format_eq8(server, judge):
    resp = steps("3 * 11 is 30 + 3.", "So the answer is 33.")
    out = one(server, resp)
    assert out["error"] is None and out["flags"] == []
    assert out["global"] == {"score": 3.2, "parts": {"answer": 3.0, "format": 0.2}}
    info = out["info"]
    assert info["correct"] is True and info["answer"] == "33" and info["format"] == "ok"
    assert [s["score"] for s in info["steps"]] == [1, 1]
    # Eq. 8: 0.5 * e_s / |S| over each step's span
    assert [(sp["start"], sp["end"], sp["value"]) for sp in out["local"]] == [
        (s["start"], s["end"], 0.25) for s in info["steps"]
    ]
    assert resp[out["local"][0]["start"] : out["local"][0]["end"]].startswith("<step 1>")


def test_wrong_answer_and_leading_zeros(server):
    wrong = one(server, steps("3 * 11 = 34", final="34"))
    assert wrong["global"]["parts"] == {"answer": 0.0, "format": 0.2} and wrong["info"]["correct"] is False
    assert one(server, steps("ok", final="\\boxed{033}"))["info"]["correct"] is True
    assert one(server, steps("ok", final="033"), gt="33")["info"]["correct"] is True
    assert one(server, steps("ok", final="$\\frac{66}{2}$"))["info"]["correct"] is True  # through math-verify
    assert one(server, steps("ok", final="33"), gt="\\boxed{033}")["info"]["correct"] is True


def test_math_style_answers(server):
    out = one(server, steps("half", final="\\frac{2}{4}"), gt="0.5")
    assert out["info"]["answer_type"] == "math" and out["info"]["correct"] is True
    out = one(server, steps("x", final="3\\sqrt{2}"), gt="3\\sqrt{2}")
    assert out["info"]["correct"] is True
    assert one(server, steps("x", final="3"), gt="3\\sqrt{2}")["info"]["correct"] is False


# ------------------------------------------------------------------------------------ issue 5 bad inputs


def test_no_final(server):
    # steps but no <final>: the last \boxed{} still counts, the format is mismatched
    out = one(server, steps("the answer is \\boxed{33}", final=None))
    assert out["info"]["answer_source"] == "boxed" and out["info"]["correct"] is True
    assert out["info"]["format"] == "mismatched" and out["global"]["score"] == pytest.approx(2.0)
    # nothing at all to extract: no bare-number fallback
    out = one(server, steps("the answer is 33", final=None))
    assert out["info"]["correct"] is False and "no_answer" in out["flags"]
    assert out["global"]["score"] == pytest.approx(-1.0)


def test_two_boxed_answers_last_counts(server):
    a = one(server, "I guess \\boxed{33} or maybe \\boxed{34}")
    b = one(server, "I guess \\boxed{34} or maybe \\boxed{33}")
    assert a["info"]["correct"] is False and b["info"]["correct"] is True
    assert "multiple_boxed" in a["flags"] and "multiple_boxed" in b["flags"]


@pytest.mark.parametrize("answer", ["1000", "-5", "\\boxed{1000}", "$-5$"])
def test_answer_out_of_range(server, answer):
    out = one(server, steps("x", final=answer), gt=5)
    assert out["info"]["correct"] is False and "answer_out_of_range" in out["flags"] and out["error"] is None


def test_ground_truth_out_of_range_is_an_item_error(server):
    items = [
        {"id": "big", "response": steps("x", final="1"), "ground_truth": 1000, "extra_info": {"data_source": "aime"}},
        {"id": "neg", "response": steps("x", final="-5"), "ground_truth": "-5", "extra_info": {"answer_type": "aime"}},
        {"id": "none", "response": steps("x"), "ground_truth": None},
        {"id": "fine", "response": steps("x"), "ground_truth": 33},
    ]
    out = score(server, items, {"judge": False})
    assert [o["id"] for o in out] == ["big", "neg", "none", "fine"]
    assert "AIME integer" in out[0]["error"] and "AIME integer" in out[1]["error"] and out[2]["error"]
    assert all(o["global"]["score"] == 0.0 for o in out[:3])
    assert out[3]["error"] is None and out[3]["info"]["correct"] is True


def test_one_megabyte_response(server, judge):
    filler = "Let us expand the product carefully. " * 28000  # ~1 MB
    resp = steps(filler, "so 33", final="33")
    assert len(resp) > 1_000_000
    n0 = len(judge.requests)
    t0 = time.monotonic()
    out = one(server, resp)
    assert time.monotonic() - t0 < 15
    assert out["info"]["correct"] is True and out["info"]["format"] == "ok"
    assert out["local"][0]["end"] - out["local"][0]["start"] > 1_000_000
    sent = judge.requests[n0:]
    assert len(sent) == 2 and all(len(json.dumps(r)) < 40_000 for r in sent)  # the judge saw a clipped step


@pytest.mark.parametrize(("depth", "flag"), [(90, "answer_too_complex"), (400, "answer_too_long")])
def test_parser_bomb_refused_fast(server, depth, flag):
    bomb = "\\frac{1}{" * depth + "2" + "}" * depth
    t0 = time.monotonic()
    out = one(server, steps("x", final=bomb), options={"judge": False})
    assert time.monotonic() - t0 < 3
    assert out["info"]["correct"] is False and flag in out["flags"]


def test_parser_bomb_past_the_guard_hits_the_time_limit():
    # guard off: math-verify itself must be stopped by its alarm or by the hard kill, and the pool heals
    cfg = MathConfig(workers=1, max_answer_depth=10_000, max_answer_chars=10**6, verify_timeout_s=1, item_timeout_s=1.5)
    bomb = "\\frac{1}{" * 600 + "2" + "}" * 600
    with ServerThread(create_app(MathScorer(cfg))) as srv:
        t0 = time.monotonic()
        out = score(
            srv,
            [{"response": steps("x", final=bomb), "ground_truth": 33}, {"response": "\\boxed{33}", "ground_truth": 33}],
        )
        assert time.monotonic() - t0 < 10
        assert out[0]["info"]["correct"] is False and out[0]["error"] is None
        assert {"answer_timeout", "answer_not_integer", "answer_unparsed"} & set(out[0]["flags"])
        assert out[1]["info"]["correct"] is True
        assert requests.get(srv.url + "/health").status_code == 200


def test_invalid_utf8(server):
    raw = (
        b'{"items": [{"id": "u", "response": "<step 1>\xff\xfe bad bytes</step 1><final>33</final>",'
        b' "ground_truth": 33}, {"id": "s", "response": "\\udc80 \\\\boxed{33}", "ground_truth": 33}],'
        b' "options": {"judge": false}}'
    )
    out = score(server, None, raw=raw)
    assert out[0]["info"]["correct"] is True and "invalid_utf8" in out[0]["flags"]
    assert out[0]["info"]["steps"][0]["end"] == len("<step 1>\ufffd\ufffd bad bytes</step 1>")
    assert out[1]["info"]["correct"] is True and "invalid_utf8" in out[1]["flags"]


def test_judge_garbage(server):
    out = one(server, steps("fine", "GARBAGE here", "fine"))
    assert "judge_unparseable" in out["flags"]
    assert [s["score"] for s in out["info"]["steps"]] == [1, 0, 1]
    assert [s["verdict"] for s in out["info"]["steps"]] == ["correct", "unparseable", "correct"]
    assert out["global"]["score"] == pytest.approx(3.2)


@pytest.mark.parametrize("trigger", ["HANG", "FAIL500"])
def test_judge_timeout_or_down_keeps_answer(server, judge, trigger):
    t0 = time.monotonic()
    out = one(server, steps("fine", f"{trigger} now", "fine"))
    assert time.monotonic() - t0 < 8
    assert "judge_unavailable" in out["flags"] and out["local"] == []
    assert out["global"] == {"score": 3.2, "parts": {"answer": 3.0, "format": 0.2}}
    assert out["info"]["correct"] is True and all(s["score"] is None for s in out["info"]["steps"])


# -------------------------------------------------------------------------------------------- strategies


def calls_for(judge, fn):
    before = judge.count
    out = fn()
    return out, judge.count - before


def test_error_propagation_default(server, judge):
    resp = steps("fine", "WRONG step", "fine", "UNSURE", final="34")
    out, calls = calls_for(judge, lambda: one(server, resp))
    assert [s["score"] for s in out["info"]["steps"]] == [1, -1, 0, 0]
    assert [s["verdict"] for s in out["info"]["steps"]][2:] == ["skipped", "skipped"]
    assert calls == 2  # nothing judged after the first incorrect step
    assert out["info"]["judge"]["strategy"] == "error_propagation"
    values = [sp["value"] for sp in out["local"]]
    assert values == [pytest.approx(0.125), pytest.approx(-0.125)]
    assert out["global"]["score"] == pytest.approx(0.2)


def test_independent(server, judge):
    resp = steps("fine", "WRONG step", "fine", "UNSURE")
    out, calls = calls_for(judge, lambda: one(server, resp, options={"strategy": "independent"}))
    assert [s["score"] for s in out["info"]["steps"]] == [1, -1, 1, 0]
    assert calls == 4


def test_context_aware_sees_own_verdicts(server, judge):
    resp = steps("fine", "WRONG step", "fine")
    n0 = len(judge.requests)
    out = one(server, resp, options={"strategy": "context_aware", "window": 2})
    assert [s["score"] for s in out["info"]["steps"]] == [1, -1, 1]
    last = last_user_text(judge.requests[n0:][-1]["messages"])
    assert "(your verdict: correct)" in last and "(your verdict: incorrect)" in last


def test_window_controls_context(server, judge):
    resp = steps("alpha one", "beta two", "gamma three", "delta four")
    n0 = len(judge.requests)
    one(server, resp, options={"window": 1})
    prompts = [last_user_text(r["messages"]) for r in judge.requests[n0:]]
    assert len(prompts) == 4
    last = prompts[-1]
    assert "gamma three" in last and "beta two" not in last and "alpha one" not in last
    n0 = len(judge.requests)
    one(server, resp, options={"window": 3})
    assert all(w in last_user_text(judge.requests[-1]["messages"]) for w in ("alpha", "beta", "gamma"))


def test_bad_options_fail_items_not_server(server):
    out = score(server, [{"response": "\\boxed{33}", "ground_truth": 33}], {"strategy": "nope"})
    assert "strategy" in out[0]["error"]
    assert requests.get(server.url + "/health").status_code == 200


# ------------------------------------------------------------------------------------------- adversarial


@pytest.mark.parametrize(
    "final",
    [
        "33 or 34",
        "33, 34",
        "\\{33, 34\\}",
        "33 \\pm 1",
        "x",
        "",
        "\\boxed{}",
        "The answer is 33 unless it is 34",
    ],
)
def test_hedged_or_empty_answers_get_no_credit(server, final):
    out = one(server, steps("x", final=final), options={"judge": False})
    assert out["info"]["correct"] is False, out["info"]


def test_free_text_number_and_tag_spam(server):
    assert one(server, "After much thought, 33.", options={"judge": False})["info"]["correct"] is False
    spam = "<final>1</final>" * 3 + "<final>33</final>"
    out = one(server, spam, options={"judge": False})
    assert out["info"]["format"] == "mismatched" and out["global"]["parts"]["format"] == -1.0


def test_batch_isolation_and_order(server):
    items = [
        {"id": i, "response": steps("x", final=str(v)), "ground_truth": 33} for i, v in enumerate([33, 34, 33, 1000])
    ] + [{"id": "bad", "response": 5}]
    out = score(server, items, {"judge": False})
    assert [o["id"] for o in out] == [0, 1, 2, 3, "bad"]
    assert [o["info"].get("correct") for o in out[:4]] == [True, False, True, False]
    assert out[4]["error"] and out[4]["global"]["score"] == 0.0


# ----------------------------------------------------------------------------- a reasoning model's think block

GOOD = steps("3 * 11 is 30 + 3.", "So the answer is 33.")
# drafts of every kind inside the think block: a WRONG step (the fake judge would say -1), a final, a box, a fence
DRAFTS = (
    "<think>Draft: <step 1>WRONG 3 * 11 = 34</step 1>\n<final>\\boxed{34}</final>\n```jsx\nconst A = 1\n```\n"
    "</think>\n"
)
NATIVE = "<think>3 * 11: 30 + 3 = 33.</think>\n\nThree tens are 30.\n\nPlus three is 33.\n\nSo it is $\\boxed{33}$."
# name -> (response, format, answer, G with the judge off); ground truth 33
THINK_CASES = {
    "drafts in think, tagged answer": (DRAFTS + GOOD, "ok", "33", 3.2),
    "think mentions the tags": ("<think>Use <step 1> ... </step 1>, then <final>.</think>\n" + GOOD, "ok", "33", 3.2),
    "cut off in think, boxed and final drafts": ("<think>So \\boxed{33}, so <final>33</final>", "missing", None, -1.5),
    "cut off in think, no draft": ("<think>3 * 11 is 30 plus", "missing", None, -1.5),
    "think, native boxed answer": (NATIVE, "native", "33", 3.0),
    "think, native wrong answer": (NATIVE.replace("{33}", "{34}"), "native", "34", 0.0),
    "template opened think": ("3 * 11 = 33.</think>\n\n\\boxed{33}", "native", "33", 3.0),
    "no think, wrong tagged answer": (steps("3 * 11 = 34", final="34"), "ok", "34", 0.2),
    "no think, boxed only": ("So \\boxed{33}", "missing", "33", 2.0),
    "no think, wrong in broken tags": ("<step 1>3 * 11 = 34<final>34</final>", "mismatched", "34", -1.0),
}


@pytest.fixture(scope="module")
def think_verdicts(server):
    """The judge-off verdict of each THINK_CASES response, scored in one batch."""
    items = [{"id": name, "response": case[0], "ground_truth": 33} for name, case in THINK_CASES.items()]
    return {o["id"]: o for o in score(server, items, {"judge": False})}


@pytest.mark.parametrize("name", list(THINK_CASES))
def test_think_block_takes_no_part_in_the_verdict(think_verdicts, name):
    response, fmt, answer, g = THINK_CASES[name]
    out = think_verdicts[name]
    assert out["error"] is None
    assert (out["info"]["format"], out["info"]["answer"], out["global"]["score"]) == (fmt, answer, pytest.approx(g))
    assert ("think_truncated" in out["flags"]) == name.startswith("cut off")
    think = out["info"]["think"]
    assert all(st["start"] >= think["end"] for st in out["info"]["steps"])  # no step inside the think block
    if think["state"] == "closed":
        assert response[: think["end"]].endswith("</think>")


def test_a_cut_off_think_block_scores_below_every_finished_wrong_answer(think_verdicts):
    cut = [think_verdicts[n]["global"]["score"] for n in THINK_CASES if n.startswith("cut off")]
    wrong = [think_verdicts[n]["global"]["score"] for n in THINK_CASES if "wrong" in n]
    assert max(cut) < min(wrong) == -1.0
    drafts = think_verdicts["cut off in think, boxed and final drafts"]
    assert drafts["info"]["think"] == {"state": "truncated", "end": 42} and drafts["info"]["steps"] == []
    assert drafts["global"]["parts"] == {"answer": 0.0, "format": -1.0, "think_truncated": -0.5}


def test_steps_and_spans_come_only_from_the_answer(server, judge):
    """Judge on: the draft steps are never judged (their WRONG would be -1), the spans are the answer's steps."""
    response = DRAFTS + GOOD
    out, calls = calls_for(judge, lambda: one(server, response))
    assert out["info"]["think"] == {"state": "closed", "end": 106} and calls == 2
    assert out["global"]["score"] == pytest.approx(3.2) and out["info"]["step_source"] == "tags"
    assert [(sp["start"], sp["end"], sp["value"]) for sp in out["local"]] == [(107, 141, 0.25), (142, 179, 0.25)]
    assert response[100:141] == "think>\n<step 1>3 * 11 is 30 + 3.</step 1>"


def test_a_native_answers_paragraphs_are_its_steps(server, judge):
    """No step tags after </think>: the paragraphs before the answer's are judged as steps (untagged_steps)."""
    out, calls = calls_for(judge, lambda: one(server, NATIVE))
    assert NATIVE[37:55] == "Three tens are 30." and NATIVE[57:74] == "Plus three is 33."
    assert calls == 2 and out["info"]["step_source"] == "paragraphs"
    assert [(sp["start"], sp["end"], sp["value"]) for sp in out["local"]] == [(37, 55, 0.25), (57, 74, 0.25)]
    assert out["global"] == {"score": 3.0, "parts": {"answer": 3.0, "format": 0.0}}
    off = one(server, NATIVE, options={"untagged_steps": "none"})
    assert off["local"] == [] and off["info"]["step_source"] == "none" and off["global"]["score"] == 3.0
    alone = one(server, "<think>hm</think>\nSo the answer is \\boxed{33}.")  # only the answer's paragraph: no step
    assert alone["local"] == [] and alone["info"]["steps"] == []


def test_think_knobs_per_request(server):
    """think_local puts its value on the think block; think_opened makes a response without </think> cut off."""
    out = one(server, NATIVE, options={"judge": False, "think_local": -0.01})
    assert out["local"] == [{"start": 0, "end": 35, "value": -0.01}] and NATIVE[:35].endswith("</think>")
    plain = "3 * 11 = 33, so \\boxed{33}"
    assert one(server, plain, options={"judge": False})["global"]["score"] == 2.0
    opened = one(server, plain, options={"judge": False, "think_opened": True})
    assert opened["global"]["score"] == -1.5 and "think_truncated" in opened["flags"]
    bad = score(server, [{"response": NATIVE, "ground_truth": 33}], {"untagged_steps": "think"})[0]
    assert "untagged_steps" in bad["error"]


# ----------------------------------------------------------------------------------------------- the CLI


def test_cli_serves(judge):
    port = free_port()
    env = {**os.environ, "MATH_JUDGE_BASE_URL": judge.base_url, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "reward_servers.math", "--port", str(port), "--workers", "1", "--token", "t"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(url + "/health", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline
            time.sleep(0.2)
        body = {"items": [{"id": 1, "response": steps("fine"), "ground_truth": "033"}]}
        assert requests.post(url + "/score", json=body).status_code == 401
        r = requests.post(url + "/score", json=body, headers={"Authorization": "Bearer t"})
        out = r.json()["items"][0]
        assert out["global"]["score"] == pytest.approx(3.2) and out["local"][0]["value"] == pytest.approx(0.5)
    finally:
        proc.terminate()
        proc.wait(20)


def test_health_503_when_judge_unreachable():
    port = free_port()  # nothing listens there
    judge = JudgeConfig(base_url=f"http://127.0.0.1:{port}/v1", max_retries=0, timeout_s=1)
    cfg = MathConfig(workers=1, judge_enabled=True, judge=judge)
    with ServerThread(create_app(MathScorer(cfg))) as srv:
        h = requests.get(srv.url + "/health")
        assert h.status_code == 503 and h.json()["judge"] == "unreachable"
        out = score(srv, [{"response": steps("a", "b"), "ground_truth": 33}])[0]
        assert out["info"]["correct"] is True and "judge_unavailable" in out["flags"] and out["local"] == []
