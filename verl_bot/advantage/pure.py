"""PURE: min-form credit assignment for process rewards (arXiv 2504.15275; code: github.com/CJReinforce/PURE).

A baseline of the BoT-GRPO paper: `pure_advantage` and its verl adapter `compute_pure_advantage`
(`algorithm.adv_estimator=pure`), the knobs (`PureSettings`, `+algorithm.pure_*`). Step values (the mean local
signal S_t of a blank-line step, scaled and clipped to [-1, 1]: our mapping) are min-form weighted
(softmax_s(-r / T) * r [code]), a leave-one-out per-token baseline is taken off, the leave-one-out verifiable
reward goes on the last token, and the advantage is the return-to-go, 0 on step-end tokens. The formulas and
knobs: docs/ALGORITHMS.md, section 6 (PURE).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from verl.utils.groupwise import as_torch_index

from verl_bot.advantage.groups import group_sum, last_token_index, raise_for_rows
from verl_bot.credit.streams import active_streams, response_value
from verl_bot.credit.turns import multi_turn_enabled
from verl_bot.knobs import MethodSettings, knob

DEFAULT_TEMPERATURE = 0.1
STREAMS = ("local", "step_end", "outcome")


@dataclass(frozen=True)
class PureSettings(MethodSettings, prefix="pure_", label="PURE"):
    """PURE's knobs (`+algorithm.pure_<name>`; docs/ALGORITHMS.md, section 6)."""

    temperature: float = knob(DEFAULT_TEMPERATURE, bounds="(0, inf)", source="code", doc="T of the min-form softmax")
    step_scale: float = knob(1.0, source="ours", doc="c of the step value clip(c * mean S_t, -1, 1)")
    outcome_coef: float = knob(1.0, source="ours", doc="weight of the verifiable reward at EOS")


def _leave_one_out_sum(values: torch.Tensor, group: torch.Tensor, num_groups: int) -> torch.Tensor:
    """sum_{j != i, same group} values_j for each row i: (N,) -> (N,)."""
    return group_sum(values, group, num_groups)[group] - values


