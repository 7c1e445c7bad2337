"""The `bot` manager's returns layout through verl's own return-based estimators (`verl.trainer.ppo.core_algos`):
the return verl computes from each token is G plus the local signal after it, so the local signal reaches the
advantages; with one scalar per response (G only) every token of a response has one return. Values by hand."""

from __future__ import annotations

import numpy as np
import torch
from verl.trainer.ppo import core_algos

from tests.conftest import compose_verl_config
from verl_bot.credit.token_credit import CreditSettings, OutputLayout, TokenLayout, token_credit
from verl_bot.credit.verdict import validate_verdict
from verl_bot.rewards.settings import manager_settings

# "ab cd" + EOS: tokens "ab", " ", "cd", EOS; a span of -1 on "cd"
LAYOUT = TokenLayout((OutputLayout("ab cd", np.array([[0, 2], [2, 3], [3, 5], [5, 5]])),))
VERDICT = {"global": {"score": 1.0}, "local": [{"start": 3, "end": 5, "value": -1.0}]}


def rewards(layout: str) -> torch.Tensor:
    credit = token_credit(validate_verdict(VERDICT), LAYOUT, CreditSettings(layout=layout))
    row = credit.reward_score if isinstance(credit.reward_score, list) else [0.0, 0.0, 0.0, credit.reward_score]
    return torch.tensor([row], dtype=torch.float32)


def test_the_returns_layout_is_the_auto_layout_of_verls_return_estimators():
    for estimator, layout in (("gae", "returns"), ("reinforce_plus_plus", "returns"), ("grpo", "scalar"),
                              ("bot", "dense")):
        config = compose_verl_config([f"algorithm.adv_estimator={estimator}", "reward.reward_manager.name=bot"])
        assert manager_settings(config).layout == layout, estimator


def test_reinforce_plus_plus_returns_carry_the_local_signal():
    """r = [0, 0, -1, 1] (S = -1 on "cd", G = 1 on EOS): returns (gamma 1) [0, 0, 0, 1]; G only: [1, 1, 1, 1]."""
    config = compose_verl_config(["algorithm.adv_estimator=reinforce_plus_plus"]).algorithm
    mask = torch.ones(1, 4)
    fn = core_algos.get_adv_estimator_fn("reinforce_plus_plus")
    _, returns = fn(token_level_rewards=rewards("returns"), response_mask=mask, config=config)
    assert returns.tolist() == [[0.0, 0.0, 0.0, 1.0]]
    _, returns = fn(token_level_rewards=rewards("scalar"), response_mask=mask, config=config)
    assert returns.tolist() == [[1.0, 1.0, 1.0, 1.0]]


def test_gae_sees_the_local_signal_against_the_critics_values():
    """gamma = lam = 1, values 0: GAE's advantage is the return, [0, 0, 0, 1] (G only: 1 everywhere)."""
    fn = core_algos.get_adv_estimator_fn("gae")
    mask, values = torch.ones(1, 4), torch.zeros(1, 4)
    advantages, returns = fn(token_level_rewards=rewards("returns"), values=values, response_mask=mask, gamma=1.0,
                             lam=1.0)
    assert returns.tolist() == [[0.0, 0.0, 0.0, 1.0]]
    advantages, returns = fn(token_level_rewards=rewards("scalar"), values=values, response_mask=mask, gamma=1.0,
                             lam=1.0)
    assert returns.tolist() == [[1.0, 1.0, 1.0, 1.0]]
