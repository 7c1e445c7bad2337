"""The math verdict as a pure function (`reward_servers.math.verdict.math_verdict`) on hand-written facts: each
expected verdict computed by hand from Eq. 8 with the default weights (answer 3, local 0.5, format +0.2 / -1 / -1 /
0, think truncated -0.5). The facts gathered over HTTP: tests/component/test_math_server.py."""

import pytest

from reward_servers.math.config import MathConfig
from reward_servers.math.parsing import Answer, Parsed
from reward_servers.math.step_judge import StepVerdict
from reward_servers.math.verdict import AnswerCheck, Judging, MathFacts, Reading, math_verdict, read_response
from verl_bot_contract.steps import Step
from verl_bot_contract.think import ThinkSplit

TAGGED_TEXT = "<step 1>3*11 = 33</step 1><step 2>so 33</step 2><final>033</final>"
STEPS = [Step(1, 0, 26, 8, 17, "3*11 = 33"), Step(2, 26, 48, 34, 39, "so 33")]  # each from its tag to its closing tag
TAGGED = Reading(ThinkSplit(0, "none"), Parsed(steps=STEPS, final=(55, 58), format="ok"),
                 Answer("033", "final", 55, 58), STEPS, "tags", "ok")
NATIVE_TEXT = "<think>hm</think>\n6*7 is 42.\n\nSo \\boxed{41} no \\boxed{42}"
PARAGRAPH = [Step(1, 18, 28, 18, 28, "6*7 is 42.")]  # the paragraph before the answer's, after the think block
NATIVE = Reading(ThinkSplit(17, "closed"), Parsed(problems=["no tags"]), Answer("42", "boxed", 54, 56, n_boxed=2),
                 PARAGRAPH, "paragraphs", "native")
LLM = Judging(True, "llm", "error_propagation", 3)


def verdict(facts, **knobs):
    result = math_verdict(facts, MathConfig(**knobs))
    return result.score, result.parts, result.local, result.flags, result.info


def test_the_hand_written_readings_are_what_their_texts_read():
    assert read_response(TAGGED_TEXT, MathConfig()) == TAGGED
    assert read_response(NATIVE_TEXT, MathConfig()) == NATIVE


def test_a_correct_answer_in_the_perfect_format_with_a_right_and_a_wrong_step():
    facts = MathFacts(TAGGED, "aime", AnswerCheck(True, "33"), LLM, [StepVerdict(1, "correct"), StepVerdict(-1,
                      "incorrect")])
    score, parts, local, flags, info = verdict(facts)
    assert (score, parts) == (pytest.approx(3.2), {"answer": 3.0, "format": 0.2})  # 3 * 1 + 0.2
    # 0.5 * e_s / |S| on each step's block: +0.25, -0.25
    assert local == [{"start": 0, "end": 26, "value": 0.25}, {"start": 26, "end": 48, "value": -0.25}]
    assert flags == []
    assert info == {
        "answer": "33", "answer_text": "033", "answer_source": "final", "answer_type": "aime", "correct": True,
        "format": "ok", "format_problems": [], "step_source": "tags", "think": {"state": "none", "end": 0},
        "judge": {"strategy": "error_propagation", "window": 3},
        "steps": [{"index": 1, "start": 0, "end": 26, "score": 1, "verdict": "correct"},
                  {"index": 2, "start": 26, "end": 48, "score": -1, "verdict": "incorrect"}],
    }


def test_a_judge_that_failed_keeps_g_and_drops_the_steps_signal():
    facts = MathFacts(TAGGED, "aime", AnswerCheck(False, "34"), LLM, None, "HTTP 503 " + "x" * 400)
    score, parts, local, flags, info = verdict(facts)
    assert (score, parts, local) == (pytest.approx(0.2), {"answer": 0.0, "format": 0.2}, [])
    assert flags == ["judge_unavailable"]
    assert info["judge"] == {"strategy": "error_propagation", "window": 3, "error": ("HTTP 503 " + "x" * 400)[:300]}
    assert [s["score"] for s in info["steps"]] == [None, None] and "verdict" not in info["steps"][0]


def test_unparseable_and_unjudged_steps_are_flagged_and_carry_no_signal():
    facts = MathFacts(TAGGED, "aime", AnswerCheck(True, "33"), Judging(True, "rule", "independent"),
                      [StepVerdict(0, "unparseable"), StepVerdict(0, "skipped")])
    score, parts, local, flags, info = verdict(facts, max_steps_judged=1)
    assert (score, local) == (pytest.approx(3.2), [])  # e_s = 0 on both steps: no span
    assert flags == ["judge_unparseable", "steps_truncated"]
    assert info["judge"] == {"kind": "rule", "strategy": "independent"}


def test_a_response_cut_off_in_its_think_block_scores_below_every_finished_one():
    think = ThinkSplit(40, "truncated")  # a 40-character response, all think block
    reading = Reading(think, Parsed(), None, [], "none", "missing")
    facts = MathFacts(reading, "aime", AnswerCheck(False, None, ("no_answer",)), Judging(False))
    score, parts, local, flags, info = verdict(facts, think_local=0.1)
    assert score == pytest.approx(-1.5)  # 0 + format missing (-1) + think truncated (-0.5)
    assert parts == {"answer": 0.0, "format": -1.0, "think_truncated": -0.5}
    assert local == [{"start": 0, "end": 40, "value": 0.1}]  # think_local on every character of the block
    assert flags == ["no_answer", "think_truncated"]
    assert info["judge"] == {"enabled": False} and info["think"] == {"state": "truncated", "end": 40}
    assert (info["answer_text"], info["answer_source"], info["steps"]) == (None, None, [])


def test_a_native_answer_with_two_boxes_and_its_paragraph_steps():
    facts = MathFacts(NATIVE, "aime", AnswerCheck(True, "42"), LLM, [StepVerdict(1, "correct")])
    score, parts, local, flags, _ = verdict(facts)
    assert (score, parts) == (pytest.approx(3.0), {"answer": 3.0, "format": 0.0})  # format_native: 0
    assert local == [{"start": 18, "end": 28, "value": 0.5}]  # 0.5 * 1 / 1
    assert flags == ["multiple_boxed"]


def test_mismatched_tags_cost_the_format_penalty_and_say_why():
    reading = Reading(ThinkSplit(0, "none"), Parsed(steps=STEPS, format="mismatched", problems=["stray </final>"] * 30),
                      Answer("033", "final", 55, 58), STEPS, "tags", "mismatched")
    score, parts, _, _, info = verdict(MathFacts(reading, "math", AnswerCheck(True, "33"), Judging(False)),
                                       format_penalty=-2.0)
    assert (score, parts) == (pytest.approx(1.0), {"answer": 3.0, "format": -2.0})
    assert info["format_problems"] == ["stray </final>"] * 20 and info["answer_type"] == "math"
