"""PURE (min-form credit assignment) against hand-computed values and a slow loop reference; its verl adapter."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.harness.references import reference_pure
from verl_bot.advantage.pure import compute_pure_advantage, pure_advantage
from verl_bot.credit.streams import StreamsUnavailable, use_streams


def as_tensors(local, step_end, lengths):
    width = len(local[0])
    mask = torch.tensor([[1.0 if t < n else 0.0 for t in range(width)] for n in lengths])
    return torch.tensor(local, dtype=torch.float32), torch.tensor(step_end, dtype=torch.float32), mask


def test_hand_computed_group_of_two():
    # row 0: steps [t0,t1] (S = -1, -1) and [t2,t3] (S = 0, 0); solved. row 1: one step of 2 tokens (S = 0.5); not.
    local, step_end, mask = as_tensors([[-1, -1, 0, 0], [0.5, 0.5, 0, 0]], [[0, 1, 0, 1], [0, 0, 0, 0]], [4, 2])
    adv, ret = pure_advantage(local, step_end, torch.tensor([1.0, 0.0]), mask, ["g", "g"])

    w = 1 / (1 + math.exp(-10))  # softmax([-(-1)/0.1, -0/0.1]) of the worse step
    r0 = [-w, 0.0]  # min form: the bad step dominates, the clean step gets ~0
    r1 = [0.5]
    b0, b1 = sum(r1) / 2, sum(r0) / 4  # others' reward per token
    v0, v1 = (1 - 1) - (0 - 1), (0 - 1) - (1 - 1)  # leave-one-out verifiable reward: +1, -1
    row0 = [0, r0[0] - 2 * b0, 0, r0[1] - 2 * b0 + v0]
    row1 = [0, r1[0] - 2 * b1 + v1, 0, 0]
    ret0 = [sum(row0[t:]) for t in range(4)]
    ret1 = [sum(row1[t:2]) if t < 2 else 0 for t in range(4)]
    torch.testing.assert_close(ret, torch.tensor([ret0, ret1]))
    torch.testing.assert_close(adv, torch.tensor([[ret0[0], 0, ret0[2], 0], [ret1[0], 0, 0, 0]]))
    assert ret0[0] == pytest.approx(-w - 1.0 + 1.0, abs=1e-6)  # -w - 2*0.25*2 + 1


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_matches_loop_reference(data):
    batch = data.draw(st.integers(1, 6))
    width = data.draw(st.integers(1, 7))
    lengths = [data.draw(st.integers(0, width)) for _ in range(batch)]
    local = [[data.draw(st.floats(-2, 2)) for _ in range(width)] for _ in range(batch)]
    step_end = [[data.draw(st.integers(0, 1)) for _ in range(width)] for _ in range(batch)]
    solved = [float(data.draw(st.integers(0, 1))) for _ in range(batch)]
    index = [data.draw(st.sampled_from("ab")) for _ in range(batch)]
    temperature = data.draw(st.sampled_from([0.1, 0.5, 2.0]))
    scale = data.draw(st.sampled_from([1.0, 3.0]))

    ref_adv, ref_ret = reference_pure(local, step_end, solved, lengths, index, temperature, 0.7, scale)
    t_local, t_end, mask = as_tensors(local, step_end, lengths)
    adv, ret = pure_advantage(t_local, t_end, torch.tensor(solved), mask, index, temperature, 0.7, scale)
    torch.testing.assert_close(adv, torch.tensor(ref_adv), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ret, torch.tensor(ref_ret), atol=1e-4, rtol=1e-4)


def test_single_rollout_groups_have_no_baseline_and_padding_stays_zero():
    local, step_end, mask = as_tensors([[0.2, 0.2, 0.0]], [[0, 0, 0]], [2])
    adv, ret = pure_advantage(local, step_end, torch.tensor([0.0]), mask, ["solo"])
    # one step r = 0.2, no others: baseline 0; verifiable (0 - 1) with no others: -1
    torch.testing.assert_close(ret, torch.tensor([[0.2 - 1.0, 0.2 - 1.0, 0.0]]))
    torch.testing.assert_close(adv, torch.tensor([[0.2 - 1.0, 0.0, 0.0]]))


def test_equal_rollouts_get_zero_advantage():
    local, step_end, mask = as_tensors([[-0.5, 0.3, 0.1]] * 3, [[0, 1, 0]] * 3, [3, 3, 3])
    adv, _ = pure_advantage(local, step_end, torch.tensor([1.0, 1.0, 1.0]), mask, ["g"] * 3)
    torch.testing.assert_close(adv, torch.zeros(3, 3), atol=1e-6, rtol=0)


def test_bad_input_is_a_clear_error():
    local, step_end, mask = as_tensors([[math.nan, 0.0], [0.0, 0.0]], [[0, 0], [0, 0]], [2, 2])
    with pytest.raises(ValueError, match="non-finite local rewards.*uid-x"):
        pure_advantage(local, step_end, torch.tensor([1.0, 1.0]), mask, ["uid-x", "uid-y"])
    local = torch.zeros(2, 2)
    with pytest.raises(ValueError, match="no verifiable outcome.*uid-y"):
        pure_advantage(local, step_end, torch.tensor([1.0, math.nan]), mask, ["uid-x", "uid-y"])
    with pytest.raises(ValueError, match="temperature"):
        pure_advantage(local, step_end, torch.tensor([1.0, 1.0]), mask, ["a", "a"], temperature=0.0)
    with pytest.raises(ValueError, match="same"):
        pure_advantage(local, step_end[:, :1], torch.tensor([1.0, 1.0]), mask, ["a", "a"])


def test_adapter_reads_the_active_streams_and_config():
    local, step_end, mask = as_tensors([[-1, -1, 0, 0], [0.5, 0.5, 0, 0]], [[0, 1, 0, 1], [0, 0, 0, 0]], [4, 2])
    outcome = torch.tensor([[0, 0, 0, 1.0], [0, 0.0, 0, 0]])  # solved sits on each row's last valid token
    index = np.array(["g", "g"], dtype=object)
    with pytest.raises(StreamsUnavailable, match="reward.reward_manager.name=bot"):
        compute_pure_advantage(torch.zeros(2, 4), mask, index, {})
    with use_streams({"local": local, "step_end": step_end, "outcome": outcome}):
        adv, ret = compute_pure_advantage(torch.zeros(2, 4), mask, index, {"pure_temperature": 0.5})
        with pytest.raises(StreamsUnavailable, match="shape"):
            compute_pure_advantage(torch.zeros(2, 3), mask[:, :3], index, {})
    expected = pure_advantage(local, step_end, torch.tensor([1.0, 0.0]), mask, index, temperature=0.5)
    torch.testing.assert_close((adv, ret), expected)


def test_adapter_reads_the_outcome_where_the_manager_wrote_it_in_a_multi_turn_rollout():
    # row 0 is a multi-turn rollout truncated inside a tool observation: its last two tokens are masked, and the
    # manager wrote `solved` on its last response token, one of them
    local, step_end, _ = as_tensors([[-1, -1, 0, 0], [0.5, 0.5, 0, 0]], [[0, 1, 0, 1], [0, 0, 0, 0]], [4, 2])
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    outcome = torch.tensor([[0, 0, 0, 1.0], [0, 0.0, 0, 0]])
    index = np.array(["g", "g"], dtype=object)
    with use_streams({"local": local, "step_end": step_end, "outcome": outcome}):
        adv, _ = compute_pure_advantage(torch.zeros(2, 4), mask, index, {})
    expected, _ = pure_advantage(local, step_end, torch.tensor([1.0, 0.0]), mask, index)
    torch.testing.assert_close(adv, expected)
    unsolved, _ = pure_advantage(local, step_end, torch.tensor([0.0, 0.0]), mask, index)
    assert not torch.allclose(adv, unsolved)
