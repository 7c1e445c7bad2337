"""The `toy_turns` task: its scorer per turn by hand for every behaviour, hostile responses and layouts (a verdict,
never a crash), the warm start's chats, the parquet rows and the CPU recipe's composed config."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tests.conftest import compose_verl_config
from tests.harness.recipes import cpu_train_args
from verl_bot.credit.verdict import validate_verdict
from verl_bot_demo.calc import tool_call
from verl_bot_demo.scorers import toy_turns
from verl_bot_demo.toy_math import Problem
from verl_bot_demo.toy_turns import chat, rows

PROMPT = "Compute 3+4-2."
CONTEXT = "\n<|im_start|>tool\n{reply}<|im_end|>\n<|im_start|>assistant\n"


def layout(*turns: str, replies: tuple[str, ...] = ()) -> tuple[str, list[dict]]:
    """A response of assistant turns with a tool context after each but the last (its reply from `replies`)."""
    text, runs = "", []
    for k, turn in enumerate(turns):
        runs.append({"turn": k, "role": "assistant", "start": len(text), "end": len(text) + len(turn)})
        text += turn
        if k < len(turns) - 1:
            context = CONTEXT.format(reply=replies[k] if k < len(replies) else "5")
            runs.append({"turn": k, "role": "context", "start": len(text), "end": len(text) + len(context)})
            text += context
    return text, runs


def score(*turns: str, truth: str = "5", replies: tuple[str, ...] = ()) -> dict:
    text, runs = layout(*turns, replies=replies)
    verdict = toy_turns(PROMPT, text, truth, {"expression": "3+4-2"}, turns=runs if len(turns) > 1 else None)
    validate_verdict(verdict, turn_count=len(turns))
    return verdict


def values(verdict: dict) -> list[float]:
    return [entry["value"] for entry in verdict["turns"]]


RIGHT, WRONG = tool_call("3+4-2"), tool_call("3+4-1")


@pytest.mark.parametrize(("turns", "replies", "g", "expected", "flags"), [
    (("<final>5</final>",), (), 1.0, [0.0], ["direct"]),  # at once, right
    (("<final>4</final>",), (), 0.0, [0.0], ["direct"]),  # at once, wrong: G alone says so
    ((RIGHT, "<final>5</final>"), ("5",), 1.0, [0.5, 0.5], []),  # one right call, answers its reply
    ((RIGHT, "<final>4</final>"), ("5",), 0.0, [0.5, -0.5], []),  # ignores the reply
    ((WRONG, "<final>6</final>"), ("6",), 0.0, [-0.5, 0.5], ["wasted_call"]),  # wrong call, faithful to it
    ((RIGHT, RIGHT, "<final>5</final>"), ("5", "5"), 1.0, [0.5, -0.5, 0.5], ["wasted_call"]),  # a repeat
    ((WRONG, RIGHT, "<final>5</final>"), ("6", "5"), 1.0, [-0.5, 0.5, 0.5], ["wasted_call"]),  # a second try
    ((RIGHT, WRONG, "<final>5</final>"), ("5", "6"), 1.0, [0.5, -0.5, -0.5], ["wasted_call"]),  # not the last reply
    ((RIGHT, RIGHT), ("5",), 0.0, [0.5, -0.5], ["wasted_call", "no_final"]),  # out of turns before an answer
])
def test_each_turn_by_hand(turns, replies, g, expected, flags):
    verdict = score(*turns, replies=replies)
    assert verdict["global"] == {"score": g, "parts": {"correct": g}}
    assert values(verdict) == expected
    assert verdict["flags"] == flags
    calls = len(expected) - ("no_final" not in flags)  # every turn but the answer turn
    assert verdict["info"] == {"correct": bool(g), "solved": bool(g), "calls": calls}


HOSTILE_RESPONSES = [
    "", " ", "<final></final>", "<final>5", "</final>5<final>", "<tool_call></tool_call>", "<tool_call>{\"name\":",
    '<tool_call>{"name": "calc", "arguments": {"expression": 5}}</tool_call>',
    '<tool_call>{"name": "calc", "arguments": "3+4-2"}</tool_call>', '<tool_call>[1, 2]</tool_call><final>5</final>',
    "<final>" + "9" * 100_000 + "</final>", "\x00\ud800<final>5</final>", "<final><final>5</final></final>",
]


@pytest.mark.parametrize("response", HOSTILE_RESPONSES)
def test_hostile_single_turn_responses_get_a_verdict(response):
    verdict = toy_turns(PROMPT, response, "5", None, turns=None)
    validate_verdict(verdict, turn_count=1)
    assert len(verdict["turns"]) == 1 and verdict["global"]["score"] in (0.0, 1.0)


@pytest.mark.parametrize("prompt,truth,extra", [(None, None, None), (123, 5, "not a dict"), ("", "", {}),
                                                ({"role": "user"}, ["5"], {"expression": None})])
def test_hostile_prompts_truths_and_extra_info_get_a_verdict(prompt, truth, extra):
    text, runs = layout(RIGHT, "<final>5</final>")
    verdict = toy_turns(prompt, text, truth, extra, turns=runs)
    validate_verdict(verdict, turn_count=2)
    assert values(verdict)[1] == 0.5  # it answered the tool's reply, whatever the problem


def test_hostile_layouts_get_a_verdict():
    text, runs = layout(RIGHT, "junk", "<final>5</final>")
    assert values(score(RIGHT, "junk", "<final>5</final>")) == [0.5, -0.5, 0.5]  # an unparseable call is wasted
    empty_turn = [{"turn": 0, "role": "assistant", "start": 0, "end": 0},
                  {"turn": 0, "role": "context", "start": 0, "end": len(text)},
                  {"turn": 1, "role": "assistant", "start": len(text), "end": len(text)}]
    verdict = toy_turns(PROMPT, text, "5", None, turns=empty_turn)  # turns of no text: calls that sent nothing
    validate_verdict(verdict, turn_count=2)
    assert values(verdict) == [-0.5, -0.5] and verdict["flags"] == ["wasted_call", "no_final"]
    context_first = [{"turn": 0, "role": "context", "start": 0, "end": 3}, *runs[1:]]
    validate_verdict(toy_turns(PROMPT, text, "5", None, turns=context_first), turn_count=3)


def test_the_warm_start_mixes_the_behaviours():
    rng = random.Random(0)
    problem = Problem(3, (("+", 4), ("-", 2)))
    kinds = Counter()
    for _ in range(2000):
        messages = chat(problem, rng, direct=0.3, repeat=0.2)
        assert messages[-1]["role"] == "assistant" and messages[-1]["content"].startswith("<final>")
        kinds[sum(m["role"] == "assistant" for m in messages)] += 1
    assert kinds.keys() == {1, 2, 3}
    assert abs(kinds[1] / 2000 - 0.3) < 0.04 and abs(kinds[3] / 2000 - 0.2) < 0.04
    clean = chat(problem, random.Random(1))
    assert clean == [{"role": "assistant", "content": RIGHT}, {"role": "tool", "content": "5"},
                     {"role": "assistant", "content": "<final>5</final>"}]
    one_op = Problem(3, (("+", 4),))
    assert all(chat(one_op, random.Random(s), direct=1.0) == [{"role": "assistant", "content": "<final>7</final>"}]
               for s in range(20))  # one operation: answered right at once


def test_rows_are_verl_rows_with_one_to_four_operations():
    out = rows(200, 0, "train")
    assert out[0]["data_source"] == "toy_turns" and out[0]["extra_info"]["split"] == "train"
    ops = {r["extra_info"]["expression"].count("+") + r["extra_info"]["expression"].count("-") for r in out}
    assert ops == {1, 2, 3, 4}
    assert all(r["prompt"][0]["content"] == f"Compute {r['extra_info']['expression']}." for r in out)

def test_cpu_train_composes_toy_turns_with_up_to_four_turns():
    cfg = compose_verl_config(cpu_train_args("bot", "toy_turns"))
    rollout = cfg.actor_rollout_ref.rollout
    assert (rollout.agent.default_agent_loop, rollout.multi_turn.max_assistant_turns) == ("tool_agent", 4)
    assert cfg.data.max_response_length == 128 and cfg.data.train_files.endswith("toy_turns_data/train.parquet")
    assert cfg.actor_rollout_ref.model.path.endswith("tiny_model_toy_turns_h2_s0")
