"""Turn-level credit on an exact policy gradient: `turn_bot` is unbiased when the policy chooses its number of turns,
the per-turn-index baseline (verl RFC #7244's construction, written here as a slow reference) is not.

The environment (everything here is enumerable, so every expectation is exact):

- a tabular policy with 5 parameters takes up to N = 3 turns. In turn k it writes a work token, good with
  probability sigmoid(theta[k]) (a bad one is followed by a filler token: turns differ in length), then, in
  turns 0 and 1, a decision token: continue with probability sigmoid(theta[3 + k]), else stop. A continue is
  followed by 2 tool tokens (response mask 0) and the next turn;
- turn k earns U_k = 1.0 (good) or 0.5 (bad); the outcome is G = 1 when the last turn is good;
- the manager's layout: every generated token of turn k carries r_t = G + U_k and the `turn_reward` stream U_k;
  tool tokens carry G and no turn reward.

The objective is J(theta) = E[G + sum_k U_k]; its gradient comes from autograd on the enumerated J (14
trajectories). An estimator's update for a group of K rollouts is (1/K) sum_i sum_t A_{i,t} grad log pi(y_{i,t})
(the token-sum loss; the filler and tool tokens have no gradient). Its expectation is the sum over all K^14
groups weighted by their probability: the mean over infinitely many sampled groups. Also checked on 20,000
sampled groups, within 5 standard errors.

Stated tolerances:
- `turn_bot` centred (`norm_by_std=False`): its leave-one-out baseline implies the factor 1: the expected update
  is grad J to 1e-9 relative (gamma = 1), and the discounted semi-gradient E[sum_t grad log pi(y_t) q^gamma_t]
  for gamma = 0.5;
- `turn_bot` with BoT's pooled std: the std depends on the group's own samples, so the factor does too: cosine
  with grad J >= 0.99, and every component of the same sign;
- the per-turn-index reference misses both: its centred update is off by >= 50% of |grad J| and gets the sign
  of the first continue parameter wrong; standardised, its cosine is below 0.9. With population means in place
  of the group's, its expected update is exactly grad J - sum_k b_k grad P(T > k), b_k = E[U_k | T > k]: the
  RFC's closed form, a hidden penalty of the mean turn reward on every "take another turn".
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from verl_bot.advantage.turn_bot import turn_bot_advantage, turn_returns

N_TURNS = 3
U_GOOD, U_BAD = 1.0, 0.5
THETA = torch.tensor([1.0, -0.5, -0.5, 0.2, 0.0], dtype=torch.float64)  # work logits of turns 0-2, continue 0-1
K = 4
CONTINUE_0 = 3  # the parameter of the first continue decision


def trajectories() -> list[tuple[tuple[bool, ...], tuple[bool, ...]]]:
    """Every trajectory as (work good per turn, continue per decision)."""
    out = []
    for turns in range(1, N_TURNS + 1):
        decisions = tuple([True] * (turns - 1) + ([False] if turns < N_TURNS else []))
        out += [(works, decisions) for works in itertools.product((True, False), repeat=turns)]
    return out


def log_prob(theta: torch.Tensor, works, decisions) -> torch.Tensor:
    lp = sum(torch.nn.functional.logsigmoid(theta[k] if good else -theta[k]) for k, good in enumerate(works))
    return lp + sum(torch.nn.functional.logsigmoid(theta[N_TURNS + k] if go else -theta[N_TURNS + k])
                    for k, go in enumerate(decisions))


def outcome(works) -> float:
    return 1.0 if works[-1] else 0.0


def turn_value(good: bool) -> float:
    return U_GOOD if good else U_BAD


TRAJECTORIES = trajectories()
PROBS = torch.stack([log_prob(THETA, w, d).exp() for w, d in TRAJECTORIES])


def exact_gradient(value) -> torch.Tensor:
    """grad_theta of sum_tau P_theta(tau) value(tau), by autograd on the enumeration."""
    theta = THETA.clone().requires_grad_(True)
    total = sum(log_prob(theta, w, d).exp() * value(w, d) for w, d in TRAJECTORIES)
    (grad,) = torch.autograd.grad(total, theta)
    return grad


GRAD_J = exact_gradient(lambda w, d: outcome(w) + sum(turn_value(g) for g in w))


def tokens(works, decisions) -> list[dict]:
    """The trajectory's response tokens: mask, grad log pi (5,), turn, r_t, turn_reward."""
    out, g = [], outcome(works)

    def token(mask, turn, grad_index=None, chosen=True, reward=None, turn_reward=0.0):
        grad = torch.zeros(len(THETA), dtype=torch.float64)
        if grad_index is not None:
            p = torch.sigmoid(THETA[grad_index])
            grad[grad_index] = (1 - p) if chosen else -p
        out.append({"mask": mask, "grad": grad, "turn": turn, "r": g if reward is None else reward, "u": turn_reward})

    for k, good in enumerate(works):
        u = turn_value(good)
        token(1, k, k, good, g + u, u)
        if not good:
            token(1, k, None, True, g + u, u)  # filler
        if k < len(decisions):
            token(1, k, N_TURNS + k, decisions[k], g + u, u)
            if decisions[k]:
                token(0, k)
                token(0, k)
    return out


