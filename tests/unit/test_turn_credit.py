"""Turn-level credit's pieces: the `turn_reward` stream the manager writes, the turns of a batch, `turn_bot`'s returns
and advantages against a slow loop reference and hand-computed values, its knobs and start-up check.

The exact-gradient properties are `test_turn_exact_gradient.py`'s."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.harness.references import reference_turn_bot
from verl_bot.advantage.turn_bot import (
    TurnBotSettings,
    compute_turn_bot_advantage,
    startup_problem,
    turn_bot_advantage,
    turn_returns,
)
from verl_bot.advantage.turn_index import turn_index_advantage
from verl_bot.credit.streams import use_streams
from verl_bot.credit.token_credit import CreditSettings, OutputLayout, TokenLayout, token_credit
from verl_bot.credit.turns import turn_means
from verl_bot.credit.verdict import validate_verdict
from verl_bot.errors import VerlBotConfigError

MASK = [1, 1, 1, 0, 0, 1, 1]  # turn 0 (3 tokens), 2 tool tokens, turn 1 (2 tokens)
SPANS = np.array([[0, 2], [2, 3], [3, 3], [3, 5], [5, 9], [9, 10], [10, 10]])


def test_turn_means_by_hand():
    np.testing.assert_allclose(turn_means([1.0, 2.0, 3.0, 9.0, 9.0, -1.0, 0.0], MASK),
                               [2.0, 2.0, 2.0, 0.0, 0.0, -0.5, -0.5])
    np.testing.assert_allclose(turn_means([1.0, 3.0], None), [2.0, 2.0])  # no mask: one turn
    np.testing.assert_allclose(turn_means([5.0, 5.0], [0, 0]), [0.0, 0.0])
    assert turn_means([], []).shape == (0,)


def test_the_manager_writes_w_s_times_each_turns_mean_s():
    verdict = validate_verdict({"global": {"score": 1.0}, "turns": [{"turn": 0, "value": 0.5},
                                                                     {"turn": 1, "value": -0.5}],
                                "local": [{"start": 0, "end": 2, "value": -0.3}]}, 2, 1)
    layout = TokenLayout((OutputLayout("x" * 10, SPANS, np.array(MASK)),))
    credit = token_credit(verdict, layout, CreditSettings(w_global=2.0, w_local=0.4, streams=("turn_reward",)))
    rewards, turn_reward = credit.reward_score["token_rewards"], credit.reward_score["streams"]["turn_reward"]
    # S: turn 0 = 0.5 + (-0.3 on token 0), turn 1 = -0.5; turn means 0.4 and -0.5
    np.testing.assert_allclose(rewards, [2.0 + 0.4 * 0.2, 2.2, 2.2, 2.0, 2.0, 2.0 - 0.2, 1.8])
    np.testing.assert_allclose(turn_reward, [0.16, 0.16, 0.16, 0.0, 0.0, -0.2, -0.2])


def random_batch(rng, rows=24, width=14):
    mask = (rng.random((rows, width)) < 0.7).astype(np.float64)
    mask[rng.random(rows) < 0.1] = 0  # some rows without a generated token
    turn_reward = np.zeros((rows, width))
    for i in range(rows):  # one value per turn on its tokens, as the manager writes it
        k_of = np.cumsum(np.diff(np.concatenate([[0], mask[i]])) > 0)
        values = rng.normal(size=width + 1)
        turn_reward[i] = np.where(mask[i] != 0, values[k_of], 0.0)
    g = rng.normal(size=(rows, 1))
    rewards = g + turn_reward + rng.normal(scale=0.1, size=(rows, width)) * mask  # spans inside turns too
    uids = rng.integers(0, 6, size=rows).tolist()
    return rewards, mask, turn_reward, uids


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("gamma,norm_by_std,floor", [(1.0, True, 0.0), (0.5, True, 0.3), (0.0, False, 0.0)])
def test_turn_bot_matches_the_slow_reference(seed, gamma, norm_by_std, floor):
    rewards, mask, turn_reward, uids = random_batch(np.random.default_rng(seed))
    t = [torch.tensor(x) for x in (rewards, mask, turn_reward)]
    got = turn_bot_advantage(turn_returns(*t, gamma), t[1], uids, norm_by_std=norm_by_std, std_floor=floor)
    expected = reference_turn_bot(rewards, mask, turn_reward, uids, gamma, norm_by_std, floor=floor)
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-9)


def test_turn_bot_by_hand():
    # group of two: rollout 0 two turns (U = 1, -1; G = 1 -> r = 2, 0), rollout 1 one turn (G = 0, U = 0.5)
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
    turn_reward = torch.tensor([[1.0, 1.0, 0.0, -1.0], [0.5, 0.5, 0.0, 0.0]])
    rewards = torch.tensor([[2.0, 2.0, 1.0, 0.0], [0.5, 0.5, 0.0, 0.0]])
    q = turn_returns(rewards, mask, turn_reward, 1.0)
    torch.testing.assert_close(q, torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0]], dtype=torch.float64))
    # m = 2/3 and 1/2, so b_0 = 1/2 and b_1 = 2/3; mu = 7/12 and var = (1/K) sum_j (1/L_j) sum_t (q - mu)^2
    centred = turn_bot_advantage(q, mask, ["a", "a"], norm_by_std=False)
    torch.testing.assert_close(centred, torch.tensor([[0.5, 0.5, 0.0, -0.5], [-1 / 6, -1 / 6, 0.0, 0.0]],
                                                     dtype=torch.float64))
    var = ((5 / 12) ** 2 * 2 + (7 / 12) ** 2) / 3 / 2 + ((1 / 12) ** 2 * 2) / 2 / 2
    scaled = turn_bot_advantage(q, mask, ["a", "a"])
    torch.testing.assert_close(scaled, centred / (var ** 0.5 + 1e-6))
    # gamma = 0: q is r, bot's token rewards
    torch.testing.assert_close(turn_returns(rewards, mask, turn_reward, 0.0), rewards.double() * mask)


def test_tied_groups_and_groups_of_one_get_exactly_zero():
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
    returns = torch.full((3, 4), 0.1) * mask
    assert (turn_bot_advantage(returns, mask, [0, 0, 1]) == 0).all()
    assert (turn_bot_advantage(torch.rand(3, 4) * mask, mask, [0, 1, 2]) == 0).all()


def test_a_non_finite_reward_names_the_row():
    mask = torch.ones(2, 3)
    returns = torch.tensor([[0.0, float("nan"), 1.0], [0.0, 1.0, 1.0]])
    with pytest.raises(ValueError, match=r"rows \[0\], uid\(s\) \['u7'\]"):
        turn_bot_advantage(returns, mask, ["u7", "u7"])


def test_the_adapter_reads_its_stream_and_knobs():
    rewards, mask, turn_reward, uids = random_batch(np.random.default_rng(9))
    t = [torch.tensor(x, dtype=torch.float32) for x in (rewards, mask, turn_reward)]
    with use_streams({"turn_reward": t[2]}):
        advantages, returns = compute_turn_bot_advantage(t[0], t[1], np.array(uids),
                                                         config={"turn_bot_discount": 0.5})
    expected = reference_turn_bot(rewards, mask, turn_reward, uids, 0.5)
    np.testing.assert_allclose(advantages.numpy(), expected, atol=1e-4)
    assert advantages.dtype == torch.float32 and returns.shape == t[0].shape
    with pytest.raises(VerlBotConfigError, match=r"\+algorithm.turn_bot_discount=1.5: must be a finite number in"):
        TurnBotSettings.from_config({"turn_bot_discount": 1.5})
    with pytest.raises(RuntimeError, match="needs the reward streams"):
        compute_turn_bot_advantage(t[0], t[1], np.array(uids))


def test_the_start_up_check_wants_two_rollouts_per_prompt():
    assert startup_problem({"actor_rollout_ref": {"rollout": {"n": 4}}}, []) is None
    assert startup_problem({"actor_rollout_ref": {"rollout": {"n": 1}}}, []) == (
        "adv_estimator=turn_bot with actor_rollout_ref.rollout.n=1: its leave-one-out baseline needs at least 2 "
        "rollouts per prompt (a group of one gets advantage 0); set actor_rollout_ref.rollout.n >= 2")


def test_a_loss_that_averages_a_responses_advantages_is_refused_for_both():
    from omegaconf import OmegaConf

    from verl_bot.launch.verl_surface import sequence_loss_problem

    for estimator in ("turn_bot", "turn_index_biased"):
        config = OmegaConf.create({"algorithm": {"adv_estimator": estimator},
                                   "actor_rollout_ref": {"actor": {"policy_loss": {"loss_mode": "geo_mean"}}}})
        assert sequence_loss_problem(config).startswith(
            f"actor_rollout_ref.actor.policy_loss.loss_mode=geo_mean with adv_estimator={estimator}: ")


def test_the_reference_by_hand():
    # group of two, as test_turn_bot_by_hand: outcomes O = 1, 0; turn 0: U = 1, 0.5 (both), turn 1: U = -1 alone
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
    turn_reward = torch.tensor([[1.0, 1.0, 0.0, -1.0], [0.5, 0.5, 0.0, 0.0]])
    rewards = torch.tensor([[2.0, 2.0, 1.0, 0.0], [0.5, 0.5, 0.0, 0.0]])
    got = turn_index_advantage(rewards, mask, turn_reward, ["a", "a"], norm_by_std=False)
    # Z(O) = +-0.5; Z_0(U) = +-0.25; Z_1(U) = -1 (one member: mean 0); rollout 0 turn 0: 0.5 + 0.25 - 1
    torch.testing.assert_close(got, torch.tensor([[-0.25, -0.25, 0.0, -0.5], [-0.75, -0.75, 0.0, 0.0]]))
