"""ReCo: the response weights (estimator `reco`) and the variance-ratio policy loss (loss `reco`).

Weights against hand-computed values and a slow loop reference; the estimator against verl's own `grpo`;
the loss's gradient against the formula by autograd on a tiny logits model; the trainer/worker hooks that
carry the loss's knobs; the start-up checks.
"""

import dataclasses
import math
import types

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from tensordict import TensorDict
from verl.trainer.ppo.core_algos import (
    compute_grpo_outcome_advantage,
    compute_policy_loss_vanilla,
    get_adv_estimator_fn,
    get_policy_loss_fn,
)
from verl.utils import tensordict_utils as tu
from verl.workers.config import ActorConfig

import verl_bot.plugin
from tests.harness.references import reference_weights
from verl_bot.advantage.reco import OCCURRENCES, compute_reco_advantage, pairing_metrics, reco_weights, repeat_counts
from verl_bot.credit.context import BatchContext, loss_settings, use_context, use_loss_settings
from verl_bot.errors import VerlBotConfigError
from verl_bot.hooks.ppo_loss import _make_ppo_loss
from verl_bot.hooks.v1.update_actor import _make_update_actor
from verl_bot.launch.preflight import check_config
from verl_bot.losses import loss_knobs, loss_name
from verl_bot.losses.reco import compute_policy_loss_reco, variance_ratio
from verl_bot.training.actor_update import ADVANTAGE_ATTR, KNOBS_METRIC
from verl_bot.training.actor_update import LOSS_KNOBS_KEY as EXTRA_INFO_KEY

verl_bot.plugin.register()

EPS_LOW, EPS_HIGH, CLIP_C = 0.2, 0.28, 3.0


def actor_config(**kw) -> ActorConfig:
    return ActorConfig(
        strategy="fsdp2",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio_low=EPS_LOW,
        clip_ratio_high=EPS_HIGH,
        clip_ratio_c=CLIP_C,
        **kw,
    )


