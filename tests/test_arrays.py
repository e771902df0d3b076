"""The shared array helpers against the numpy functions they stand for."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stallscope.analyzer.core.arrays import distinct, time_order, window_max


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=60),
    st.sampled_from(["i8", "i4", "u1", "?"]),
)
def test_distinct_is_np_unique_for_integer_and_boolean_columns(values: list[int], dtype: str) -> None:
    column = np.array(values, dtype=np.int64).astype(dtype)
    got = distinct(column)
    assert got.dtype == column.dtype
    np.testing.assert_array_equal(got, np.unique(column))


@pytest.mark.parametrize(
    "column",
    [
        np.array([2.0, np.nan, 1.0, np.nan, 2.0]),  # NaNs: np.unique keeps one
        np.array(["b", "a", "b"]),
        np.zeros((2, 3), dtype=np.int64),  # flattened, as np.unique does
    ],
)
def test_distinct_of_other_columns_is_np_unique(column: np.ndarray) -> None:
    np.testing.assert_array_equal(distinct(column), np.unique(column))


def test_distinct_of_many_ids_keeps_each_once_in_order() -> None:
    # GIVEN 200k shuffled ids, each twice (the shape of flow ids, which numpy's hash table is slow on)
    ids = np.repeat(np.arange(200_000, dtype=np.int64) * 3 + 10**9, 2)
    np.random.default_rng(0).shuffle(ids)
    # THEN each comes out once, sorted
    np.testing.assert_array_equal(distinct(ids), np.arange(200_000, dtype=np.int64) * 3 + 10**9)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=0, max_value=3000), st.integers(min_value=1, max_value=5000), st.integers(0, 2**32)
)
def test_distinct_of_a_narrow_range_is_np_unique(length: int, width: int, seed: int) -> None:
    # GIVEN a column of `length` values spread over `width` consecutive integers somewhere in int64
    rng = np.random.default_rng(seed)
    low = int(rng.integers(-(2**62), 2**62))
    column = low + rng.integers(0, width, size=length)
    # THEN its distinct values are np.unique's, as the table over the range or by sorting
    got = distinct(column)
    assert got.dtype == column.dtype
    np.testing.assert_array_equal(got, np.unique(column))
    for other in (
        rng.integers(0, min(width, 255), size=length).astype(np.uint8),
        (np.uint64(2**64 - 1) - rng.integers(0, width, size=length).astype(np.uint64)),
    ):
        got = distinct(other)
        assert got.dtype == other.dtype
        np.testing.assert_array_equal(got, np.unique(other))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.0, 1.0, 1.5, 2.0, 1e15, -3.0]), st.sampled_from([0.0, -0.0, 1.0, 2.5, 9.0])
        ),
        max_size=80,
    ),
    st.booleans(),
)
def test_time_order_is_lexsort_of_start_then_longest_first(
    events: list[tuple[float, float]], shuffle: bool
) -> None:
    # GIVEN events with many equal starts and durations (ties of both, and -0.0 against 0.0), in runs or not
    ts = np.array([e[0] for e in events], dtype=np.float64)
    dur = np.array([e[1] for e in events], dtype=np.float64)
    if not shuffle:
        ts = np.sort(ts)
    # THEN the order is lexsort's, ties of both kept as given
    np.testing.assert_array_equal(time_order(ts, dur), np.lexsort((-dur, ts)))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([-1.0, 0.0, 2.5, 7.0, np.inf, -np.inf, np.nan]), min_size=1, max_size=40),
    st.integers(min_value=0, max_value=45),
    st.data(),
)
def test_window_max_is_the_max_of_each_window(values: list[float], width: int, data: st.DataObject) -> None:
    column = np.array(values)
    starts = range(len(column) - width + 1) if width else range(len(column) + 1)
    at = np.array(
        data.draw(st.lists(st.sampled_from(list(starts)), max_size=10)) if len(starts) else [], dtype=np.int64
    )
    got = window_max(column, width, at)
    expected = [column[a : a + width].max() if width else -np.inf for a in at.tolist()]
    np.testing.assert_array_equal(got, np.array(expected, dtype=np.float64))