ROWS = [tokens(w, d) for w, d in TRAJECTORIES]
WIDTH = max(len(r) for r in ROWS)


def padded(key: str) -> torch.Tensor:
    return torch.tensor([[t[key] for t in row] + [0.0] * (WIDTH - len(row)) for row in ROWS], dtype=torch.float64)


MASK, REWARDS, TURN_REWARD = padded("mask"), padded("r"), padded("u")
GRADS = torch.stack([torch.stack([t["grad"] for t in row] + [torch.zeros(len(THETA), dtype=torch.float64)]
                                 * (WIDTH - len(row))) for row in ROWS])  # (14, WIDTH, 5)


# ---------------------------------------------------------------------------------------------- the reference
def per_turn_index_reference(group: list[int], norm_by_std: bool, eps: float = 1e-6) -> list[list[float]]:
    """The RFC's per-turn-index normalisation, slowly, for one group of trajectory indices: each turn reward
    standardised among the group's turns of its index (sample std; one turn: mean 0, std 1), the outcome among
    the group's outcomes, and token t of turn k gets Z(G) + sum over the rollout's turns k' >= k of Z_k'(U)."""

    def z(values):
        if len(values) < 2:
            return list(values)
        mean, std = float(np.mean(values)), float(np.std(values, ddof=1))
        return [(v - mean) / (std + eps) if norm_by_std else v - mean for v in values]

    works = [TRAJECTORIES[i][0] for i in group]
    z_outcome = z([outcome(w) for w in works])
    z_turn = [[0.0] * len(w) for w in works]
    for k in range(N_TURNS):
        members = [j for j, w in enumerate(works) if len(w) > k]
        for j, value in zip(members, z([turn_value(works[j][k]) for j in members]), strict=True):
            z_turn[j][k] = value
    out = []
    for j, i in enumerate(group):
        row = [z_outcome[j] + sum(z_turn[j][t["turn"]:]) if t["mask"] else 0.0 for t in ROWS[i]]
        out.append(row + [0.0] * (WIDTH - len(row)))
    return out


# ---------------------------------------------------------------------------------------------- expectations
ALL_GROUPS = torch.tensor(list(itertools.product(range(len(TRAJECTORIES)), repeat=K)))  # (14^K, K)
GROUP_PROBS = PROBS[ALL_GROUPS].prod(dim=1)