@torch.no_grad()
def pure_advantage(
    local: torch.Tensor,
    step_end: torch.Tensor,
    solved: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | list,
    temperature: float = DEFAULT_TEMPERATURE,
    outcome_coef: float = 1.0,
    step_scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PURE advantages and returns, vectorized over rows, steps and groups.

    Args:
        local: (B, T) local signal S_t of each token.
        step_end: (B, T) 1 on a step's last token (the last valid token always ends a step).
        solved: (B,) verifiable outcome in [0, 1] (1 = solved).
        response_mask: (B, T) 1 for response tokens, 0 for padding (right-padded rows).
        index: (B,) group label of each row (verl's `uid`).
        temperature: T of the softmax over -r / T (> 0).
        outcome_coef: weight of the verifiable reward.
        step_scale: c in r_s = clip(c * mean S, -1, 1).

    Returns:
        advantages: (B, T) float32 returns with step-end tokens and padding set to 0.
        returns: (B, T) float32 reverse cumulative token rewards, 0 on padding.
    """
    if not (local.shape == step_end.shape == response_mask.shape) or local.dim() != 2:
        raise ValueError(
            f"pure advantage: local {tuple(local.shape)}, step_end {tuple(step_end.shape)} and response_mask "
            f"{tuple(response_mask.shape)} must be the same (B, T) shape"
        )
    if temperature <= 0:
        raise ValueError(f"pure advantage: temperature must be > 0, got {temperature}")
    if index is None or len(index) != local.shape[0]:
        raise ValueError("pure advantage needs one group id (uid) per row")
    batch, width = local.shape
    if batch == 0:
        return torch.zeros_like(local, dtype=torch.float32), torch.zeros_like(local, dtype=torch.float32)

    mask = response_mask != 0
    lengths = mask.sum(dim=1).float()  # (B,) L_i
    has_tokens = lengths > 0
    rows = torch.arange(batch, device=local.device)
    last = last_token_index(response_mask)
    raise_for_rows("pure advantage: non-finite local rewards", (~torch.isfinite(local) & mask).any(dim=1), index)
    raise_for_rows(
        "pure advantage: no verifiable outcome (the verdict's info has none of solved/correct/compiled)",
        ~torch.isfinite(solved) & has_tokens,
        index,
    )

    # steps: step id of every token, then per-step sums and token counts in a (B, T) step-indexed buffer
    ends = (step_end != 0) & mask
    ends[rows[has_tokens], last[has_tokens]] = True
    step_id = ends.long().cumsum(dim=1) - ends.long()  # (B, T) 0-based step of each token
    values = torch.where(mask, local.float(), 0.0)
    step_sum = torch.zeros(batch, width, device=local.device).scatter_add_(1, step_id, values)
    step_len = torch.zeros(batch, width, device=local.device).scatter_add_(1, step_id, mask.float())  # n_{i,s}
    valid_step = step_len > 0

    # min-form transform of the step values
    r = (step_scale * step_sum / step_len.clamp(min=1.0)).clamp(-1.0, 1.0)
    weights = torch.softmax(torch.where(valid_step, -r / temperature, -torch.inf), dim=1)
    r_star = torch.where(valid_step, weights * r, 0.0)  # (B, S)

    # leave-one-out baselines within each group
    group = as_torch_index(index, device=local.device)
    num_groups = int(group.max()) + 1
    total = r_star.sum(dim=1) * has_tokens  # (B,) R_i
    others_r = _leave_one_out_sum(total, group, num_groups)
    others_len = _leave_one_out_sum(lengths, group, num_groups)
    per_token = torch.where(others_len > 0, others_r / others_len.clamp(min=1.0), 0.0)
    r_star = torch.where(valid_step, r_star - per_token[:, None] * step_len, 0.0)

    verifiable = torch.where(has_tokens, solved.float() - 1.0, 0.0)  # (B,) in [-1, 0]
    others_n = _leave_one_out_sum(has_tokens.float(), group, num_groups)
    verifiable = verifiable - torch.where(
        others_n > 0, _leave_one_out_sum(verifiable, group, num_groups) / others_n.clamp(min=1.0), 0.0
    )

    # token rewards -> returns (gamma = 1) -> advantages
    token_rewards = torch.where(ends, r_star.gather(1, step_id), 0.0)
    token_rewards[rows[has_tokens], last[has_tokens]] += outcome_coef * verifiable[has_tokens]
    returns = token_rewards.flip(1).cumsum(dim=1).flip(1) * mask
    advantages = torch.where(ends, 0.0, returns)
    return advantages, returns


def compute_pure_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl adapter for `pure_advantage` (registered as `algorithm.adv_estimator=pure`).

    Reads the reward streams `local`, `step_end`, `outcome` (one value per response:
    `verl_bot.credit.streams.response_value`) (`verl_bot.credit.streams`) instead of
    `token_level_rewards`, and from the `algorithm` config `pure_temperature` (0.1),
    `pure_outcome_coef` (1.0) and `pure_step_scale` (1.0) (`PureSettings`, set with `+algorithm.pure_temperature=...`).

    Args:
        token_level_rewards: (B, T), used only for its shape. response_mask: (B, T). index: (B,) uids.

    Returns:
        (advantages, returns): both (B, T).
    """
    settings = PureSettings.from_config(config)
    streams = active_streams("pure", STREAMS, response_mask)
    solved = response_value(streams["outcome"])  # written on the last response token, masked or not
    return pure_advantage(
        streams["local"],
        streams["step_end"],
        solved,
        response_mask,
        index,
        temperature=settings.temperature,
        outcome_coef=settings.outcome_coef,
        step_scale=settings.step_scale,
    )


def startup_problem(config: Any, train_files: list[str]) -> str | None:
    """Why `adv_estimator=pure` cannot run with verl's composed `config` (one line), or None: a multi-turn run
    (`multi_turn.enable=true`), whose tool replies hold blank lines that would end PURE's steps too. `train_files`
    is not needed."""
    if not multi_turn_enabled(config):
        return None
    return (
        "adv_estimator=pure: blank-line steps also occur in tool responses; not supported with multi_turn.enable=true"
    )
