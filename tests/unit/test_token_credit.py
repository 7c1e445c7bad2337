"""`token_credit`: a verdict and a rollout's token layout -> token rewards, streams and reward metrics.

Every expected value is computed by hand from small layouts whose token spans are written out (no tokenizer):
G on every token, S the mean over each token's characters, the clip, EOS, context tokens, turns, a session's
outputs, a failed scorer, one reward per response, DAPO's shaping. The manager on real rows inside verl's reward
loop: tests/component/test_reward_manager.py and tests/unit/test_turns.py."""

from __future__ import annotations

import numpy as np
import pytest

from verl_bot.credit import streams
from verl_bot.credit.token_credit import CreditSettings, OutputLayout, TokenLayout, token_credit
from verl_bot.credit.verdict import ScorerFailure, validate_verdict
from verl_bot.rewards.settings import ManagerSettings

# "ab cd" + EOS: tokens "ab", " ", "cd", EOS (covers no character)
TEXT, SPANS = "ab cd", np.array([[0, 2], [2, 3], [3, 5], [5, 5]])
# a multi-turn response: turn 0 "ab" "c" EOS, context "\nt" "ool\n" (a tool reply), turn 1 "z" EOS
TURN_TEXT = "abc\ntool\nz"
TURN_SPANS = np.array([[0, 2], [2, 3], [3, 3], [3, 5], [5, 9], [9, 10], [10, 10]])
TURN_MASK = np.array([1, 1, 1, 0, 0, 1, 1])


def single(text=TEXT, spans=SPANS, mask=None) -> TokenLayout:
    return TokenLayout((OutputLayout(text, spans, mask),))


def verdict(score=0.5, local=(), parts=None, turn_count=2, **rest) -> dict:
    """A validated verdict of G = `score` with spans `local` (`rest`: its other keys)."""
    raw = {"global": {"score": score, "parts": parts or {}}, "local": list(local), **rest}
    return validate_verdict(raw, turn_count=turn_count, trajectory_count=2)


def span(start, end, value):
    return {"start": start, "end": end, "value": value}


def test_g_on_every_token_and_s_the_mean_over_each_tokens_characters():
    """S = -1 on characters 1..3 ("b", " ", "c"): "ab" -> -1/2, " " -> -1, "cd" -> -1/2, EOS -> 0;
    r = 0.5 + 0.5 * S."""
    v = verdict(0.5, [span(1, 4, -1.0)], parts={"clean": 0.25}, info={"solved": False}, flags=["x", "y"])
    credit = token_credit(v, single(), CreditSettings(w_global=1.0, w_local=0.5))
    assert credit.reward_score == pytest.approx([0.25, 0.0, 0.25, 0.5])
    assert credit.info == {"clean": 0.25, "scorer_failed": 0.0, "scorer_error": 0.0, "scorer_error_msg": "",
                           "flags": "x,y", "score": 0.5, "solved": 0.0, "acc": 0.0, "local_signal": 1.0}
    quiet = token_credit(verdict(0.5), single(), CreditSettings())  # no span: G alone, no local signal
    assert quiet.reward_score == [0.5] * 4 and quiet.info["local_signal"] == 0.0
    assert "solved" not in quiet.info  # the verdict reports no outcome


def test_s_is_clipped_per_token_after_spans_and_turns_add_up():
    """Spans -3 on "ab" and 0.4 on " ", turn 0 (the only one) 0.8 on every token, its EOS included:
    S = clip([-2.2, 1.2, 0.8, 0.8], 1) = [-1, 1, 0.8, 0.8]; local_clip 0 leaves it unclipped."""
    v = verdict(0.0, [span(0, 2, -3.0), span(2, 3, 0.4)], turns=[{"turn": 0, "value": 0.8}], turn_count=1)
    assert token_credit(v, single(), CreditSettings()).reward_score == pytest.approx([-1.0, 1.0, 0.8, 0.8])
    unclipped = token_credit(v, single(), CreditSettings(local_clip=0.0))
    assert unclipped.reward_score == pytest.approx([-2.2, 1.2, 0.8, 0.8])


