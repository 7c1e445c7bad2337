"""The one step splitter (`verl_bot_contract.steps`): the math server's untagged paragraphs, the served PRM's
steps and the reward streams' `step_end` all split with it. Offsets and texts by hand."""

import numpy as np

from verl_bot.credit.streams import step_end_mask
from verl_bot_contract.steps import Step, split_steps


def test_steps_end_at_blank_line_runs_and_join_pieces_without_text():
    text = "\n\nfirst\n\n\nsecond\nline\n\nthird\n\n"
    steps = split_steps(text)
    assert [s.text for s in steps] == ["first", "second\nline", "third"]
    assert [(s.start, s.end) for s in steps] == [(0, 10), (10, 23), (23, 30)]  # leading / trailing runs joined
    assert steps[1] == Step(2, 10, 23, 10, 21, "second\nline")
    assert [text[s.text_start : s.text_end] for s in steps] == [s.text for s in steps]
    assert split_steps("") == [] and split_steps("\n\n") == []


def test_a_blank_line_may_hold_spaces_tabs_and_carriage_returns():
    assert split_steps("a\r\n \r\nb\n \n\nc") == [Step(1, 0, 6, 0, 1, "a"), Step(2, 6, 11, 6, 7, "b"),
                                                   Step(3, 11, 12, 11, 12, "c")]
    assert len(split_steps("a\n\t\nb")) == 2 and len(split_steps("a\nb")) == 1
    # a piece of other whitespace between two runs (a no-break space) has no text: it joins the next step
    assert split_steps("a\n\n\u00a0\n\nb") == [Step(1, 0, 3, 0, 1, "a"), Step(2, 3, 7, 6, 7, "b")]


def test_other_separators_and_bounds():
    text = "a ## b####c"
    assert split_steps(text, "##") == [Step(1, 0, 4, 0, 1, "a"), Step(2, 4, 10, 5, 6, "b"),
                                       Step(3, 10, 11, 10, 11, "c")]  # a repeated character: longer runs too
    assert [s.text for s in split_steps("x<s><s>y<s>z", "<s>")] == ["x", "y", "z"]
    assert split_steps("skip\n\nA\n\nB tail", start=6, end=10) == [Step(1, 6, 9, 6, 7, "A"), Step(2, 9, 10, 9, 10, "B")]


def test_the_streams_step_ends_are_the_steps_last_characters():
    """PURE's `step_end` marks the token holding each step's last character but the last step's, and the last token
    (one character per token here): the leading blank lines belong to the first step, as the PRM splits."""
    text = "\n\nfirst\n\n\nsecond\nline\n\nthird\n\n"
    spans = np.array([[i, i + 1] for i in range(len(text))])
    assert np.flatnonzero(step_end_mask(spans, text)).tolist() == [9, 22, 29]
    assert [s.end - 1 for s in split_steps(text)] == [9, 22, 29]
