"""Unbiased pass@k against hand-computed values."""

from __future__ import annotations

import itertools
from math import comb

import pytest

from verl_bot.eval.passk import mean_pass_at_k, pass_at_k, pass_at_k_from_results


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (4, 1, 1, 1 / 4),  # pass@1 = c/n
        (10, 3, 1, 3 / 10),
        (4, 1, 2, 1 - 3 / 6),  # 1 - C(3,2)/C(4,2) = 1/2
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2) = 7/10
        (8, 2, 4, 1 - 15 / 70),  # 1 - C(6,4)/C(8,4) = 11/14
        (8, 0, 4, 0.0),
        (8, 8, 1, 1.0),
        (8, 5, 4, 1.0),  # n - c = 3 < k: every 4-subset holds a correct one
        (3, 1, 3, 1.0),
    ],
)
def test_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)
    assert pass_at_k(n, c, k, exact=True) == pytest.approx(expected, abs=1e-15)


def test_matches_subset_enumeration():
    # brute force: fraction of k-subsets of the n samples that contain a correct one
    for n in range(1, 7):
        for c in range(n + 1):
            samples = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(samples, k))
                brute = sum(any(s) for s in subsets) / comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)


def test_large_n_stable():
    # C(200, 100) overflows floats; the product form stays finite and matches the exact value
    assert pass_at_k(200, 3, 100) == pytest.approx(pass_at_k(200, 3, 100, exact=True), rel=1e-12)
    assert 0.0 < pass_at_k(1000, 1, 1) == pytest.approx(0.001)


def test_mean_and_table():
    results = [[True, False, False, False], [False] * 4, [True] * 4]
    table = pass_at_k_from_results(results, ks=(1, 2, 4, 8))
    assert table["pass@1"] == pytest.approx((0.25 + 0 + 1) / 3)
    assert table["pass@2"] == pytest.approx((0.5 + 0 + 1) / 3)
    assert table["pass@4"] == pytest.approx((1 + 0 + 1) / 3)
    assert "pass@8" not in table
    assert mean_pass_at_k([(4, 1), (2, 2)], 2) == pytest.approx((0.5 + 1.0) / 2)


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (4, 5, 1), (4, -1, 1), (4, 1, 0), (4, 1, 5)])
def test_bad_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)
    with pytest.raises(ValueError):
        mean_pass_at_k([], 1)