def test_a_span_on_a_tool_reply_gives_no_token_any_s():
    """The context-token defect: a span only on the tool reply (characters 3..9, mask 0) wrote S into those tokens'
    rewards and counted the rollout in `local_signal`. Context tokens get no S; the dropped span is reported."""
    layout = single(TURN_TEXT, TURN_SPANS, TURN_MASK)
    credit = token_credit(verdict(0.5, [span(3, 9, -1.0)]), layout, CreditSettings())
    assert credit.reward_score == [0.5] * 7  # G on every token, context tokens included
    assert credit.info["local_signal"] == 0.0 and credit.info["local_on_context"] == 1.0
    # a span over "c" and the reply's first token: "c" gets it, the context token does not; turn 1's value lands on
    # its generated tokens, EOS included
    v = verdict(0.5, [span(2, 5, -1.0)], turns=[{"turn": 1, "value": 0.25}])
    credit = token_credit(v, layout, CreditSettings())
    assert credit.reward_score == pytest.approx([0.5, -0.5, 0.5, 0.5, 0.5, 0.75, 0.75])
    assert credit.info["local_signal"] == 1.0 and credit.info["local_on_context"] == 1.0
    clean = token_credit(verdict(0.5, [span(0, 2, -1.0)]), layout, CreditSettings())
    assert clean.reward_score == pytest.approx([-0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5])
    assert clean.info["local_on_context"] == 0.0
    assert "local_on_context" not in token_credit(verdict(0.5), single(), CreditSettings()).info  # no context


def test_the_turns_a_verdict_may_name():
    assert single(TURN_TEXT, TURN_SPANS, TURN_MASK).turn_count == 2
    assert single().turn_count == 1  # single-turn: turn 0 only
    assert single(mask=np.ones(4, dtype=np.int64)).turn_count == 1
    spans5 = np.array([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5]])
    assert single("abcde", spans5, np.array([1, 0, 1, 0, 1])).turn_count == 3
    assert single("abcde", spans5, np.array([0, 0, 1, 1, 0])).turn_count == 1  # leading context: turn 0's


def test_each_output_of_a_session_gets_its_own_s_under_one_g():
    """Output 0 "ab": its entry's span -1 on "b" and value 0.25 on every token -> S = [0.25, -0.75];
    output 1 "cd" + EOS (the last): the top-level span -0.5 on "c" and its entry's value 0.5 -> S = [0, 0.5, 0.5]."""
    layout = TokenLayout((OutputLayout("ab", np.array([[0, 1], [1, 2]]), None, "k0"),
                          OutputLayout("cd", np.array([[0, 1], [1, 2], [2, 2]]), None, "k1")))
    v = verdict(1.0, [span(0, 1, -0.5)], trajectories=[{"index": 0, "local": [span(1, 2, -1.0)], "value": 0.25},
                                                        {"index": 1, "value": 0.5}])
    credit = token_credit(v, layout, CreditSettings())
    assert credit.reward_score == {"token_rewards": [1.0, 1.5, 1.5],
                                   "by_trajectory": {"k0": [1.25, 0.25], "k1": [1.0, 1.5, 1.5]}}
    only_first = verdict(1.0, trajectories=[{"index": 0, "value": 0.25}])
    assert token_credit(only_first, layout, CreditSettings()).info["local_signal"] == 1.0  # any output counts
    with_streams = token_credit(v, layout, CreditSettings(streams=("local",))).reward_score
    assert with_streams["by_trajectory"]["k0"] == {"token_rewards": [1.25, 0.25], "streams": {"local": [0.25, -0.75]}}
    assert with_streams["token_rewards"] == [1.0, 1.5, 1.5] and "streams" not in with_streams


def test_a_failed_scorer_earns_failure_score_and_nothing_else():
    settings = CreditSettings(failure_score=-0.5, streams=("global", "local", "outcome", "format"))
    credit = token_credit(ScorerFailure("TimeoutError: slow"), single(), settings)
    assert credit.reward_score == {"token_rewards": [-0.5] * 4, "streams": {
        "global": [0.0, 0.0, 0.0, -0.5], "local": [0.0] * 4, "outcome": [0.0] * 4, "format": [0.0] * 4}}
    assert credit.info == {"scorer_failed": 1.0, "scorer_error": 0.0, "scorer_error_msg": "TimeoutError: slow",
                           "flags": "", "score": -0.5, "solved": 0.0, "acc": 0.0, "local_signal": 0.0}
    # the same streams of a verdict that solved it with a format part: outcome and format on the last token
    solved = verdict(1.2, [span(0, 2, -1.0)], parts={"format": 0.2}, info={"correct": True})
    streams = token_credit(solved, single(), settings).reward_score["streams"]
    assert streams["outcome"] == [0.0, 0.0, 0.0, 1.0] and streams["format"] == [0.0, 0.0, 0.0, 0.2]
    assert streams["local"] == [-1.0, 0.0, 0.0, 0.0] and streams["global"] == [0.0, 0.0, 0.0, 1.2]
    errored = verdict(-0.3, parts={"format": 0.2}, info={"correct": True}, error="bad item")
    assert token_credit(errored, single(), settings).info["scorer_error"] == 1.0
    assert token_credit(errored, single(), settings).reward_score["streams"]["outcome"] == [0.0] * 4


