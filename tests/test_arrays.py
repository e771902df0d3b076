"""The shared array helpers against the numpy functions they stand for."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.arrays import distinct


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