def log_probs_rows(rows: list[list[float]], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, width) old log-probs from per-row probabilities (right-padded with garbage), and the mask."""
    lp = torch.full((len(rows), width), -123.0)
    mask = torch.zeros(len(rows), width)
    for i, probs in enumerate(rows):
        lp[i, : len(probs)] = torch.log(torch.tensor(probs))
        mask[i, : len(probs)] = 1
    return lp, mask


# --------------------------------------------------------------------------------------------- weights
def distinct(rows: int, width: int) -> torch.Tensor:
    """(rows, width) token ids, no two rows alike."""
    return torch.arange(rows)[:, None].expand(rows, width).clone()


def test_hand_computed_weights_of_the_model_probability():
    # length-normalized probabilities: 0.5, 0.25, 0.25 (row 2: geometric mean of 0.5, 0.125, 0.25)
    lp, mask = log_probs_rows([[0.5, 0.5], [0.25], [0.5, 0.125, 0.25]], width=4)
    for occurrence, responses in (("model", None), ("count_model", distinct(3, 4))):  # no copies: the same
        w, stats = reco_weights(lp, mask, ["g", "g", "g"], occurrence=occurrence, responses=responses)
        # pi_hat = (0.5, 0.25, 0.25); 1/(3 pi_hat) = (2/3, 4/3, 4/3), mean 10/9 -> (0.6, 1.2, 1.2)
        torch.testing.assert_close(w, torch.tensor([0.6, 1.2, 1.2]), rtol=1e-6, atol=0)
        assert stats["raw_mean"] == pytest.approx(10 / 9, rel=1e-6) and stats["clipped_share"] == 0


def test_hand_computed_weights_with_the_clip():
    lp, mask = log_probs_rows([[0.5], [0.05, 0.05]], width=2)
    # pi_hat = (0.5, 0.05) / 0.55 -> 1/(2 pi_hat) = (0.55, 5.5) -> clip (0.55, 5) -> mean 2.775
    w, stats = reco_weights(lp, mask, [7, 7], occurrence="model")
    torch.testing.assert_close(w, torch.tensor([0.55 / 2.775, 5 / 2.775]), rtol=1e-6, atol=0)
    assert stats["clipped_share"] == 0.5 and stats["raw_mean"] == pytest.approx((0.55 + 5.5) / 2, rel=1e-6)
    # a larger clip leaves them alone: (0.55, 5.5) / 3.025
    w, stats = reco_weights(lp, mask, [7, 7], w_max=10.0, occurrence="model")
    torch.testing.assert_close(w, torch.tensor([0.55 / 3.025, 5.5 / 3.025]), rtol=1e-6, atol=0)
    assert stats["clipped_share"] == 0


def test_copies_of_one_response_share_its_weight():
    # 7 copies of one response and one rarer response (length-normalized log-probs -0.05 and -0.3)
    lp = torch.tensor([[-0.05, -0.05]] * 7 + [[-0.3, -0.3]])
    mask = torch.ones(8, 2)
    responses = torch.tensor([[5, 6]] * 7 + [[5, 7]])
    index = ["g"] * 8
    model, model_stats = reco_weights(lp, mask, index, occurrence="model")
    # the model's probability alone: w = exp(-s) / mean exp(-s); the copies keep 6.76 of 8 (GRPO: 7 of 8)
    mean = (7 * math.exp(0.05) + math.exp(0.3)) / 8
    torch.testing.assert_close(model, torch.tensor([math.exp(0.05) / mean] * 7 + [math.exp(0.3) / mean]))
    assert float(model[:7].sum()) == pytest.approx(6.76, abs=0.01) and float(model[7]) == pytest.approx(1.24, abs=0.01)
    # the count: pi_hat = 7/8 and 1/8, raw 1/7 and 1 -> mean 1/4 -> 4/7 and 4: the copies keep 4 of 8
    count, stats = reco_weights(lp, mask, index, occurrence="count", responses=responses)
    torch.testing.assert_close(count, torch.tensor([4 / 7] * 7 + [4.0]))
    assert stats["duplicate_share"] == 7 / 8 and stats["duplicate_weight"] == pytest.approx(0.5)
    assert stats["raw_mean"] == pytest.approx((7 / 7 + 1) / 8)
    # both: the model's weights split among the copies, raw 1 / (8 pi_hat), pi_hat = c exp(s) / sum exp(s)
    both, _ = reco_weights(lp, mask, index, responses=responses)
    total = 7 * math.exp(-0.05) + math.exp(-0.3)
    raw = [total / (8 * 7 * math.exp(-0.05))] * 7 + [total / (8 * math.exp(-0.3))]
    torch.testing.assert_close(both, torch.tensor(raw) / (sum(raw) / 8))
    assert float(both[:7].sum()) < 4.0  # below the count's share: the copies are also the likelier response
    assert model_stats["duplicate_share"] == 0.0  # without the response ids nothing is counted


def test_raw_mean_reads_a_fully_collapsed_group():
    lp, mask = torch.full((4, 3), -0.2), torch.ones(4, 3)
    collapsed = torch.ones(4, 3, dtype=torch.long)  # four copies of one response
    w, stats = reco_weights(lp, mask, ["g"] * 4, responses=collapsed)
    assert torch.equal(w, torch.ones(4)) and stats["raw_mean"] == pytest.approx(1 / 4)
    assert stats["duplicate_share"] == 1.0 and stats["duplicate_weight"] == 1.0
    _, model_stats = reco_weights(lp, mask, ["g"] * 4, occurrence="model", responses=collapsed)
    assert model_stats["raw_mean"] == pytest.approx(1.0)  # the model's probability cannot see the copies
    _, spread = reco_weights(lp, mask, ["g"] * 4, responses=distinct(4, 3))
    assert spread["raw_mean"] == pytest.approx(1.0) and spread["duplicate_share"] == 0.0


def test_copies_are_the_same_valid_tokens_within_one_group():
    responses = torch.tensor([[1, 2, 9], [1, 2, 8], [1, 2, 9], [1, 3, 0], [1, 2, 9]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 1], [1, 1, 0], [1, 1, 0]])
    group = torch.tensor([0, 0, 0, 0, 1])
    # rows 0 and 1: the same valid tokens [1, 2] (padding differs); row 2 is longer; row 4 is in another group
    assert repeat_counts(responses, mask, group).tolist() == [2.0, 2.0, 1.0, 1.0, 1.0]
    assert repeat_counts(responses, torch.zeros_like(mask), group).tolist() == [1.0] * 5  # rows without tokens


def test_groups_singletons_and_empty_rows():
    lp, mask = log_probs_rows([[0.9], [0.1], [0.3, 0.3], [], [0.2]], width=2)
    w, _ = reco_weights(lp, mask, ["a", "a", "b", "a", "c"], responses=distinct(5, 2))
    assert w[2] == 1 and w[4] == 1  # a group of one
    assert w[3] == 1  # no tokens: w = 1, and not counted in its group
    torch.testing.assert_close(w[:2].mean(), torch.tensor(1.0))
    assert w[1] > w[0]  # the rarer response weighs more


def test_saturated_and_extreme_log_probs_stay_finite():
    lp = torch.tensor([[0.0, 0.0], [-1e4, -2e4], [-1e-9, 0.0]])
    for occurrence in OCCURRENCES:
        w, stats = reco_weights(lp, torch.ones_like(lp), [0, 0, 0], occurrence=occurrence, responses=distinct(3, 2))
        assert torch.isfinite(w).all() and (w > 0).all() and math.isfinite(stats["raw_mean"])
        assert w.max() <= 5.0 * 3 and w.mean() == pytest.approx(1.0, rel=1e-6)


def test_bad_inputs_are_refused():
    lp, mask = log_probs_rows([[0.5], [0.5]], width=1)
    ids = distinct(2, 1)
    with pytest.raises(ValueError, match="reco_w_max must be >= 1"):
        reco_weights(lp, mask, [0, 0], w_max=0.5, responses=ids)
    with pytest.raises(ValueError, match="reco_occurrence must be one of count_model, count, model"):
        reco_weights(lp, mask, [0, 0], occurrence="self", responses=ids)
    with pytest.raises(ValueError, match="occurrence=count_model counts copies of responses: pass `responses`"):
        reco_weights(lp, mask, [0, 0])
    with pytest.raises(ValueError, match="non-finite old log-probs"):
        reco_weights(torch.tensor([[float("nan")], [0.0]]), mask, ["u1", "u2"], responses=ids)
    with pytest.raises(ValueError, match="same"):
        reco_weights(lp[:, :0], mask, [0, 0], responses=ids)


@st.composite
def batches(draw):
    rows = draw(st.integers(1, 10))
    width = draw(st.integers(1, 6))
    lengths = [draw(st.integers(0, width)) for _ in range(rows)]
    index = [draw(st.integers(0, 3)) for _ in range(rows)]
    lp = [[draw(st.floats(-6.0, 0.0)) for _ in range(width)] for _ in range(rows)]
    ids = [[draw(st.integers(0, 1)) for _ in range(width)] for _ in range(rows)]  # two tokens: copies are common
    return lp, ids, lengths, index


@settings(max_examples=200, deadline=None)
@given(batches(), st.sampled_from(OCCURRENCES), st.sampled_from([1.0, 2.0, 5.0]))
def test_weights_match_the_slow_reference(batch, occurrence, w_max):
    lp, ids, lengths, index = batch
    width = len(lp[0])
    mask = torch.tensor([[1.0 if t < n else 0.0 for t in range(width)] for n in lengths])
    w, _ = reco_weights(torch.tensor(lp), mask, index, w_max=w_max, occurrence=occurrence, responses=torch.tensor(ids))
    mean_lp = [sum(row[:n]) / n if n else 0.0 for row, n in zip(lp, lengths, strict=True)]
    valid_ids = [tuple(row[:n]) for row, n in zip(ids, lengths, strict=True)]
    expected = reference_weights(mean_lp, valid_ids, index, [n > 0 for n in lengths], w_max, occurrence)
    torch.testing.assert_close(w, torch.tensor(expected, dtype=torch.float32), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------- estimator
def grpo_inputs():
    torch.manual_seed(0)
    rewards = torch.zeros(6, 4)
    lengths = [4, 2, 3, 1, 4, 2]
    mask = torch.tensor([[1.0 if t < n else 0.0 for t in range(4)] for n in lengths])
    scores = torch.tensor([1.0, 0.0, 0.5, 1.0, -1.0, 0.25])
    for i, n in enumerate(lengths):
        rewards[i, n - 1] = scores[i]
    index = np.array(["a", "a", "a", "b", "b", "b"], dtype=object)
    return rewards, mask, index


def test_equal_sequence_probabilities_give_exactly_grpo():
    rewards, mask, index = grpo_inputs()
    # different tokens and lengths, the same mean log-prob within each group
    old = torch.tensor(
        [
            [-1.0, -1.0, -1.0, -1.0],
            [-0.5, -1.5, 9.0, 9.0],
            [-2.0, -0.5, -0.5, 9.0],
            [-0.2, 9.0, 9.0, 9.0],
            [-0.1, -0.3, -0.2, -0.2],
            [-0.4, 0.0, 9.0, 9.0],
        ]
    )
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": True})
    ctx = BatchContext(tensors={"old_log_probs": old, "responses": distinct(6, 4)})
    with use_context(ctx):
        adv, ret = get_adv_estimator_fn("reco")(
            token_level_rewards=rewards, response_mask=mask, index=index, config=config
        )
    grpo, _ = compute_grpo_outcome_advantage(rewards, mask, index)
    torch.testing.assert_close(adv, grpo, rtol=1e-6, atol=0)
    assert torch.equal(adv, ret)
    assert ctx.metrics["reco/w_mean"] == pytest.approx(1.0) and ctx.metrics["reco/w_max"] == pytest.approx(1.0)
    assert ctx.metrics["reco/w_clipped_share"] == 0


def test_estimator_is_grpo_times_the_weights():
    rewards, mask, index = grpo_inputs()
    old = torch.log(torch.rand(6, 4, generator=torch.Generator().manual_seed(1)).clamp(min=0.05))
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": False, "reco_w_max": 2.0})
    responses = distinct(6, 4)
    responses[1] = responses[0]  # rows 0 and 1 of group a: the same ids, but of 4 and 2 valid tokens
    ctx = BatchContext(tensors={"old_log_probs": old, "responses": responses})
    with use_context(ctx):
        adv, _ = compute_reco_advantage(rewards, mask, index, config=config)
    grpo, _ = compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=False)
    w, stats = reco_weights(old, mask, index, w_max=2.0, responses=responses)
    torch.testing.assert_close(adv, grpo * w[:, None])
    assert not torch.allclose(w, torch.ones(6))
    assert ctx.metrics["reco/w_max"] == pytest.approx(float(w.max()))
    assert ctx.metrics["reco/w_mean"] == pytest.approx(1.0, rel=1e-6)
    assert ctx.metrics["reco/w_raw_mean"] == pytest.approx(stats["raw_mean"])
    assert ctx.metrics["reco/duplicate_share"] == 0.0  # rows 0 and 1 differ in length: not copies
    mask[1] = 1.0  # now they are
    with use_context(ctx):
        compute_reco_advantage(rewards, mask, index, config=config)
    assert ctx.metrics["reco/duplicate_share"] == pytest.approx(2 / 6)


def test_estimator_without_old_log_probs_is_one_clear_error():
    rewards, mask, index = grpo_inputs()
    with pytest.raises(VerlBotConfigError, match="adv_estimator=reco needs the batch's old log-probs and response"):
        compute_reco_advantage(rewards, mask, index)
    with use_context(BatchContext(tensors={"old_log_probs": torch.zeros(6, 4)})):
        with pytest.raises(VerlBotConfigError, match=r"\(responses missing\)"):
            compute_reco_advantage(rewards, mask, index)


# ------------------------------------------------------------------------------------------------ loss
class TinyLogits(torch.nn.Module):
    """Each response token has its own logits (B, T, V): per-token gradients do not mix."""

    def __init__(self, batch: int, width: int, vocab: int = 5, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.z = torch.nn.Parameter(torch.randn(batch, width, vocab, generator=g))
        self.tokens = torch.randint(0, vocab, (batch, width), generator=g)

    def forward(self) -> torch.Tensor:
        return torch.log_softmax(self.z, -1).gather(-1, self.tokens[..., None]).squeeze(-1)


def grad_of(model: TinyLogits, loss: torch.Tensor) -> torch.Tensor:
    (g,) = torch.autograd.grad(loss, model.z, retain_graph=True)
    return g


def test_gradient_at_theta_old_is_w_rvar_a_grad_log_pi():
    """At theta = theta_old: r_var = 1, and the update is the weighted policy gradient w * A * grad log pi."""
    model = TinyLogits(6, 4)
    rewards, mask, index = grpo_inputs()
    lp = model()
    old = lp.detach().clone()
    ctx = BatchContext(tensors={"old_log_probs": old, "responses": model.tokens})
    with use_context(ctx):
        adv, _ = compute_reco_advantage(rewards, mask, index)
    w, _ = reco_weights(old, mask, index, responses=model.tokens)
    grpo, _ = compute_grpo_outcome_advantage(rewards, mask, index)
    loss, metrics = get_policy_loss_fn("reco")(old, lp, adv, mask.bool(), "token-mean", actor_config(), None)
    r_var, _ = variance_ratio(lp, old, cap=CLIP_C)
    formula = -(w[:, None] * r_var * grpo * lp * mask).sum() / mask.sum()
    torch.testing.assert_close(grad_of(model, loss), grad_of(model, formula), rtol=1e-5, atol=1e-7)
    assert metrics["reco/rvar_mean"] == pytest.approx(1.0, abs=1e-5)


def perturbed(seed: int = 0, scale: float = 0.6):
    """A tiny model moved away from theta_old, with advantages of both signs: clipped and unclipped tokens."""
    model = TinyLogits(8, 6, seed=seed)
    old = model().detach()
    with torch.no_grad():
        model.z.add_(scale * torch.randn(model.z.shape, generator=torch.Generator().manual_seed(seed + 1)))
    adv = torch.randn(8, 1, generator=torch.Generator().manual_seed(seed + 2)).expand(8, 6).clone()
    mask = torch.ones(8, 6)
    mask[0, 4:] = 0
    mask[3, 1:] = 0
    return model, old, adv, mask


def unclipped(ratio: torch.Tensor, adv: torch.Tensor) -> torch.Tensor:
    """Tokens where verl's dual-clip PPO loss passes the gradient: A > 0, r <= 1 + eps_h; A < 0, 1 - eps_l <= r <= c."""
    return torch.where(adv > 0, ratio <= 1 + EPS_HIGH, (ratio >= 1 - EPS_LOW) & (ratio <= CLIP_C))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gradient_away_from_theta_old_is_rvar_a_grad_log_pi_on_unclipped_tokens(seed):
    model, old, adv, mask = perturbed(seed)
    lp = model()
    loss, _ = compute_policy_loss_reco(old, lp, adv, mask.bool(), "token-mean", actor_config())
    ratio = torch.exp(lp.detach() - old)
    keep = unclipped(ratio, adv) & mask.bool()
    assert 0 < keep.sum() < mask.sum(), "the case must have clipped and unclipped tokens"
    r_var, _ = variance_ratio(lp, old, cap=CLIP_C)
    assert not torch.allclose(r_var[keep], torch.ones(()))
    formula = -(r_var * adv * lp * keep).sum() / mask.sum()
    torch.testing.assert_close(grad_of(model, loss), grad_of(model, formula), rtol=1e-5, atol=1e-7)