def updates(groups: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """(M, 5) each group's update (1/K) sum_i sum_t A grad log pi, from (M * K, WIDTH) advantages."""
    rows = groups.flatten()
    per_row = torch.einsum("bt,btp->bp", advantages.double(), GRADS[rows])
    return per_row.view(len(groups), K, -1).mean(dim=1)


def turn_bot_updates(groups: torch.Tensor, norm_by_std: bool, discount: float = 1.0) -> torch.Tensor:
    rows = groups.flatten()
    q = turn_returns(REWARDS[rows], MASK[rows], TURN_REWARD[rows], discount)
    uids = np.repeat(np.arange(len(groups)), K)
    return updates(groups, turn_bot_advantage(q, MASK[rows], uids, norm_by_std=norm_by_std))


def reference_updates(groups: torch.Tensor, norm_by_std: bool) -> torch.Tensor:
    advantages = [row for g in groups.tolist() for row in per_turn_index_reference(g, norm_by_std)]
    return updates(groups, torch.tensor(advantages, dtype=torch.float64))


def expected(per_group: torch.Tensor) -> torch.Tensor:
    return (GROUP_PROBS[:, None] * per_group).sum(dim=0)


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(a @ b / (a.norm() * b.norm()))


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.fixture(scope="module")
def reference_expectations() -> dict[bool, torch.Tensor]:
    return {norm: expected(reference_updates(ALL_GROUPS, norm)) for norm in (False, True)}


def test_the_enumeration_is_a_distribution_and_the_gradient_has_a_continue_component():
    assert len(TRAJECTORIES) == 14 and abs(float(PROBS.sum()) - 1) < 1e-12
    assert abs(float(GROUP_PROBS.sum()) - 1) < 1e-12
    assert GRAD_J[CONTINUE_0] > 0.1  # taking another turn pays: the per-turn rewards outweigh the outcome's drop


def test_turn_bot_centred_is_the_exact_gradient():
    assert relative_error(expected(turn_bot_updates(ALL_GROUPS, norm_by_std=False)), GRAD_J) < 1e-9


def test_turn_bot_centred_with_a_discount_is_the_exact_discounted_semi_gradient():
    gamma = 0.5

    def semi_gradient_term(i):  # sum_t grad log pi(y_t) * (G + sum_{k' >= k} gamma^(k'-k) U_k')
        works = TRAJECTORIES[i][0]
        returns = [outcome(works) + sum(gamma ** (j - k) * turn_value(works[j]) for j in range(k, len(works)))
                   for k in range(len(works))]
        return sum(t["grad"] * returns[t["turn"]] for t in ROWS[i] if t["mask"])

    target = sum(PROBS[i] * semi_gradient_term(i) for i in range(len(TRAJECTORIES)))
    assert relative_error(expected(turn_bot_updates(ALL_GROUPS, norm_by_std=False, discount=gamma)), target) < 1e-9
    assert relative_error(target, GRAD_J) > 0.05  # a different target than grad J: the discount shows


def test_turn_bot_standardised_points_along_the_exact_gradient():
    update = expected(turn_bot_updates(ALL_GROUPS, norm_by_std=True))
    assert cosine(update, GRAD_J) >= 0.99
    assert bool((torch.sign(update) == torch.sign(GRAD_J)).all())


def test_the_per_turn_index_reference_misses_the_gradient(reference_expectations):
    centred, standardised = reference_expectations[False], reference_expectations[True]
    assert relative_error(centred, GRAD_J) >= 0.5
    assert centred[CONTINUE_0] < 0 < GRAD_J[CONTINUE_0]  # it learns to stop where another turn pays
    assert cosine(standardised, GRAD_J) < 0.9
    assert standardised[CONTINUE_0] < 0


def test_the_registered_biased_estimator_is_the_reference():
    from verl_bot.advantage.turn_index import turn_index_advantage

    groups = ALL_GROUPS[:: 97]  # 396 groups of every kind
    rows = groups.flatten()
    uids = np.repeat(np.arange(len(groups)), K)
    for norm in (False, True):
        ours = turn_index_advantage(REWARDS[rows], MASK[rows], TURN_REWARD[rows], uids, norm_by_std=norm)
        theirs = torch.tensor([row for g in groups.tolist() for row in per_turn_index_reference(g, norm)],
                              dtype=torch.float64)
        torch.testing.assert_close(ours.double(), theirs, atol=1e-5, rtol=1e-5)


def test_the_reference_with_population_means_has_the_rfcs_closed_form_bias():
    exists = [[len(TRAJECTORIES[i][0]) > k for k in range(N_TURNS)] for i in range(len(TRAJECTORIES))]
    reach = [float(sum(PROBS[i] for i in range(len(TRAJECTORIES)) if exists[i][k])) for k in range(N_TURNS)]
    b = [float(sum(PROBS[i] * turn_value(TRAJECTORIES[i][0][k]) for i in range(len(TRAJECTORIES)) if exists[i][k]))
         / reach[k] for k in range(N_TURNS)]
    b_outcome = float(sum(PROBS[i] * outcome(TRAJECTORIES[i][0]) for i in range(len(TRAJECTORIES))))

    def update(i):
        works = TRAJECTORIES[i][0]
        z = [turn_value(g) - b[k] for k, g in enumerate(works)]
        return sum(t["grad"] * (outcome(works) - b_outcome + sum(z[t["turn"]:])) for t in ROWS[i] if t["mask"])

    population = sum(PROBS[i] * update(i) for i in range(len(TRAJECTORIES)))
    closed_form = GRAD_J - sum(b[k] * exact_gradient(lambda w, d, k=k: float(len(w) > k)) for k in range(N_TURNS))
    assert relative_error(population, closed_form) < 1e-9
    assert relative_error(population, GRAD_J) > 0.5


def test_sampled_groups_agree_within_five_standard_errors():
    rng = np.random.default_rng(0)
    groups = torch.as_tensor(rng.choice(len(TRAJECTORIES), size=(20_000, K), p=PROBS.numpy()))
    ours, reference = turn_bot_updates(groups, norm_by_std=False), reference_updates(groups[:5000], False)
    for sample, should_agree in ((ours, True), (reference, False)):
        mean, error = sample.mean(dim=0), sample.std(dim=0) / len(sample) ** 0.5
        assert bool(((mean - GRAD_J).abs() <= 5 * error).all()) is should_agree, (mean, GRAD_J, error)