def test_one_reward_per_response_is_w_g_times_g_and_drops_the_turn_values():
    settings = CreditSettings(w_global=2.0, layout="scalar")
    with_turns = token_credit(verdict(0.25, [span(0, 2, -1.0)], turns=[{"turn": 0, "value": 1.0}]), single(), settings)
    assert with_turns.reward_score == 0.5 and with_turns.info["turns_unused"] == 1.0
    assert with_turns.info["local_unused"] == 1.0  # the span's -1 went nowhere, and the metrics say so
    assert "local_signal" not in with_turns.info
    plain = token_credit(verdict(0.25), single(), settings).info
    assert "turns_unused" not in plain and "local_unused" not in plain


def test_the_returns_layout_puts_g_once_on_the_last_token_and_s_where_it_lies():
    """S = -1 on characters 1..3: "ab" -> -1/2, " " -> -1, "cd" -> -1/2, EOS -> 0 (as above); w_g = 2, w_s = 0.5:
    r = 0.5 * S plus 2 * 0.5 on the last token = [-0.25, -0.5, -0.25, 1.0]; the return from each token (the sum
    from it on) is G's 1.0 plus the local signal after it: [0.0, 0.25, 0.75, 1.0]."""
    settings = CreditSettings(w_global=2.0, w_local=0.5, layout="returns")
    credit = token_credit(verdict(0.5, [span(1, 4, -1.0)]), single(), settings)
    assert credit.reward_score == pytest.approx([-0.25, -0.5, -0.25, 1.0])
    assert np.cumsum(credit.reward_score[::-1])[::-1].tolist() == pytest.approx([0.0, 0.25, 0.75, 1.0])
    assert credit.info["local_signal"] == 1.0
    # a multi-turn response: G on the last token (its final EOS), turn values on their turn's generated tokens
    turns = verdict(1.0, turns=[{"turn": 0, "value": 0.5}, {"turn": 1, "value": -0.5}])
    multi = token_credit(turns, single(TURN_TEXT, TURN_SPANS, TURN_MASK), CreditSettings(layout="returns"))
    assert multi.reward_score == pytest.approx([0.5, 0.5, 0.5, 0.0, 0.0, -0.5, 0.5])


def test_dapo_overlong_shaping_is_part_of_g():
    """max 4 tokens, buffer 2: a 4-token response exceeds the free length by 2 -> -2/2 * 1.0 = -1."""
    credit = token_credit(verdict(0.5), single(), CreditSettings(overlong=(4, 2, 1.0)))
    assert credit.info["overlong"] == -1.0 and credit.info["score"] == -0.5
    assert credit.reward_score == [-0.5] * 4


def test_the_managers_declared_knobs_are_the_credit_settings(monkeypatch):
    """`ManagerSettings.credit`: the manager's values under their own names, the layout `token_level` gives the
    estimator, the streams a per-token estimator declared (none for one reward per response), DAPO's shaping."""
    monkeypatch.setitem(streams._consumers, "vb_test_reader", ("local", "outcome"))  # as the plugin declares them
    settings = ManagerSettings(w_global=2.0, w_local=0.5, local_clip=0.0, failure_score=-1.0, token_level=True,
                               estimator="vb_test_reader")
    assert settings.credit((4, 2, 1.0)) == CreditSettings(
        w_global=2.0, w_local=0.5, local_clip=0.0, failure_score=-1.0, layout="dense", streams=("local", "outcome"),
        overlong=(4, 2, 1.0),
    )
    assert ManagerSettings(token_level="returns", estimator="vb_test_reader").credit(None) == CreditSettings(
        layout="returns", streams=("local", "outcome"))
    scalar = ManagerSettings(token_level=False, estimator="vb_test_reader").credit(None)
    assert scalar == CreditSettings(layout="scalar")
    assert ManagerSettings(w_local=0.5, estimator="grpo").credit(None) == CreditSettings(w_local=0.5, layout="scalar")