def test_clipped_tokens_get_no_gradient_as_in_vanilla():
    model, old, adv, mask = perturbed(seed=3, scale=1.5)
    lp = model()
    reco, _ = compute_policy_loss_reco(old, lp, adv, mask.bool(), "token-mean", actor_config())
    vanilla, _ = compute_policy_loss_vanilla(old, lp, adv, mask.bool(), "token-mean", actor_config())
    per_token = lambda g: g.abs().sum(-1)  # noqa: E731 - (B, T): one token's logits
    g_reco, g_vanilla = per_token(grad_of(model, reco)), per_token(grad_of(model, vanilla))
    dead = g_vanilla == 0
    assert dead.sum() > 4 and (~dead).sum() > 4
    assert torch.all(g_reco[dead] == 0)
    assert torch.all(g_reco[~dead & (mask > 0)] > 0)


def test_saturated_old_tokens_stay_finite():
    """p_old -> 1 (and exactly 1): the floor and the cap keep r_var, the loss and its gradient finite."""
    model = TinyLogits(2, 4, vocab=3)
    lp = model()
    old = torch.tensor([[0.0, -1e-12, -1e-7, -1e-3], [0.0, -50.0, -1e-30, -0.01]])
    adv = torch.tensor([[1.0], [-1.0]]).expand(2, 4)
    mask = torch.ones(2, 4, dtype=torch.bool)
    loss, metrics = compute_policy_loss_reco(old, lp, adv, mask, "token-mean", actor_config())
    assert torch.isfinite(loss)
    assert torch.isfinite(grad_of(model, loss)).all()
    r_var, capped = variance_ratio(lp, old, cap=CLIP_C)
    assert (r_var <= CLIP_C).all() and capped.any()
    assert metrics["reco/saturated_share"] == pytest.approx(7 / 8)  # all but p_old = exp(-50)
    assert 0 < metrics["reco/rvar_capped_share"] <= 1
    # p = p_old = 1 exactly: variance 0, so no push at all (and no 0/0)
    r_var, _ = variance_ratio(torch.zeros(1, 1), torch.zeros(1, 1), cap=CLIP_C)
    assert r_var.item() == 0


