"""Unbiased pass@k from n samples per problem (Chen et al. 2021, "Evaluating Large Language Models Trained on Code").

For one problem with n samples of which c are correct:

    pass@k = 1 - C(n - c, k) / C(n, k)        (k <= n)

the probability that a random size-k subset of the n samples holds at least one correct one. It is computed as
the numerically stable product ``1 - prod_{i = n-c+1}^{n} (1 - k / i)``; exact integer arithmetic is available
with ``exact=True``. The benchmark value is the mean over problems.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction
from math import comb


def pass_at_k(n: int, c: int, k: int, exact: bool = False) -> float:
    """Unbiased pass@k of one problem: ``n`` samples, ``c`` correct, ``1 <= k <= n``. Returns a float in [0, 1].

    Raises ValueError for ``n < 1``, ``c`` outside ``[0, n]`` or ``k`` outside ``[1, n]``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not 0 <= c <= n:
        raise ValueError(f"c must be in [0, n={n}], got {c}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n={n}], got {k}")
    if n - c < k:
        return 1.0
    if exact:
        return float(1 - Fraction(comb(n - c, k), comb(n, k)))
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def mean_pass_at_k(samples: Iterable[tuple[int, int]], k: int) -> float:
    """Mean pass@k over problems given as ``(n, c)`` pairs (problems may have different n, each n >= k)."""
    vals = [pass_at_k(n, c, k) for n, c in samples]
    if not vals:
        raise ValueError("no problems")
    return sum(vals) / len(vals)


def pass_at_k_from_results(results: Sequence[Sequence[bool]], ks: Sequence[int] = (1, 2, 4)) -> dict[str, float]:
    """``{"pass@1": ..., ...}`` from per-problem lists of correctness flags (one list per problem, its samples).

    A k larger than a problem's sample count is skipped for the whole table (reported only when every problem has
    at least k samples).
    """
    pairs = [(len(r), sum(bool(x) for x in r)) for r in results]
    out: dict[str, float] = {}
    for k in ks:
        if pairs and all(n >= k for n, _ in pairs):
            out[f"pass@{k}"] = mean_pass_at_k(pairs, k)
    return out
