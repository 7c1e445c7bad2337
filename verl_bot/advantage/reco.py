"""ReCo's response weights (Reweighting GRPO against distributional Concentration, arXiv 2607.26862).

ReCo keeps GRPO's advantage and divides each response's contribution by its
expected occurrence in the group, so that the few responses a concentrated
policy keeps resampling do not drown out the rare ones:

    A_i = GRPO(R)_i = (R_i - mean_g R) / (std_g R + eps)      verl's `grpo` on the summed token rewards
    s_i = (1/L_i) * sum_t log pi_old(o_i,t | h_i,t)             length-normalized sequence log-prob
    pi_hat_i = exp(s_i) / sum_{j in g} exp(s_j)                 "self" (default): normalized within the group
             = exp(s_i)                                         "absolute"
    w_i = 1 / (K * pi_hat_i),  w_i <- min(w_i, w_max),  w_i <- w_i / mean_{j in g} w_j
    advantage_i,t = w_i * A_i   on every response token

K is the number of the group's rollouts. What is the paper's: w_i = 1/(G *
pi_old(o_i|q)) and clipping the weights (w_max = 5, from a reimplementation).
Ours, where the paper's text was not available: pi is length-normalized (the
raw sequence probability makes 1/(K pi) astronomically large), normalized
within the group by default (all responses equally likely gives w = 1, i.e.
exactly GRPO), and the weights are rescaled to a group mean of 1 after the
clip. A group of one rollout gets w = 1; rows without tokens get w = 1 and take
no part in their group. All sums run in log space: never inf or NaN.

The old log-probs are not among verl's registry arguments: the batch context
(`verl_bot.context`, filled by the trainer hooks) carries them. A positive
per-response weight commutes with PPO's clip, so folding it into A is exact
for verl's vanilla (dual-clip) loss.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from verl.utils.groupwise import as_torch_index

from verl_bot.advantage.common import group_sum, raise_for_rows
from verl_bot.context import current, report_metrics
from verl_bot.errors import VerlBotConfigError

DEFAULT_W_MAX = 5.0
PI_MODES = ("self", "absolute")
KNOBS = ("reco_w_max", "reco_pi")  # `+algorithm.<knob>`, read by `reco_options`


def check_weight_knobs(w_max: float, pi: str) -> None:
    """Raise ValueError for a weight clip below 1 or an unknown pi mode."""
    if not w_max >= 1.0:
        raise ValueError(f"reco_w_max must be >= 1 (the weights are rescaled to a group mean of 1), got {w_max}")
    if pi not in PI_MODES:
        raise ValueError(f"reco_pi must be one of {', '.join(PI_MODES)}, got {pi!r}")


def reco_options(algorithm: Any) -> dict[str, Any]:
    """The keyword arguments of `reco_weights` from verl's `algorithm` config (None: the defaults).

    Keys: `reco_w_max` (5.0) and `reco_pi` ("self"), set with `+algorithm.<key>=...`. Raises VerlBotConfigError
    (a ValueError) naming the key for a bad value (also at start-up: `verl_bot.preflight`).
    """
    get = algorithm.get if algorithm is not None else (lambda key, default=None: default)
    w_max, pi = get("reco_w_max", DEFAULT_W_MAX), get("reco_pi", "self")
    try:
        check_weight_knobs(float(w_max), str(pi))
    except (TypeError, ValueError) as exc:
        raise VerlBotConfigError(f"+algorithm.reco_w_max={w_max!r}, reco_pi={pi!r}: {exc}") from exc
    return {"w_max": float(w_max), "pi": str(pi)}


@torch.no_grad()
def reco_weights(
    old_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | list,
    w_max: float = DEFAULT_W_MAX,
    pi: str = "self",
) -> tuple[torch.Tensor, dict[str, float]]:
    """ReCo's per-response weights, vectorized over rows and groups.

    Args:
        old_log_probs: (B, T) log pi_old of each response token; padding is ignored.
        response_mask: (B, T) 1 for response tokens, 0 for padding.
        index: (B,) group label of each row (verl's `uid`).
        w_max: clip of the raw weights 1/(K pi_hat), >= 1.
        pi: "self" (pi_hat normalized within the group) or "absolute" (pi_hat = exp(mean log-prob)).

    Returns:
        weights: (B,) float32, > 0; each group's rows with tokens average 1; 1 for rows without tokens.
        stats: `raw_mean` (mean of 1/(K pi_hat) over rows with tokens, >= 1 for "self": how concentrated the
            groups are) and `clipped_share` (share of those rows whose raw weight exceeded w_max).
    """
    if old_log_probs.shape != response_mask.shape or old_log_probs.dim() != 2:
        raise ValueError(
            f"reco weights: old_log_probs {tuple(old_log_probs.shape)} and response_mask "
            f"{tuple(response_mask.shape)} must be the same (B, T) shape"
        )
    check_weight_knobs(w_max, pi)
    if index is None or len(index) != old_log_probs.shape[0]:
        raise ValueError("reco weights need one group id (uid) per row")
    batch = old_log_probs.shape[0]
    if batch == 0:
        return old_log_probs.new_ones(0, dtype=torch.float32), {"raw_mean": 1.0, "clipped_share": 0.0}

    mask = response_mask != 0
    valid = mask.any(dim=1)  # (B,)
    raise_for_rows(
        "reco weights: non-finite old log-probs (NaN/inf)", (~torch.isfinite(old_log_probs) & mask).any(dim=1), index
    )
    lengths = mask.sum(dim=1).clamp(min=1).float()
    s = torch.where(mask, old_log_probs.float(), 0.0).sum(dim=1) / lengths  # (B,) s_i, <= 0

    group = as_torch_index(index, device=old_log_probs.device)
    num_groups = int(group.max()) + 1
    count = group_sum(valid.float(), group, num_groups)  # (G,) K
    log_k = count.clamp(min=1.0).log()[group]  # (B,)
    if pi == "self":
        # log w_i = log sum_j exp(s_j) - log K - s_i, with the group max taken out of the sum
        s_in = torch.where(valid, s, -torch.inf)
        top = torch.full((num_groups,), -torch.inf, device=s.device).scatter_reduce(0, group, s_in, "amax")
        top = torch.where(torch.isfinite(top), top, 0.0)  # groups without valid rows
        lse = group_sum(torch.where(valid, (s - top[group]).exp(), 0.0), group, num_groups).clamp(min=1e-30).log()
        log_w = lse[group] + top[group] - log_k - s
    else:
        log_w = -log_k - s  # >= -log K: s <= 0
    raw = log_w.exp()  # may be inf for "absolute" on very unlikely responses; only its clip is used below
    clipped = log_w > math.log(w_max)
    w = torch.where(valid, log_w.clamp(max=math.log(w_max)).exp(), 0.0)  # each in [1/K, w_max]
    mean = group_sum(w, group, num_groups) / count.clamp(min=1.0)
    weights = torch.where(valid, w / mean[group].clamp(min=1e-30), 1.0)
    n_valid = max(int(valid.sum()), 1)
    stats = {
        "raw_mean": float(torch.where(valid, raw.clamp(max=torch.finfo(torch.float32).max), 0.0).sum() / n_valid),
        "clipped_share": float((clipped & valid).sum()) / n_valid,
    }
    return weights, stats


def compute_reco_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl adapter (registered as `algorithm.adv_estimator=reco`): verl's `grpo` advantage times ReCo's weights.

    Reads `old_log_probs` from the batch context (`verl_bot.context.current().tensors`), and from the
    `algorithm` config `reco_w_max` (5.0), `reco_pi` ("self") and verl's own `norm_adv_by_std_in_grpo`
    (set with `+algorithm.reco_w_max=...`). Reports `reco/w_mean`, `reco/w_max`, `reco/w_min`,
    `reco/w_raw_mean` and `reco/w_clipped_share` to the step's metrics.

    Args:
        token_level_rewards: (B, T), summed per row as in verl's `grpo`. response_mask: (B, T). index: (B,) uids.

    Returns:
        (advantages, returns): both (B, T), the same tensor as in verl's `grpo`.
    """
    get = config.get if config is not None else (lambda key, default=None: default)
    options = reco_options(config)
    ctx = current()
    old_log_probs = ctx.tensors.get("old_log_probs") if ctx is not None else None
    if old_log_probs is None:
        raise VerlBotConfigError(
            "adv_estimator=reco needs the batch's old log-probs (old_log_probs), which verl-bot's trainer hooks "
            "put in the batch context; outside verl's v1 trainer call `reco_weights` directly"
        )
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage  # imported by verl's trainer

    weights, stats = reco_weights(old_log_probs, response_mask, index, **options)
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
        }
    )
    return advantages, advantages