def test_knobs_come_from_the_shipped_settings():
    model, old, adv, mask = perturbed(seed=4, scale=1.0)
    lp = model()
    _, default = compute_policy_loss_reco(old, lp, adv, mask.bool(), "token-mean", actor_config())
    with use_loss_settings({"reco_rvar_cap": 0.5, "reco_rvar_floor": 1e-3}):
        _, tight = compute_policy_loss_reco(old, lp, adv, mask.bool(), "token-mean", actor_config())
        with pytest.raises(ValueError, match=r"reco_rvar_cap=0: must be a finite number > 0"), use_loss_settings(
            {"reco_rvar_cap": 0}
        ):
            compute_policy_loss_reco(old, lp, adv, mask.bool(), "token-mean", actor_config())
    assert tight["reco/rvar_mean"] <= 0.5 < default["reco/rvar_mean"]
    assert tight["reco/rvar_capped_share"] > default["reco/rvar_capped_share"]
    assert {"actor/pg_clipfrac", "actor/ppo_kl"} <= set(default)  # vanilla's metrics are kept


def test_rollout_correction_weights_still_apply():
    model, old, adv, mask = perturbed(seed=5)
    lp = model()
    is_w = torch.rand(8, 6, generator=torch.Generator().manual_seed(9)) + 0.5
    with_w, _ = compute_policy_loss_reco(old, lp, adv, mask.bool(), "seq-mean-token-mean", actor_config(), is_w)
    r_var, _ = variance_ratio(lp, old, cap=CLIP_C)
    coef = r_var / torch.exp(lp.detach() - old)
    expected, _ = compute_policy_loss_vanilla(
        old, lp, adv, mask.bool(), "seq-mean-token-mean", actor_config(), coef * is_w
    )
    torch.testing.assert_close(with_w, expected)


