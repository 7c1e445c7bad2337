"""Pure parts of the math reward: tags, format, strict answer extraction, verdicts, window, Eq. 8 spans."""

from __future__ import annotations

import time

import pytest

from reward_servers.math.config import MathConfig
from reward_servers.math.parsing import (
    aime_ground_truth,
    as_int_literal,
    boxed_contents,
    brace_depth,
    extract_answer,
    parse_response,
    problem_text,
)
from reward_servers.math.step_judge import build_messages, fill, load_prompts, parse_verdict, window_indices
from reward_servers.math.verdict import format_score, step_spans

GOOD = "Let me think.\n<step 1>We need 3 * 11.</step 1>\n<step 2>That is 33.</step 2>\n<final>\\boxed{033}</final>"


def test_perfect_format_and_spans():
    p = parse_response(GOOD)
    assert p.format == "ok" and p.problems == []
    assert [s.index for s in p.steps] == [1, 2]
    s1, s2 = p.steps
    assert GOOD[s1.start : s1.end] == "<step 1>We need 3 * 11.</step 1>"
    assert GOOD[s1.text_start : s1.text_end] == "We need 3 * 11."
    assert GOOD[s2.start : s2.end] == "<step 2>That is 33.</step 2>"
    a, b = p.final
    assert GOOD[a:b] == "\\boxed{033}"
    ans = extract_answer(GOOD, p)
    assert (ans.text, ans.source, GOOD[ans.start : ans.end]) == ("033", "final", "033")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("<step 1>a</step 1><step 2>b<final>1</final>", "<final> inside step 2"),  # unclosed step
        ("<step 1>a</step 1><step 3>b</step 3><final>1</final>", "expected"),  # numbering gap
        ("<step 1>a</step 2><final>1</final>", "closes step 1"),
        ("<step 1>a</step 1><final>1</final><final>2</final>", "2 <final> blocks"),
        ("<step 1>a</step 1>", "no <final>"),
        ("<final>1</final>", "no steps"),
        ("<step 1>a</step 1></step 1><final>1</final>", "stray"),
        ("<step 1>a</step 1><final>1", "not closed"),
        ("<step 1>a</step 1><final>1</final><step 2>b</step 2>", "after <final>"),
    ],
)
def test_mismatched_format(text, problem):
    p = parse_response(text)
    assert p.format == "mismatched"
    assert any(problem in x for x in p.problems), p.problems


def test_missing_and_lenient_tags():
    assert parse_response("just text, answer 33").format == "missing"
    p = parse_response("<STEP 1>x</step><step 2 >y</ step 2><final>5</final>")
    assert p.format == "ok" and len(p.steps) == 2


def test_unclosed_step_span_runs_to_next_tag():
    text = "<step 1>aa<step 2>bb</step 2><final>1</final>"
    p = parse_response(text)
    assert text[p.steps[0].start : p.steps[0].end] == "<step 1>aa" and not p.steps[0].closed
    assert p.steps[1].closed


def test_extraction_is_strict():
    # no <final>: the last \boxed{}, else nothing; never a bare number
    assert extract_answer("the answer is 33", parse_response("the answer is 33")) is None
    t = "first \\boxed{12} then \\boxed{\\frac{1}{2}} ok"
    a = extract_answer(t, parse_response(t))
    assert (a.text, a.source, a.n_boxed) == ("\\frac{1}{2}", "boxed", 2)
    t = "<final>$33$.</final> \\boxed{34}"
    assert extract_answer(t, parse_response(t)).text == "33"  # <final> wins over a later box
    t = "<final>so 1 then \\boxed{7} and \\boxed{8}</final>"
    a = extract_answer(t, parse_response(t))
    assert (a.text, a.n_boxed) == ("8", 2)
    assert extract_answer("\\boxed{1", parse_response("\\boxed{1")) is None  # unbalanced


