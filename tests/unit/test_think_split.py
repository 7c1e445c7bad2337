"""A reasoning model's think block, piece by piece: the one split (`verl_bot_contract.think`), the math parser's
steps of an answer without tags, the React extraction after the block, the math server's CLI knobs, the manager's
decoding of special think tags, and any response against the math scorer (hypothesis).

The servers' verdicts over HTTP: tests/component/test_math_server.py, tests/component/test_react_server.py,
tests/component/test_toy_math.py.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken
from transformers import AutoTokenizer

from reward_servers.math.__main__ import build_parser, config_from_args
from reward_servers.math.parsing import find_steps, paragraph_steps, parse_response
from reward_servers.react.extract import extract
from verl_bot.credit.spans import token_char_spans
from verl_bot_contract.think import ThinkSplit, split_think
from verl_bot_demo.scorers import toy_math


@pytest.mark.parametrize(
    ("response", "opened", "split"),
    [
        ("<think>a</think>b", False, ThinkSplit(16, "closed")),
        ("\n <think>a</think>\nb", False, ThinkSplit(18, "closed")),  # whitespace before the block is part of it
        ("a</think>b", False, ThinkSplit(9, "closed")),  # the template opened the block
        ("<think>a</think>b</think>", False, ThinkSplit(16, "closed")),  # the first </think> ends it
        ("<think>a <final>1</final>", False, ThinkSplit(25, "truncated")),
        ("  <think>", False, ThinkSplit(9, "truncated")),
        ("a <final>1</final>", True, ThinkSplit(18, "truncated")),  # the template opened it, never closed
        ("a <final>1</final>", False, ThinkSplit(0, "none")),
        ("answer first, then <think>a", False, ThinkSplit(0, "none")),  # a block that does not lead is text
        ("<THINK>a</THINK>", False, ThinkSplit(0, "none")),  # the tags are the tokenizers' exact strings
        ("", False, ThinkSplit(0, "none")),
        ("", True, ThinkSplit(0, "truncated")),
    ],
)
def test_split_think(response, opened, split):
    assert split_think(response, opened) == split


def test_an_untagged_answers_paragraphs_before_the_answers_are_its_steps():
    text = "<think>x</think>\n\n  First.\r\n \r\nSecond\nline.  \n\n\nThird \\boxed{1}.\n\nAfter."
    end = split_think(text).end
    assert [text[s.start : s.end] for s in paragraph_steps(text, end, text.index("1}"))] == ["First.", "Second\nline."]
    assert [text[s.start : s.end] for s in paragraph_steps(text, end)][-2:] == ["Third \\boxed{1}.", "After."]
    tagged = "<think>x</think>\nOne.\n\nTwo <final>2</final>"  # the paragraph running into <final> is the answer's
    assert [tagged[s.start : s.end] for s in paragraph_steps(tagged, 16)] == ["One."]
    assert paragraph_steps("<think>x</think>\n\n", 16) == []


def test_steps_come_from_tags_first_and_from_paragraphs_only_after_a_closed_think_block():
    native = "<think>x</think>\n\nA.\n\nB \\boxed{1}"
    parsed = parse_response(native, 16)
    steps, source = find_steps(native, parsed, split_think(native), None, "paragraphs")
    assert source == "paragraphs" and [native[s.start : s.end] for s in steps] == ["A.", "B \\boxed{1}"]
    assert find_steps(native, parsed, split_think(native), None, "none") == ([], "none")
    plain = "A.\n\nB \\boxed{1}"  # no think block: the paper's format, unchanged (no steps without tags)
    assert find_steps(plain, parse_response(plain), split_think(plain), None, "paragraphs") == ([], "none")


def test_react_extraction_reads_only_the_answer():
    draft = "```jsx\nexport default function Draft() {\n  return <div>a much longer draft</div>;\n}\n```\n"
    answer = "```jsx\nexport default () => <p/>;\n```"
    response = f"<think>\n{draft}</think>\n{answer}"
    ex = extract(response, split_think(response).end)
    assert ex.is_component and ex.code == "export default () => <p/>;"
    assert ex.start == response.index("export default (")
    assert extract(response).code.startswith("export default function Draft")  # what the whole response gives
    raw = "<think>\nconst plan = 1;\n</think>\nimport React from 'react';\nexport default function A() { return <a/>; }"
    ex = extract(raw, split_think(raw).end)
    assert ex.source == "raw" and ex.start == raw.index("import React")


def test_the_math_servers_think_flags():
    cfg = config_from_args(build_parser().parse_args([]))
    assert (cfg.think_opened, cfg.think_local, cfg.untagged_steps, cfg.format_native) == (False, 0.0, "paragraphs", 0.0)
    assert cfg.think_truncated_penalty == -0.5
    args = "--think-opened --think-local -0.01 --untagged-steps none --format-native 0.2 --think-truncated-penalty -1"
    cfg = config_from_args(build_parser().parse_args(args.split()))
    assert (cfg.think_opened, cfg.think_local, cfg.untagged_steps, cfg.format_native) == (True, -0.01, "none", 0.2)
    assert cfg.think_truncated_penalty == -1.0


def test_think_tags_a_tokenizer_marks_special_reach_the_scorer(tiny_model_dir):
    """A special token is dropped by decode(skip_special_tokens=True): the think tags are written out instead."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in ("<think>", "</think>")])
    response = "<think>so 5</think>\n\n\\boxed{5}"
    ids = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "so 5\n\n\\boxed{5}"  # what it would be without
    text, spans = token_char_spans(tokenizer, ids)
    assert text == response
    assert [text[a:b] for a, b in spans][:1] == ["<think>"] and spans[-1].tolist() == [len(text), len(text)]
    assert "</think>" in [text[a:b] for a, b in spans]


PIECES = ["<think>", "</think>", "<step 1>", "</step 1>", "<step 2>", "</step 2>", "<final>", "</final>",
          "\\boxed{5}", "\\boxed{", "}", "3+4=7", "7-2=5", "\n\n", "\n", " ", "x", "```jsx\n"]


@given(st.lists(st.sampled_from(PIECES), max_size=24).map("".join))
@settings(max_examples=200, deadline=None)
def test_any_response_gets_a_verdict_that_ignores_its_think_block(response):
    """toy_math (the math scorer, rule judge): steps and spans only after the think block; a response cut off inside
    it has no answer and scores below every finished response."""
    verdict = asyncio.run(toy_math("Compute 3+4-2.", response, "5"))
    think = split_think(response)
    assert verdict["error"] is None and verdict["info"]["think"] == {"state": think.state, "end": think.end}
    assert all(s["start"] >= think.end for s in verdict["info"]["steps"] + verdict["local"])
    if think.truncated:
        assert verdict["info"]["answer"] is None and verdict["global"]["score"] == -1.5
        assert "think_truncated" in verdict["flags"]
    else:
        assert verdict["global"]["score"] >= -1.0