def test_each_half_says_whether_the_other_is_on():
    assert pairing_metrics("reco", "reco") == {"reco/weights_on": 1.0, "reco/token_ratio_on": 1.0}
    assert pairing_metrics("reco", "vanilla") == {"reco/weights_on": 1.0, "reco/token_ratio_on": 0.0}
    assert pairing_metrics("grpo", "reco") == {"reco/weights_on": 0.0, "reco/token_ratio_on": 1.0}
    assert pairing_metrics("grpo", "vanilla") == {}


# ----------------------------------------------------------------------------------- hooks and checks
def test_the_worker_hook_makes_the_shipped_knobs_active_for_the_loss():
    seen = []

    def verl_ppo_loss(config, model_output, data, dp_group=None):
        seen.append(loss_settings())
        return "loss", {}

    wrapped = _make_ppo_loss(verl_ppo_loss)
    data = TensorDict({"x": torch.zeros(2)}, batch_size=[2])
    wrapped(config=None, model_output={}, data=data)
    tu.assign_non_tensor_data(data, EXTRA_INFO_KEY, {"reco_rvar_cap": 2.0})
    micro = tu.chunk_tensordict(data, 2)[1]  # what a micro-batch of the update carries
    loss, metrics = wrapped(config=None, model_output={}, data=micro, dp_group=None)
    assert loss == "loss" and list(metrics) == [KNOBS_METRIC] and metrics[KNOBS_METRIC].aggregate() == 1.0
    assert seen == [None, {"reco_rvar_cap": 2.0}]
    assert loss_settings() is None


