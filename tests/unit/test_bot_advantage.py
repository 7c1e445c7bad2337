"""BoT-GRPO advantage: hand-computed values, identities from the paper, a slow loop reference, bad input."""

import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

from tests.harness.references import reference_bot
from verl_bot.advantage.bot import (
    bot_advantage,
    bot_advantage_and_stats,
    bot_diagnostics,
    bot_options,
    compute_bot_advantage,
)
from verl_bot.errors import VerlBotConfigError


def test_hand_computed_example():
    # group "a": rollout 1 has rewards [1, 1, 0] (L=3), rollout 2 has [0, 0] (L=2)
    #   mu  = 1/2 * (2/3 + 0)                                   = 1/3
    #   var = 1/2 * (1/3 * (2*(2/3)^2 + (1/3)^2) + 1/2 * 2*(1/3)^2) = 2/9
    # group "b": one rollout whose tokens are all 3 -> 0
    rewards = torch.tensor([[1.0, 1.0, 0.0, 9.0], [0.0, 0.0, 5.0, 5.0], [3.0, 3.0, 3.0, 3.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    adv = bot_advantage(rewards, mask, np.array(["a", "a", "b"]), epsilon=0.0)
    std = math.sqrt(2 / 9)
    expected = torch.tensor(
        [
            [(2 / 3) / std, (2 / 3) / std, (-1 / 3) / std, 0.0],
            [(-1 / 3) / std, (-1 / 3) / std, 0.0, 0.0],
            [0.0, 0.0, 0.0, 0.0],
        ]
    )
    torch.testing.assert_close(adv, expected, rtol=1e-6, atol=1e-6)


def test_equals_grpo_population_std_when_rewards_are_constant_per_rollout():
    torch.manual_seed(0)
    batch, length, group = 12, 7, 4
    mask = (torch.rand(batch, length) < 0.8).long()
    mask[:, 0] = 1
    per_rollout = torch.randn(batch)
    rewards = per_rollout[:, None] * mask
    index = np.repeat(np.arange(batch // group), group)
    adv = bot_advantage(rewards, mask, index, epsilon=1e-6)
    # GRPO with the population std, written out per group
    scores = per_rollout.view(-1, group)
    grpo = (scores - scores.mean(1, keepdim=True)) / (scores.std(1, unbiased=False, keepdim=True) + 1e-6)
    torch.testing.assert_close(adv, grpo.reshape(-1)[:, None] * mask, rtol=1e-5, atol=1e-5)
    # and verl's own GRPO (Bessel std) differs only by the sqrt(K/(K-1)) factor
    verl_grpo, _ = compute_grpo_outcome_advantage(
        token_level_rewards=per_rollout[:, None] * torch.nn.functional.one_hot(mask.sum(1) - 1, length),
        response_mask=mask,
        index=index,
        epsilon=0.0,
    )
    torch.testing.assert_close(adv * math.sqrt((group - 1) / group), verl_grpo, rtol=1e-4, atol=1e-4)


def test_length_invariance_when_every_token_is_repeated():
    torch.manual_seed(1)
    rewards = torch.randn(4, 5)
    mask = torch.ones(4, 5, dtype=torch.long)
    index = np.array([0, 0, 0, 0])
    base = bot_advantage(rewards, mask, index)
    doubled = bot_advantage(rewards.repeat_interleave(2, dim=1), mask.repeat_interleave(2, dim=1), index)
    torch.testing.assert_close(doubled, base.repeat_interleave(2, dim=1), rtol=1e-5, atol=1e-6)
    # repeating only one rollout's tokens (3x) changes nothing either
    long_row = torch.cat([rewards[0].repeat_interleave(3), torch.zeros(0)])
    padded = torch.zeros(4, 15)
    padded[0] = long_row
    padded[1:, :5] = rewards[1:]
    padded_mask = torch.zeros(4, 15, dtype=torch.long)
    padded_mask[0] = 1
    padded_mask[1:, :5] = 1
    mixed = bot_advantage(padded, padded_mask, index)
    torch.testing.assert_close(mixed[0], base[0].repeat_interleave(3), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(mixed[1:, :5], base[1:], rtol=1e-5, atol=1e-6)


@st.composite
def batches(draw):
    num_groups = draw(st.integers(1, 4))
    sizes = [draw(st.integers(1, 5)) for _ in range(num_groups)]
    length = draw(st.integers(1, 9))
    rows = sum(sizes)
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randn(rows, length, generator=gen, dtype=torch.float64) * draw(st.sampled_from([0.01, 1.0, 50.0]))
    if draw(st.booleans()):  # discrete rewards make ties and all-equal groups likely
        rewards = rewards.round()
    lengths = torch.randint(0, length + 1, (rows,), generator=gen)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    labels = [f"uid-{g}" for g, size in enumerate(sizes) for _ in range(size)]
    perm = torch.randperm(rows, generator=gen).tolist()
    return rewards[perm], mask[perm], np.array([labels[p] for p in perm], dtype=object)


@settings(max_examples=200, deadline=None)
@given(batches(), st.booleans())
def test_matches_loop_reference(batch, norm_by_std):
    rewards, mask, index = batch
    adv = bot_advantage(rewards, mask, index, norm_by_std=norm_by_std)
    ref = reference_bot(rewards, mask, list(index), norm_by_std=norm_by_std)
    assert adv.dtype == torch.float64
    torch.testing.assert_close(adv, ref, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(
        bot_advantage(rewards.float(), mask, index, norm_by_std=norm_by_std).double(),
        ref,
        rtol=2e-4,
        atol=2e-4 * max(1.0, float(ref.abs().max())),
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_inputs(dtype):
    torch.manual_seed(2)
    rewards = torch.randn(8, 6).to(dtype)
    mask = torch.ones(8, 6, dtype=torch.long)
    index = np.repeat(np.arange(2), 4)
    adv = bot_advantage(rewards, mask, index)
    assert adv.dtype == torch.float32
    torch.testing.assert_close(adv, reference_bot(rewards, mask, list(index)).float(), rtol=1e-5, atol=1e-5)


def test_all_equal_group_is_exactly_zero_and_padding_is_zero():
    value = 0.1 + 0.2  # not representable: naive mean/var would leak rounding noise
    rewards = torch.full((4, 33), value, dtype=torch.float32)
    rewards[:, 20:] = 123.0  # garbage on padding must not matter
    mask = torch.zeros(4, 33, dtype=torch.long)
    for row, length in enumerate([20, 7, 13, 1]):
        mask[row, :length] = 1
    adv = bot_advantage(rewards, mask, np.zeros(4), epsilon=0.0)
    assert torch.equal(adv, torch.zeros_like(adv))


def test_group_of_one_keeps_within_rollout_signal():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    adv = bot_advantage(rewards, torch.ones(1, 4), ["solo"], epsilon=0.0)
    torch.testing.assert_close(adv, torch.tensor([[1.0, -1.0, -1.0, 1.0]]))


def test_rows_with_zero_valid_tokens_get_zero_and_do_not_count_in_k():
    rewards = torch.tensor([[1.0, 2.0], [5.0, 5.0], [3.0, 4.0]])
    mask = torch.tensor([[1, 1], [0, 0], [1, 1]])
    adv = bot_advantage(rewards, mask, np.array([0, 0, 0]))
    assert torch.equal(adv[1], torch.zeros(2))
    torch.testing.assert_close(adv, reference_bot(rewards, mask, [0, 0, 0]).float())
    only_empty = bot_advantage(torch.ones(2, 3), torch.zeros(2, 3), np.array([0, 0]))
    assert torch.equal(only_empty, torch.zeros(2, 3))


def test_never_nan_or_inf_on_extreme_but_finite_rewards():
    rewards = torch.tensor([[3e38, -3e38, 0.0], [1e-30, 0.0, 0.0]])
    adv = bot_advantage(rewards, torch.ones(2, 3), np.array([0, 0]))
    assert torch.isfinite(adv).all()


def test_nan_reward_names_the_uid():
    rewards = torch.zeros(3, 4)
    rewards[2, 1] = float("nan")
    with pytest.raises(ValueError, match="uid-bad"):
        bot_advantage(rewards, torch.ones(3, 4), np.array(["uid-ok", "uid-ok", "uid-bad"], dtype=object))
    # NaN on padding is not an error (it never enters the statistics)
    rewards[2, 1] = 0.0
    rewards[2, 3] = float("inf")
    mask = torch.ones(3, 4)
    mask[2, 3] = 0
    assert torch.isfinite(bot_advantage(rewards, mask, np.array([0, 0, 1]))).all()


def test_missing_uid_is_a_clear_error():
    with pytest.raises(ValueError, match="uid"):
        compute_bot_advantage(torch.zeros(2, 3), torch.ones(2, 3), index=None)


def test_adapter_reads_config_and_ignores_extra_kwargs():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    mask = torch.ones(2, 2)
    index = np.array([0, 0])
    adv, returns = compute_bot_advantage(rewards, mask, index=index, config={"bot_epsilon": 0.0}, reward_baselines=None)
    assert adv is returns
    torch.testing.assert_close(adv, reference_bot(rewards, mask, [0, 0], eps=0.0).float())
    centred, _ = compute_bot_advantage(rewards, mask, index=index, config={"norm_adv_by_std_in_grpo": False})
    torch.testing.assert_close(centred, torch.tensor([[0.75, -0.25], [-0.25, -0.25]]))


def test_shift_far_from_the_row_mean_keeps_float32_precision():
    # each row's first reward (the row's shift) is an outlier: the shifted-sum variance would cancel ~13 bits
    gen = torch.Generator().manual_seed(3)
    rewards = 1.0 + torch.randn(4, 4096, dtype=torch.float64, generator=gen) * 1e-3
    rewards[:, 0] = 5.0
    mask = torch.ones(4, 4096)
    ref = reference_bot(rewards, mask, [0, 0, 0, 0])
    torch.testing.assert_close(bot_advantage(rewards.float(), mask, np.zeros(4)).double(), ref, rtol=0, atol=1e-4)


def test_token_pooling_hand_computed():
    # the hand-computed group above without length weighting: 5 tokens [1, 1, 0 | 0, 0] in one bag
    #   mu = 2/5, var = 1/5 * (2*(3/5)^2 + 3*(2/5)^2) = 6/25   (the paper's weighting: mu = 1/3, var = 2/9)
    rewards = torch.tensor([[1.0, 1.0, 0.0, 9.0], [0.0, 0.0, 5.0, 5.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    adv = bot_advantage(rewards, mask, np.array(["a", "a"]), epsilon=0.0, length_weighting=False)
    std = math.sqrt(6 / 25)
    expected = torch.tensor([[0.6 / std, 0.6 / std, -0.4 / std, 0.0], [-0.4 / std, -0.4 / std, 0.0, 0.0]])
    torch.testing.assert_close(adv, expected, rtol=1e-6, atol=1e-6)
    assert not torch.allclose(adv, bot_advantage(rewards, mask, np.array(["a", "a"]), epsilon=0.0), atol=0.1)


def test_token_pooling_equals_length_weighting_when_lengths_are_equal():
    torch.manual_seed(4)
    rewards = torch.randn(12, 9, dtype=torch.float64)
    mask = torch.ones(12, 9)
    mask[:, 7:] = 0  # every rollout 7 tokens long
    index = np.repeat(np.arange(3), 4)
    pooled = bot_advantage(rewards, mask, index, length_weighting=False)
    torch.testing.assert_close(pooled, bot_advantage(rewards, mask, index), rtol=1e-12, atol=1e-12)


def test_std_floor_hand_computed():
    # a tied group: both rollouts G = 1, one token carries S = -0.01
    #   mu = 1/2 * (3.99/4 + 1) = 0.99875; deviations +0.00125 (7 tokens) and -0.00875 (1 token)
    #   var = 1/2 * (1/4 * (3 * 0.00125^2 + 0.00875^2) + 0.00125^2) = 1.09375e-5, std = 0.0033072
    rewards = torch.tensor([[1.0, 1.0, 1.0, 0.99], [1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    mask = torch.ones(2, 4)
    index = np.array([0, 0])
    std = math.sqrt(1.09375e-5)
    expected = torch.full((2, 4), 0.00125, dtype=torch.float64)
    expected[0, 3] = -0.00875
    for floor, divisor in ((0.0, std), (0.001, std), (0.1, 0.1)):
        adv = bot_advantage(rewards, mask, index, epsilon=0.0, std_floor=floor)
        torch.testing.assert_close(adv, expected / divisor, rtol=1e-9, atol=1e-12)
    assert torch.equal(bot_advantage(rewards, mask, index, std_floor=0.0), bot_advantage(rewards, mask, index))


def test_std_floor_bounds_a_tied_group_of_long_rollouts():
    # issue case: 8 rollouts x 4096 tokens, all the same G; one token with S = -0.01
    rewards = torch.ones(8, 4096)
    rewards[3, 100] = 0.99
    mask = torch.ones(8, 4096)
    index = np.zeros(8)
    assert float(bot_advantage(rewards, mask, index)[3, 100]) < -150
    floored = bot_advantage(rewards, mask, index, std_floor=0.01)
    torch.testing.assert_close(floored[3, 100], torch.tensor(-0.01 * (1 - 1 / 32768) / (0.01 + 1e-6)))
    assert float(floored.abs().max()) < 1.0


@settings(max_examples=150, deadline=None)
@given(batches(), st.booleans(), st.booleans(), st.sampled_from([0.0, 0.05, 1.0]))
def test_knobs_match_loop_reference(batch, norm_by_std, length_weighting, std_floor):
    rewards, mask, index = batch
    kwargs = {"norm_by_std": norm_by_std, "length_weighting": length_weighting, "std_floor": std_floor}
    adv = bot_advantage(rewards, mask, index, **kwargs)
    ref = reference_bot(rewards, mask, list(index), **kwargs)
    torch.testing.assert_close(adv, ref, rtol=1e-9, atol=1e-9)


def test_diagnostics_hand_computed():
    rewards = torch.tensor(
        [
            [1.0, 0.0, 0.0, 0.0],  # group "tied": means 1/2 and 1/2, all variance within rollouts
            [0.0, 1.0, 0.0, 0.0],
            [1.0, 1.0, 0.0, 0.0],  # group "split": means 1 and 0, all variance between rollouts
            [0.0, 0.0, 0.0, 0.0],
            [2.0, 2.0, 2.0, 0.0],  # group "equal": every reward 2 (tied, advantages exactly 0)
            [2.0, 0.0, 0.0, 0.0],
            [4.0, 0.0, 0.0, 0.0],  # group "solo": one rollout, not counted in the share
        ]
    )
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0], [1] * 4])
    index = np.array(["tied", "tied", "split", "split", "equal", "equal", "solo"], dtype=object)
    adv, stats = bot_advantage_and_stats(rewards, mask, index, epsilon=0.0)
    # groups in sorted uid order: equal, solo, split, tied
    torch.testing.assert_close(stats.rollouts, torch.tensor([2.0, 1.0, 2.0, 2.0], dtype=torch.float64))
    within, between = torch.tensor([0.0, 3.0, 0.0, 0.25]), torch.tensor([0.0, 0.0, 0.25, 0.0])  # float32 sums
    torch.testing.assert_close(stats.within, within.double(), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(stats.between, between.double(), rtol=1e-6, atol=1e-7)
    # solo: mu = 1, var = 1/4 * (3^2 + 3 * 1^2) = 3, so the token with reward 4 gets 3 / sqrt(3)
    diagnostics = bot_diagnostics(stats)
    assert diagnostics["adv_abs_max"] == pytest.approx(float(adv.abs().max()))
    assert diagnostics["tied_group_share"] == pytest.approx(2 / 3)
    assert diagnostics["adv_abs_max"] == pytest.approx(math.sqrt(3), rel=1e-6)


def test_tied_share_counts_near_equal_means_as_tied():
    # 8 rollouts with the same G; one local penalty moves one rollout's mean by 0.01 / 4096
    rewards = torch.ones(8, 4096)
    rewards[3, 100] = 0.99
    adv, stats = bot_advantage_and_stats(rewards, torch.ones(8, 4096), np.zeros(8))
    assert bot_diagnostics(stats)["tied_group_share"] == 1.0
    assert bot_diagnostics(stats, tie_tolerance=0.0)["tied_group_share"] == 0.0  # exact equality: not tied
    _, empty_stats = bot_advantage_and_stats(torch.zeros(0, 3), torch.zeros(0, 3), [])
    assert bot_diagnostics(empty_stats) == {"adv_abs_max": 0.0, "tied_group_share": 0.0, "rollouts_per_group": 0.0}


def test_options_read_the_knobs_and_reject_bad_values():
    assert bot_options(None) == {"epsilon": 1e-6, "norm_by_std": True, "length_weighting": True, "std_floor": 0.0}
    config = {"bot_length_weighting": False, "bot_std_floor": 0.5, "bot_epsilon": 0.0}
    assert bot_options(config) == {"epsilon": 0.0, "norm_by_std": True, "length_weighting": False, "std_floor": 0.5}
    torch.manual_seed(5)
    rewards, mask, index = torch.randn(4, 6), torch.ones(4, 6), np.array([0, 0, 1, 1])
    adv, _ = compute_bot_advantage(rewards, mask, index=index, config=config)
    torch.testing.assert_close(adv, reference_bot(rewards, mask, list(index), 0.0, True, False, 0.5).float())
    # as verl passes them: its `algorithm` DictConfig with the `+algorithm.bot_*=...` overrides parsed by OmegaConf
    overrides = OmegaConf.from_dotlist(
        ["bot_length_weighting=false", "bot_std_floor=1", "norm_adv_by_std_in_grpo=true"]
    )
    assert bot_options(overrides) == {"epsilon": 1e-6, "norm_by_std": True, "length_weighting": False, "std_floor": 1.0}
    assert bot_options({"bot_std_floor": "0.1"})["std_floor"] == 0.1  # a number may come as its text
    for key, value, allowed in (
        ("bot_std_floor", -0.1, "a finite number >= 0"),
        ("bot_std_floor", float("nan"), "a finite number >= 0"),
        ("bot_length_weighting", "false", "true or false"),
        ("bot_length_weighting", 0, "true or false"),
    ):
        message = rf"^\+algorithm\.{key}={re.escape(repr(value))}: must be {allowed}$"
        with pytest.raises(VerlBotConfigError, match=message):
            bot_options({key: value})
    with pytest.raises(VerlBotConfigError, match=r"^unknown \+algorithm\.bot_std_flor: the BoT-GRPO knobs are bot_"):
        bot_options({"bot_std_flor": 0.1})