def test_boxed_and_depth_helpers():
    assert boxed_contents("\\boxed{a{b}c} \\fbox{d}") == [(7, 12), (20, 21)]
    assert boxed_contents("\\boxed{" + "{" * 70 + "}" * 70 + "}") == []  # deeper than 64: skipped
    assert brace_depth("\\frac{1}{\\frac{1}{2}}") == 2
    assert as_int_literal("033") == 33 and as_int_literal("-5") == -5 and as_int_literal("1{,}000") == 1000
    assert as_int_literal("3.0") is None and as_int_literal("x") is None


@pytest.mark.parametrize(
    ("gt", "want"),
    [
        (33, 33),
        ("033", 33),
        (" 33 ", 33),
        ("33.0", 33),
        (33.0, 33),
        ("\\boxed{33}", 33),
        ("$7$", 7),
        ("1000", 1000),
        ("-5", -5),
        ("1/2", None),
        (True, None),
        (None, None),
        (33.5, None),
    ],
)
def test_aime_ground_truth(gt, want):
    assert aime_ground_truth(gt) == want


def test_one_megabyte_parse_is_fast():
    big = "<step 1>" + ("x = 1 + 1 \\boxed{" * 3 + "}" * 3 + " ") * 40000 + "</step 1><final>42</final>"
    big = big + " " * max(0, 1_000_000 - len(big))
    t0 = time.perf_counter()
    p = parse_response(big)
    a = extract_answer(big, p)
    assert a.text == "42" and p.format == "ok"
    assert time.perf_counter() - t0 < 2.0


@pytest.mark.parametrize(
    ("reply", "e"),
    [
        ("The step is fine.\nVERDICT: correct", 1),
        ("verdict: Incorrect", -1),
        ("VERDICT: **uncertain**", 0),
        ("I first thought VERDICT: correct but no.\nVERDICT: incorrect", -1),  # last one wins
        ("correct", 1),
        ("Incorrect.", -1),
        ("VERDICT = -1", -1),
        ("asdf qwer", None),
        ("", None),
        ("The step is incorrect", None),  # no verdict line, not a bare word
    ],
)
def test_parse_verdict(reply, e):
    assert parse_verdict(reply) == e


def test_window_definition():
    assert list(window_indices(0, 3)) == []
    assert list(window_indices(5, 3)) == [2, 3, 4]
    assert list(window_indices(2, 3)) == [0, 1]
    assert list(window_indices(4, 0)) == []
    assert list(window_indices(4, -1)) == [0, 1, 2, 3]


def test_prompt_shows_window_and_verdicts():
    prompts = load_prompts()
    steps = ["alpha", "beta", "gamma", "delta"]
    msgs = build_messages(prompts, "P?", steps, 3, 1)
    user = msgs[1]["content"]
    assert "gamma" in user and "beta" not in user and "delta" in user and "P?" in user
    assert "step 4 of 4" in user
    msgs = build_messages(prompts, "P?", steps, 3, -1, verdicts=[1, -1, None])
    user = msgs[1]["content"]
    assert all(s in user for s in steps)
    assert "(your verdict: incorrect)" in user and "(your verdict: none)" in user
    assert "verdict you gave" in msgs[0]["content"]
    # placeholders inside the step text are not expanded again
    assert fill("{{a}} {{b}}", {"a": "{{b}}", "b": "x"}) == "{{b}} x"


def test_eq8_spans_and_format_scores():
    p = parse_response(GOOD)
    spans = step_spans(p.steps, [1, -1], local_weight=0.5)
    assert [(s["start"], s["end"], s["value"]) for s in spans] == [
        (p.steps[0].start, p.steps[0].end, 0.25),
        (p.steps[1].start, p.steps[1].end, -0.25),
    ]
    assert step_spans(p.steps, [0, 0], 0.5) == []
    cfg = MathConfig()
    assert (format_score("ok", cfg), format_score("mismatched", cfg), format_score("missing", cfg)) == (0.2, -1, -1)


def test_problem_text():
    assert problem_text("P") == "P"
    chat = [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "Q"}]}]
    assert problem_text(chat) == "Q"
    assert problem_text(None) == ""