@dataclasses.dataclass
class Batch:
    """What verl's v1 update reads of its batch meta (a dataclass, as verl's `KVBatchMeta`)."""

    extra_info: dict = dataclasses.field(default_factory=lambda: {"temperature": 1.0})
    keys: list = dataclasses.field(default_factory=lambda: ["a_0_0", "a_1_0"])
    fields: list | None = None


def test_the_trainer_hook_ships_the_knobs_and_names_the_metrics():
    class Trainer:
        config = None
        global_steps = 1

        def __init__(self):
            self.__dict__[ADVANTAGE_ATTR] = 1  # this iteration's advantages went through verl-bot's step logic

    def verl_update_actor(self, batch, metrics):
        shipped.append(dict(batch.extra_info))
        metrics.update({"actor/reco/rvar_mean": 1.25, "actor/pg_loss": 0.5, f"actor/{KNOBS_METRIC}": 1.0})
        return batch

    wrapped, shipped, trainer = _make_update_actor(verl_update_actor), [], Trainer()
    trainer.config = run_config(reco_rvar_cap=2.0, reco_w_max=3.0)
    metrics = {}
    wrapped(trainer, Batch(), metrics)
    assert shipped == [{"temperature": 1.0, EXTRA_INFO_KEY: {"reco_rvar_cap": 2.0, "reco_w_max": 3.0}}]
    assert metrics == {
        "reco/rvar_mean": 1.25,
        "actor/pg_loss": 0.5,
        "reco/weights_on": 0.0,  # the loss alone, with verl's grpo
        "reco/token_ratio_on": 1.0,
    }
    trainer.config.actor_rollout_ref.actor.policy_loss.loss_mode = "vanilla"
    trainer.config.algorithm.adv_estimator = "reco"
    metrics, shipped = {}, []
    wrapped(trainer, Batch(), metrics)
    assert EXTRA_INFO_KEY not in shipped[0]
    assert metrics["reco/weights_on"] == 1.0 and metrics["reco/token_ratio_on"] == 0.0
    assert metrics["actor/reco/rvar_mean"] == 1.25  # not ours to move: the loss is verl's


