"""The column operations that answer many devices at once (``passes.grouped``) give each group what the
one-group operation gives on its rows alone: the same floats to the last bit, signs of zeros included."""

from __future__ import annotations

import numpy as np
import pytest

from stallscope.analyzer.core import intervals
from stallscope.analyzer.passes import grouped


def rows(rng: np.random.Generator, n: int, groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` intervals in ``groups`` groups (rows by group, unsorted within it), with ties, empty
    intervals, -0.0 and 0.0 among the values."""
    group = np.sort(rng.integers(0, groups, n))
    starts = rng.integers(-3, 20, n) * rng.choice([1.0, -1.0, 0.5], n)
    ends = starts + rng.integers(0, 6, n) * rng.choice([1.0, 0.0, 0.5], n)
    if n:
        ends[rng.integers(0, n)], starts[rng.integers(0, n)] = -0.0, 0.0
    shuffled = np.lexsort((rng.random(n), group))
    return group[shuffled], starts[shuffled], ends[shuffled]


@pytest.mark.parametrize("seed", range(5))
def test_union_of_each_group_is_its_own_union(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(300):
        groups = int(rng.integers(1, 6))
        group, starts, ends = rows(rng, int(rng.integers(0, 60)), groups)
        of, s, e = grouped.union(group, starts, ends)
        at = grouped.bounds(of, groups)
        for k in range(groups):
            mine = group == k
            want_s, want_e = intervals.union(starts[mine], ends[mine])
            assert s[at[k] : at[k + 1]].tobytes() == want_s.tobytes()
            assert e[at[k] : at[k + 1]].tobytes() == want_e.tobytes()


def test_a_running_maximum_keeps_what_maximum_keeps() -> None:
    # GIVEN ends that tie as 0.0 and -0.0 in one group, then a NaN, in another group
    group = np.array([0, 0, 0, 1, 1, 1])
    values = np.array([-0.0, 0.0, -0.0, 1.0, np.nan, 2.0])
    # THEN the running maximum of each is numpy's, bit for bit
    want = np.concatenate([np.maximum.accumulate(values[:3]), np.maximum.accumulate(values[3:])])
    assert grouped._running_max(group, values).tobytes() == want.tobytes()


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_in_each_group_is_its_own(side: str) -> None:
    rng = np.random.default_rng(11)
    for _ in range(500):
        groups, n, m = int(rng.integers(1, 6)), int(rng.integers(0, 50)), int(rng.integers(0, 30))
        group, values = rng.integers(0, groups, n), rng.integers(-5, 5, n) * rng.choice([1.0, -0.5], n)
        by = np.lexsort((values, group))
        group, values = group[by], values[by]
        at_group, at = rng.integers(0, groups, m), rng.integers(-6, 6, m) * rng.choice([1.0, -0.5], m)
        first = grouped.bounds(group, groups)
        found = grouped.searchsorted(group, values, at_group, at, side)
        for k, x, got in zip(at_group.tolist(), at.tolist(), found.tolist(), strict=True):
            mine = values[first[k] : first[k + 1]]
            assert got == first[k] + int(np.searchsorted(mine, x, side=side))
