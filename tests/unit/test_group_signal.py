"""`group_signal`: which groups an estimator can learn from, on hand-written token rewards of each layout."""

from __future__ import annotations

import numpy as np
import pytest

from verl_bot.advantage.groups import group_signal

A = np.array


@pytest.mark.parametrize(("layout", "rewards", "expected"), [
    ("dense", [A([1.0, 1.0]), A([1.0, 1.0, 1.0])], (False, 1.0)),  # one G, no S: a flat bag, whatever the lengths
    ("dense", [A([1.0, 0.5]), A([1.0, 1.0])], (True, 1.0)),  # S separates the tokens
    ("dense", [A([2.0])], (False, 2.0)),  # one rollout: no group
    ("dense", [], (False, 0.0)),
    ("scalar", [A([0.0, 1.0]), A([0.0, 0.0, 1.0])], (False, 1.0)),  # G on the last token, equal
    ("scalar", [A([0.0, 1.0]), A([0.0, 0.0])], (True, 1.0)),
    ("returns", [A([0.0, 1.0]), A([0.0, 0.0, 1.0])], (False, 1.0)),  # G alone, equal
    ("returns", [A([-0.5, 1.5]), A([0.0, 0.0, 1.0])], (True, 1.0)),  # equal sums, but S before the last token
    ("returns", [A([0.0, 2.0]), A([1.0])], (True, 2.0)),
])
def test_which_groups_carry_a_signal(layout, rewards, expected):
    assert group_signal(rewards, layout) == expected