def test_an_update_whose_loss_ran_without_its_knobs_stops_the_run():
    """verl-bot's worker hook marks every update of a verl-bot loss; an actor that bypassed it (a verl whose
    worker calls another `ppo_loss`) leaves the mark out, and the step stops naming the hook."""

    def verl_update_actor(self, batch, metrics):
        metrics.update({"actor/reco/rvar_mean": 1.25})
        return batch

    trainer = types.SimpleNamespace(config=run_config(), global_steps=1)
    trainer.__dict__[ADVANTAGE_ATTR] = 1
    with pytest.raises(VerlBotConfigError, match=r"ran the reco policy loss without its knobs: .*hooks/ppo_loss.py"):
        _make_update_actor(verl_update_actor)(trainer, Batch(extra_info={}), {})


def run_config(**algorithm) -> OmegaConf:
    cfg = {
        "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False, **algorithm},
        "actor_rollout_ref": {
            "actor": {"policy_loss": {"loss_mode": "reco"}, "ppo_mini_batch_size": 2, "clip_ratio_c": 3.0}
        },
        "data": {"train_batch_size": 8},
        "trainer": {"use_v1": True},
        "reward": {"reward_manager": {"name": "naive"}},
    }
    return OmegaConf.create(cfg)


def test_the_loss_knobs_are_the_algorithm_keys_of_the_loss():
    cfg = run_config(reco_rvar_cap=2.0, reco_w_max=3.0, bot_epsilon=1.0)
    assert loss_name(cfg) == "reco"
    assert loss_knobs(cfg, "reco") == {"reco_rvar_cap": 2.0, "reco_w_max": 3.0}
    cfg.actor_rollout_ref.actor.policy_loss.loss_mode = "vanilla"
    assert loss_name(cfg) is None


