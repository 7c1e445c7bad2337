"""A noisy local signal: flip or jitter a verdict's local spans, reproducibly (the CPU scorers' `flip`/`jitter`).

The paper claims that stable local signals beat rich but noisy ones; `LocalNoise` makes a local signal noisy on
purpose so the claim can be measured on the CPU tasks: per span, value <- -value when u < flip, then
value <- value * (1 + jitter * z), u ~ U[0, 1) and z ~ N(0, 1) drawn for every span whatever the settings, seeded by
SHA-256 of (`seed`, response text); G is never touched. The option and its effect: docs/knobs.md
(`+reward.reward_kwargs.bot.scorers.<data_source>='builtin:NAME?flip=P&jitter=S&seed=N'`), docs/results.md.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class LocalNoise:
    """`flip`: probability in [0, 1] that a span's value changes sign; `jitter`: std of the multiplicative
    Gaussian factor (>= 0); `seed`: with the response text, seeds the draws."""

    flip: float = 0.0
    jitter: float = 0.0
    seed: int = 0

    def __post_init__(self):
        if not 0.0 <= self.flip <= 1.0:
            raise ValueError(f"local noise: flip must be in [0, 1], got {self.flip}")
        if not 0.0 <= self.jitter < math.inf:  # also refuses NaN
            raise ValueError(f"local noise: jitter must be finite and >= 0, got {self.jitter}")

    @property
    def active(self) -> bool:
        return self.flip > 0 or self.jitter > 0

    def draws(self, response: str, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(u, z): (n,) uniform and (n,) standard-normal draws for the n spans of `response`."""
        digest = hashlib.sha256(f"{self.seed}\0".encode() + response.encode("utf-8", "surrogatepass")).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        return rng.random(n), rng.standard_normal(n)

    def apply(self, verdict: Any, response: str) -> Any:
        """A copy of `verdict` with its local spans made noisy (anything that is not a verdict is returned as is)."""
        if not self.active or not isinstance(verdict, dict) or not isinstance(verdict.get("local"), list):
            return verdict
        spans = verdict["local"]
        u, z = self.draws(response, len(spans))
        flipped = u < self.flip
        noisy = []
        for span, flip, zi in zip(spans, flipped, z, strict=True):
            if not isinstance(span, dict) or not isinstance(span.get("value"), int | float):
                return verdict  # not a verdict we understand: validation downstream reports it
            value = float(span["value"]) * (-1.0 if flip else 1.0) * (1.0 + self.jitter * float(zi))
            noisy.append({**span, "value": value})
        info = dict(verdict.get("info") or {})
        flips = int(flipped.sum())
        info["local_noise"] = {"flip": self.flip, "jitter": self.jitter, "seed": self.seed, "flipped": flips}
        return {**verdict, "local": noisy, "info": info}
