"""ReCo's response weights (Reweighting GRPO against distributional Concentration, arXiv 2607.26862).

`reco_weights` (and `repeat_counts`), the knobs (`RecoSettings`, `+algorithm.reco_*`, shared with the loss
`verl_bot/losses/reco.py`), the pairing metrics and the verl adapter `compute_reco_advantage`
(`algorithm.adv_estimator=reco`): verl's `grpo` advantage of each response times its weight

    w_i = 1 / (K * pi_hat_i), clipped at w_max and rescaled to a group mean of 1.

The old log-probs and response ids come from the batch context (`verl_bot.credit.context`). The formulas,
what is the paper's and what ours, the knobs and metrics: docs/ALGORITHMS.md, section ReCo.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from verl.utils.groupwise import as_torch_index

from verl_bot.actor_needs import ActorNeeds
from verl_bot.advantage.groups import group_sum, raise_for_rows
from verl_bot.credit.context import current, report_metrics
from verl_bot.errors import VerlBotConfigError
from verl_bot.knobs import MethodSettings, enum_name, knob

DEFAULT_W_MAX = 5.0
DEFAULT_RVAR_FLOOR = 1e-6
OCCURRENCES = ("count_model", "count", "model")  # the first is the default
FIELDS = ("responses",)  # trajectory fields read from the batch context (the copies' token ids)


def check_weight_knobs(w_max: float, occurrence: str) -> None:
    """Raise ValueError for a weight clip below 1 or an unknown occurrence estimate."""
    if not w_max >= 1.0:
        raise ValueError(f"reco_w_max must be >= 1 (the weights are rescaled to a group mean of 1), got {w_max}")
    if occurrence not in OCCURRENCES:
        raise ValueError(f"reco_occurrence must be one of {', '.join(OCCURRENCES)}, got {occurrence!r}")


@dataclass(frozen=True)
class RecoSettings(MethodSettings, prefix="reco_", label="ReCo"):
    """ReCo's knobs, both halves (`+algorithm.reco_<name>`): the response weights of this estimator (`w_max`,
    `occurrence`) and the token ratio of its loss (`rvar_cap`, `rvar_floor`: `verl_bot.losses.reco`)."""

    w_max: float = knob(
        DEFAULT_W_MAX, bounds="[1, inf)", source="paper", doc="clip of the raw weights 1/(K pi_hat)"
    )
    occurrence: str = knob(OCCURRENCES[0], choices=OCCURRENCES, source="ours", doc="the estimate pi_hat")
    rvar_cap: float | None = knob(
        None, bounds="(0, inf)", source="ours", doc="the loss's cap of r_var (default: the actor's clip_ratio_c)"
    )
    rvar_floor: float = knob(
        DEFAULT_RVAR_FLOOR, bounds="(0, 0.25]", source="ours", doc="the loss's floor of p_old (1 - p_old)"
    )


def reco_options(algorithm: Any) -> dict[str, Any]:
    """The keyword arguments of `reco_weights` from verl's `algorithm` config (`RecoSettings`; None: the defaults).

    Keys: `reco_w_max` (5.0) and `reco_occurrence` ("count_model"), set with `+algorithm.<key>=...`. Raises
    VerlBotConfigError (a ValueError) naming the key for a bad value (also at start-up: `verl_bot.launch.preflight`).
    """
    settings = RecoSettings.from_config(algorithm)
    return {"w_max": settings.w_max, "occurrence": settings.occurrence}


def repeat_counts(responses: torch.Tensor, response_mask: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """c_i: how many rows of row i's group hold the same response (the same valid token ids), itself included.

    Args:
        responses: (B, T) token ids. response_mask: (B, T) 1 on response tokens. group: (B,) group ids.

    Returns:
        (B,) float64 counts >= 1 (1 for a row without tokens).
    """
    mask = response_mask != 0
    key = torch.cat([group[:, None], torch.where(mask, responses.long(), -1)], dim=1)  # (B, 1 + T)
    _, inverse, counts = torch.unique(key, dim=0, return_inverse=True, return_counts=True)
    return torch.where(mask.any(dim=1), counts[inverse].double(), 1.0)


@torch.no_grad()
def reco_weights(
    old_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | list,
    w_max: float = DEFAULT_W_MAX,
    occurrence: str = OCCURRENCES[0],
    responses: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """ReCo's per-response weights, vectorized over rows and groups.

    Args:
        old_log_probs: (B, T) log pi_old of each response token; padding is ignored.
        response_mask: (B, T) 1 for response tokens, 0 for padding.
        index: (B,) group label of each row (verl's `uid`).
        w_max: clip of the raw weights 1/(K pi_hat), >= 1.
        occurrence: count_model | count | model, the estimate pi_hat (docs/ALGORITHMS.md, ReCo).
        responses: (B, T) token ids; needed by `count` and `count_model` (and for the duplicate metrics).

    Returns:
        weights: (B,) float32, > 0; each group's rows with tokens average 1; 1 for rows without tokens.
        stats: `raw_mean` (mean of 1/(K pi_hat) over rows with tokens, before the clip: 1 when every response
            is distinct and equally likely; with a count, 1/K when every group is K copies of one response;
            `model` alone gives at least 1, and exactly 1 for such a group, whose repeats it cannot see),
            `clipped_share` (share of those rows whose raw weight exceeded w_max), `duplicate_share` (share of
            them with a copy in their group) and `duplicate_weight` (the copies' share of their weight: the
            same as `duplicate_share` under GRPO, w = 1); the last two 0 without `responses`.
    """
    if old_log_probs.shape != response_mask.shape or old_log_probs.dim() != 2:
        raise ValueError(
            f"reco weights: old_log_probs {tuple(old_log_probs.shape)} and response_mask "
            f"{tuple(response_mask.shape)} must be the same (B, T) shape"
        )
    check_weight_knobs(w_max, occurrence)
    if index is None or len(index) != old_log_probs.shape[0]:
        raise ValueError("reco weights need one group id (uid) per row")
    if responses is None and occurrence != "model":
        raise ValueError(f"reco weights: occurrence={occurrence} counts copies of responses: pass `responses`")
    if responses is not None and responses.shape != response_mask.shape:
        raise ValueError(f"reco weights: responses {tuple(responses.shape)}, mask {tuple(response_mask.shape)}")
    batch = old_log_probs.shape[0]
    if batch == 0:
        empty = {"raw_mean": 1.0, "clipped_share": 0.0, "duplicate_share": 0.0, "duplicate_weight": 0.0}
        return old_log_probs.new_ones(0, dtype=torch.float32), empty

    mask = response_mask != 0
    valid = mask.any(dim=1)  # (B,)
    raise_for_rows(
        "reco weights: non-finite old log-probs (NaN/inf)", (~torch.isfinite(old_log_probs) & mask).any(dim=1), index
    )
    group = as_torch_index(index, device=old_log_probs.device)
    num_groups = int(group.max()) + 1
    count = group_sum(valid.double(), group, num_groups)  # (G,) K
    copies = (
        repeat_counts(responses, response_mask, group) if responses is not None
        else torch.ones(batch, dtype=torch.float64, device=old_log_probs.device)
    )
    log_share = torch.zeros(batch, dtype=torch.float64, device=old_log_probs.device)  # log pi_hat_i
    if occurrence != "model":
        log_share += copies.log()
    if occurrence != "count":
        lengths = mask.sum(dim=1).clamp(min=1).double()
        s = torch.where(mask, old_log_probs.double(), 0.0).sum(dim=1) / lengths  # (B,) s_i, <= 0
        log_share += s - _group_logsumexp(torch.where(valid, s, -torch.inf), group, num_groups)[group]
    else:
        log_share -= count.clamp(min=1.0).log()[group]
    log_w = -count.clamp(min=1.0).log()[group] - log_share  # log 1/(K pi_hat)
    raw = log_w.exp()  # may be inf for a very unlikely response; only its clip is used below
    clipped = log_w > math.log(w_max)
    w = torch.where(valid, log_w.clamp(max=math.log(w_max)).exp(), 0.0)  # each in [1/K, w_max]
    mean = group_sum(w, group, num_groups) / count.clamp(min=1.0)
    weights = torch.where(valid, w / mean[group].clamp(min=1e-30), 1.0)
    n_valid = max(int(valid.sum()), 1)
    copied = valid & (copies >= 2) if responses is not None else torch.zeros_like(valid)
    stats = {
        "raw_mean": float(torch.where(valid, raw.clamp(max=torch.finfo(torch.float32).max), 0.0).sum() / n_valid),
        "clipped_share": float((clipped & valid).sum()) / n_valid,
        "duplicate_share": float(copied.sum()) / n_valid,
        "duplicate_weight": float(weights[copied].sum() / weights[valid].sum().clamp(min=1e-30)),
    }
    return weights.float(), stats


def _group_logsumexp(values: torch.Tensor, group: torch.Tensor, num_groups: int) -> torch.Tensor:
    """(G,) log sum_{i in g} exp(values_i) with each group's max taken out; -inf values drop out.

    values: (B,) float64, -inf for rows that take no part. Groups without a finite value get 0.
    """
    top = torch.full((num_groups,), -torch.inf, dtype=values.dtype, device=values.device)
    top = top.scatter_reduce(0, group, values, "amax")
    top = torch.where(torch.isfinite(top), top, 0.0)
    total = group_sum(torch.where(torch.isfinite(values), (values - top[group]).exp(), 0.0), group, num_groups)
    return total.clamp(min=1e-300).log() + top


def compute_reco_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl adapter (registered as `algorithm.adv_estimator=reco`): verl's `grpo` advantage times ReCo's weights.

    Reads `old_log_probs` and `responses` from the batch context (`verl_bot.credit.context.current().tensors`), and
    from the `algorithm` config `reco_w_max` (5.0), `reco_occurrence` ("count_model") and verl's own
    `norm_adv_by_std_in_grpo` (set with `+algorithm.reco_w_max=...`). Reports `reco/w_mean`, `reco/w_max`,
    `reco/w_min`, `reco/w_raw_mean`, `reco/w_clipped_share`, `reco/duplicate_share` and
    `reco/duplicate_weight` (`reco_weights`' stats) to the step's metrics.

    Args:
        token_level_rewards: (B, T), summed per row as in verl's `grpo`. response_mask: (B, T). index: (B,) uids.

    Returns:
        (advantages, returns): both (B, T), the same tensor as in verl's `grpo`.
    """
    get = config.get if config is not None else (lambda key, default=None: default)
    options = reco_options(config)
    ctx = current()
    tensors = ctx.tensors if ctx is not None else {}
    missing = [name for name in ("old_log_probs", *FIELDS) if name not in tensors]
    if missing:
        raise VerlBotConfigError(
            f"adv_estimator=reco needs the batch's old log-probs and response ids ({', '.join(missing)} missing), "
            "which verl-bot's trainer hooks put in the batch context; outside verl's v1 trainer call "
            "`reco_weights` directly"
        )
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage  # imported by verl's trainer

    responses = tensors["responses"].to(response_mask.device)
    weights, stats = reco_weights(tensors["old_log_probs"], response_mask, index, responses=responses, **options)
    advantages, _ = compute_grpo_outcome_advantage(
        token_level_rewards=token_level_rewards,
        response_mask=response_mask,
        index=index,
        norm_adv_by_std_in_grpo=bool(get("norm_adv_by_std_in_grpo", True)),
        config=config,
    )
    advantages = advantages * weights.to(advantages.dtype)[:, None]
    valid = (response_mask != 0).any(dim=1)
    shown = weights[valid] if valid.any() else weights.new_ones(1)
    report_metrics(
        {
            "reco/w_mean": float(shown.mean()),
            "reco/w_max": float(shown.max()),
            "reco/w_min": float(shown.min()),
            "reco/w_raw_mean": stats["raw_mean"],
            "reco/w_clipped_share": stats["clipped_share"],
            "reco/duplicate_share": stats["duplicate_share"],
            "reco/duplicate_weight": stats["duplicate_weight"],
        }
    )
    return advantages, advantages


def pairing_metrics(adv_estimator: str, loss_mode: str) -> dict[str, float]:
    """`reco/weights_on` and `reco/token_ratio_on` (0/1) when either half of ReCo is on, else {}.

    Each half works alone: the weights with any loss, the token ratio with any estimator.
    """
    weights, ratio = adv_estimator == "reco", loss_mode == "reco"
    if not (weights or ratio):
        return {}
    return {"reco/weights_on": float(weights), "reco/token_ratio_on": float(ratio)}


def pairing_step_metrics(config: Any, metrics: dict, rows: int, fields_s: float) -> None:
    """`pairing_metrics` of the run into the iteration's metrics (ReCo's `ActorNeeds.metrics`, on both halves)."""
    estimator = enum_name(config.algorithm.adv_estimator)
    loss_mode = str(config.actor_rollout_ref.actor.policy_loss.get("loss_mode", "vanilla"))
    metrics.update(pairing_metrics(estimator, loss_mode))


NEEDS = ActorNeeds(metrics=pairing_step_metrics)
