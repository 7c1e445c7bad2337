"""The step's reward metrics from each rollout's `reward_extra_info` (what the `bot` manager reports per response).

- every numeric key -> `reward/<key>/mean`, averaged over ALL rollouts of the
  step (padding rows excluded); a rollout without the key counts 0 (a part
  its scorer did not report contributes nothing to G);
- `flags` (a comma-joined string on every rollout: `judge_unavailable`,
  `render_timeout`, `steps_truncated`, ...) -> `reward/flag/<name>/mean`,
  the share of rollouts carrying each flag;
- strings other than `flags` (the scorer's error message) are not metrics.

`local_signal` (`verl_bot.credit.token_credit`, with dense rewards) thus becomes `reward/local_signal/mean`: the share
of the step's rollouts whose generated tokens carry any non-zero local signal S_t.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from verl_bot.credit.token_credit import FLAGS_KEY


def _info(extra: Any) -> dict:
    info = extra.get("reward_extra_info", {}) if isinstance(extra, dict) else {}
    return info if isinstance(info, dict) else {}


def training_reward_metrics(extra_fields: Sequence[Any]) -> dict[str, float]:
    """`reward/<key>/mean` and `reward/flag/<name>/mean` over the rollouts' `extra_fields` (padding excluded)."""
    infos = [_info(extra) for extra in extra_fields]
    if not infos:
        return {}
    sums: dict[str, float] = {}
    flag_counts: dict[str, int] = {}
    for info in infos:
        for key, value in info.items():
            if key == FLAGS_KEY and isinstance(value, str):
                for flag in filter(None, value.split(",")):
                    flag_counts[flag] = flag_counts.get(flag, 0) + 1
            elif isinstance(value, bool | int | float | np.number) and math.isfinite(float(value)):
                sums[key] = sums.get(key, 0.0) + float(value)
    n = len(infos)
    metrics = {f"reward/{key}/mean": total / n for key, total in sums.items()}
    metrics.update({f"reward/flag/{flag}/mean": count / n for flag, count in flag_counts.items()})
    return metrics
