"""ReCo's token weight (arXiv 2607.26862): the Bernoulli-variance ratio as a stop-gradient coefficient.

The verl policy loss `reco` (`compute_policy_loss_reco`, `actor_rollout_ref.actor.policy_loss.loss_mode=reco`), its
ratio (`variance_ratio`, floored and capped [ours]) and its start-up check: verl's vanilla PPO loss (clip, dual clip,
aggregation) with each token scaled by a stop-gradient factor,

    r_var = p (1 - p) / (p_old (1 - p_old))  [paper],    loss_t = sg[r_var / r] * vanilla_t(r, A)  [ours]

so the gradient is r_var * A * grad log p on unclipped tokens and 0 on clipped ones (through r_var it would push
likely tokens the wrong way). r_var = r = 1 on an iteration's first mini-batch. Why a coefficient, the knobs,
metrics and tests: docs/ALGORITHMS.md, sections ReCo and ReCo in a verl run.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla

from verl_bot.advantage.reco import DEFAULT_RVAR_FLOOR, RecoSettings
from verl_bot.credit.context import loss_settings

SATURATED_P = 0.99
LOG_RATIO_CLAMP = 20.0  # verl's vanilla loss clamps log(p / p_old) to +-20 before exp
logger = logging.getLogger("verl_bot")


def ratio_options(settings: Any, clip_ratio_c: float) -> tuple[float, float]:
    """(cap, floor) of r_var from the loss's knobs (`RecoSettings`: `reco_rvar_cap`, default `clip_ratio_c`;
    `reco_rvar_floor`, 1e-6).

    `settings` is `loss_settings()` in the worker or verl's `algorithm` config at start-up (None: the defaults).
    Raises VerlBotConfigError (a ValueError) naming the key unless cap > 0 and 0 < floor <= 1/4 (the largest
    Bernoulli variance).
    """
    knobs = RecoSettings.from_config(settings, rvar_cap=clip_ratio_c)
    return knobs.rvar_cap, knobs.rvar_floor


def startup_problem(config: Any, train_files: list[str]) -> str | None:
    """Why the `reco` loss cannot run with verl's composed `config` (one line), or None; warns when it is inert.

    Its knobs are read with the actor's `clip_ratio_c` (the cap's default); `train_files` is not needed.
    """
    actor = (config.get("actor_rollout_ref") or {}).get("actor") or {}
    ratio_options(config.get("algorithm"), float(actor.get("clip_ratio_c", 3.0)))
    if (config.get("distillation") or {}).get("enabled", False):
        return (
            "policy_loss.loss_mode=reco with distillation.enabled=true: verl's distillation loss does not pass "
            "verl-bot's loss settings on; use the reco estimator with the vanilla loss, or switch distillation off"
        )
    mini, batch = actor.get("ppo_mini_batch_size"), (config.get("data") or {}).get("train_batch_size")
    if int(actor.get("ppo_epochs", 1)) == 1 and mini is not None and batch is not None and int(mini) >= int(batch):
        logger.warning(
            "policy_loss.loss_mode=reco with one mini-batch (ppo_mini_batch_size=%s >= data.train_batch_size=%s) "
            "and ppo_epochs=1: the variance ratio is 1 on the first mini-batch of a step, so the reco loss is "
            "verl's vanilla loss here; lower ppo_mini_batch_size or raise ppo_epochs for it to act",
            mini,
            batch,
        )
    return None


@torch.no_grad()
def variance_ratio(
    log_prob: torch.Tensor, old_log_prob: torch.Tensor, cap: float, floor: float = DEFAULT_RVAR_FLOOR
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReCo's r_var, floored and capped (no gradient).

    Args:
        log_prob: (B, T) log p under the current policy. old_log_prob: (B, T) log p_old.
        cap: upper bound of r_var. floor: lower bound of p_old (1 - p_old).

    Returns:
        r_var: (B, T) float32 min(p (1 - p) / max(p_old (1 - p_old), floor), cap), in [0, cap].
        capped: (B, T) bool, where the cap bound.
    """
    lp, old = log_prob.float(), old_log_prob.float()
    var = lp.exp() * (-torch.expm1(lp))  # 1 - p as -expm1(log p): exact near p = 1
    var_old = (old.exp() * (-torch.expm1(old))).clamp(min=floor)
    r_var = var / var_old
    capped = r_var > cap
    return r_var.clamp(max=cap), capped


@torch.no_grad()
def reco_coefficient(log_prob: torch.Tensor, old_log_prob: torch.Tensor, r_var: torch.Tensor) -> torch.Tensor:
    """sg[r_var / r] (B, T), with r = exp(clamp(log p - log p_old, -20, 20)) as in verl's vanilla loss.

    Finite: r_var <= cap and r >= exp(-20).
    """
    log_ratio = (log_prob.float() - old_log_prob.float()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return r_var * torch.exp(-log_ratio)


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    return float((values.float() * mask).sum() / mask.sum().clamp(min=1))


def compute_policy_loss_reco(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """verl policy loss `reco` (registered; `actor_rollout_ref.actor.policy_loss.loss_mode=reco`).

    loss = agg_t( sg[r_var / r] * rollout_is_weights * vanilla_t ), verl's `compute_policy_loss_vanilla`
    doing the clip, the dual clip and the aggregation (`agg_loss` with `config.global_batch_info`).
    Knobs from `loss_settings()` (shipped from `+algorithm.reco_rvar_cap`, `+algorithm.reco_rvar_floor`);
    the cap defaults to `config.clip_ratio_c`.

    Args:
        old_log_prob, log_prob, advantages: (B, T). response_mask: (B, T) bool or 0/1.
        loss_agg_mode: verl's aggregation mode. config: the actor config (ActorConfig).
        rollout_is_weights: (B, T) verl's rollout-correction weights, or None.

    Returns:
        (loss, metrics): the scalar loss and vanilla's metrics plus `reco/rvar_mean`, `reco/rvar_capped_share`,
        `reco/saturated_share`.
    """
    cap, floor = ratio_options(loss_settings(), float(config.get("clip_ratio_c", 3.0)))
    r_var, capped = variance_ratio(log_prob.detach(), old_log_prob, cap, floor)
    coef = reco_coefficient(log_prob.detach(), old_log_prob, r_var).to(log_prob.dtype)
    weights = coef if rollout_is_weights is None else coef * rollout_is_weights
    loss, metrics = compute_policy_loss_vanilla(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=response_mask,
        loss_agg_mode=loss_agg_mode,
        config=config,
        rollout_is_weights=weights,
    )
    mask = response_mask.float()
    metrics.update(
        {
            "reco/rvar_mean": _masked_mean(r_var, mask),
            "reco/rvar_capped_share": _masked_mean(capped, mask),
            "reco/saturated_share": _masked_mean(old_log_prob.float().exp() > SATURATED_P, mask),
        }
    )
    return loss, metrics
