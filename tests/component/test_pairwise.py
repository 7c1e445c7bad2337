"""ABBA pairwise win rate: hand-computed rounds, and a real HTTP round trip to the deterministic fake VLM judge."""

import asyncio
import base64
import json

import pytest

from reward_servers.common.fake_judge import FakeJudge, Rule
from reward_servers.common.judge import JudgeClient, JudgeConfig
from verl_bot.eval.pairwise import ROUNDS, abba_score, judge_pair, parse_pick, round_winner, win_rate


def test_parse_pick_takes_the_last_word():
    assert parse_pick("The first page is nicer.\nSECOND") == 1
    assert parse_pick("first") == 0
    assert parse_pick("I cannot decide") is None


def test_rounds_are_abba_and_positions_map_back_to_runs():
    assert ROUNDS == ("AB", "BA", "BA", "AB")
    assert [round_winner(order, 0) for order in ROUNDS] == ["A", "B", "B", "A"]  # always "first": 2-2
    assert abba_score([round_winner(order, 0) for order in ROUNDS]) == 0.5  # position bias -> tie


@pytest.mark.parametrize(
    ("winners", "score"),
    [
        (["A", "A", "A", "B"], 1.0),
        (["B", "B", "A", "B"], 0.0),
        (["A", "B", "A", "B"], 0.5),
        (["A", None, None, "B"], 0.5),
        (["A", "A", None, "B"], 1.0),
        ([None] * 4, 0.5),
    ],
)
def test_majority_wins_and_two_two_is_a_tie(winners, score):
    assert abba_score(winners) == score


def test_win_and_tie_rates():
    assert win_rate([1.0, 0.5, 0.0, 1.0]) == (0.625, 0.25)
    with pytest.raises(ValueError):
        win_rate([])


def test_judge_pair_over_http_sees_both_screenshots_in_abba_order():
    png_a, png_b = b"\x89PNG-run-A", b"\x89PNG-run-B"

    def prefer_a(messages):
        images = [p["image_url"]["url"] for p in messages[-1]["content"] if p.get("type") == "image_url"]
        first = base64.b64decode(images[0].split(",", 1)[1])
        return "FIRST" if first == png_a else "SECOND"

    async def run(rules):
        with FakeJudge(rules, model="fake-vlm") as judge:
            client = JudgeClient(JudgeConfig(base_url=judge.base_url, max_retries=0, timeout_s=5))
            try:
                result = await judge_pair(client, "A todo list", png_a, png_b)
            finally:
                await client.close()
            return result, judge.requests

    (score, winners), requests = asyncio.run(run([Rule(reply=prefer_a)]))
    assert score == 1.0 and winners == ["A", "A", "A", "A"]
    assert len(requests) == 4
    bodies = [json.dumps(r) for r in requests]  # the rounds may run concurrently: every request, in any order
    assert all("A todo list" in body and "import" not in body for body in bodies)  # the prompt, never code
    (score, winners), _ = asyncio.run(run([Rule(status=500)]))  # judge down: no round counts
    assert score == 0.5 and winners == [None] * 4