@pytest.mark.parametrize(
    "estimator, algorithm, message",
    [
        ("grpo", {"reco_wmax": 3}, "unknown +algorithm.reco_wmax: the ReCo knobs are reco_w_max, reco_occurrence, "
                                   "reco_rvar_cap, reco_rvar_floor"),
        ("reco", {"reco_pi": "self"}, "unknown +algorithm.reco_pi: the ReCo knobs are reco_w_max, reco_occurrence,"),
        ("reco", {"reco_w_max": 0.5}, "+algorithm.reco_w_max=0.5: must be a finite number >= 1"),
        ("reco", {"reco_occurrence": "x"}, "+algorithm.reco_occurrence='x': must be one of count_model, count, model"),
        ("reco", {"reco_w_max": "many"}, "+algorithm.reco_w_max='many': must be a finite number >= 1"),
        ("grpo", {"reco_rvar_cap": -1}, "+algorithm.reco_rvar_cap=-1: must be a finite number > 0"),
        ("grpo", {"reco_rvar_floor": 0.5}, "+algorithm.reco_rvar_floor=0.5: must be a finite number in (0, 0.25]"),
    ],
)
def test_bad_reco_settings_stop_the_run_at_start(estimator, algorithm, message):
    cfg = run_config(**algorithm)
    cfg.algorithm.adv_estimator = estimator
    with pytest.raises(VerlBotConfigError) as err:
        check_config(cfg)
    assert str(err.value).startswith(message), str(err.value)


def test_start_up_checks_accept_either_half_and_warn_when_the_token_part_is_inert(caplog):
    check_config(run_config(reco_rvar_cap=2.0))  # the loss alone, with verl's grpo
    cfg = run_config()
    cfg.algorithm.adv_estimator = "reco"
    cfg.actor_rollout_ref.actor.policy_loss.loss_mode = "vanilla"
    check_config(cfg)  # the weights alone
    assert "reco loss is verl's vanilla loss here" not in caplog.text
    cfg = run_config()
    cfg.actor_rollout_ref.actor.ppo_mini_batch_size = 8
    check_config(cfg)
    assert "the reco loss is verl's vanilla loss here" in caplog.text
    cfg.distillation = {"enabled": True}
    with pytest.raises(VerlBotConfigError, match="loss_mode=reco with distillation.enabled=true"):
        check_config(cfg)
