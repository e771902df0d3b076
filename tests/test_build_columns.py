"""How the build holds its columns: filled in place as the batches come (``_Columns``) and reordered in
place (``_permute``), against the lists and copies they stand for."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stallscope.analyzer.load.build as build
from stallscope.analyzer.load.build import _Columns, _permute
from stallscope.analyzer.load.loader import load_file

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.sampled_from(["f8", "i8", "?", "i4"])), max_size=12),
    st.sampled_from([None, 0, 5, 60, 1000]),
)
def test_a_column_filled_in_place_is_the_concatenation_of_its_batches(
    batches: list[tuple[int, str]], capacity: int | None
) -> None:
    # GIVEN batches of one column (of lengths and types that vary), appended to a store of a capacity
    store = _Columns(capacity)
    rng = np.random.default_rng(len(batches))
    arrays = [(rng.random(n) * 100).astype(dtype) for n, dtype in batches]
    for values in arrays:
        store.append("c", values)
    # THEN the column is what np.concatenate makes of them: values and type (a type that changes, or more
    # values than the capacity, turn it into a list that is concatenated)
    if not arrays:
        assert store.order == []
        return
    got = store.pop("c")
    expected = np.concatenate(arrays)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    assert store.order == [] and not store.filled and not store.lists


def test_columns_within_the_capacity_are_filled_in_place_and_others_listed() -> None:
    store = _Columns(10)
    store.append("a", np.arange(4.0))
    store.append("b", np.arange(20))  # more than the capacity at once: a list from the start
    store.append("a", np.arange(6.0))
    assert list(store.filled) == ["a"] and list(store.lists) == ["b"] and store.order == ["a", "b"]
    store.append("a", np.arange(1.0))  # the eleventh value: now a list, the first ten kept
    assert not store.filled and len(store.lists["a"]) == 2
    np.testing.assert_array_equal(store.pop("a"), np.concatenate([np.arange(4.0), np.arange(6.0), [0.0]]))


def test_a_column_made_in_place_is_a_view_of_its_one_array() -> None:
    store = _Columns(1000)
    for start in range(0, 30, 10):
        store.append("ts", np.arange(start, start + 10, dtype=np.float64))
    column = store.pop("ts")
    assert column.base is not None and len(column.base) == 1000  # no copy of the batches was made
    np.testing.assert_array_equal(column, np.arange(30.0))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 50), st.data())
def test_permute_in_place_is_indexing_by_the_order(n: int, data: st.DataObject) -> None:
    # GIVEN columns of every kind the model has, one of them sharing another's memory, one read-only
    order = np.array(data.draw(st.permutations(list(range(n)))), dtype=np.intp)
    rng = np.random.default_rng(n)
    base = rng.random(n)
    cols = {
        "ts": base,
        "alias": base,  # the same array under two names: copied, never reordered twice
        "name": rng.integers(0, 9, n),
        "lane": rng.integers(0, 9, n).astype(np.int32),
        "instant": rng.random(n) < 0.5,
        "kind": rng.integers(0, 9, n).astype(np.int8),
        "frozen": rng.random(n),
    }
    cols["frozen"].flags.writeable = False
    expected = {name: column[order] for name, column in cols.items()}
    # WHEN reordered in place THEN every column is the one indexing makes, type included
    _permute(cols, order)
    for name, column in cols.items():
        assert column.dtype == expected[name].dtype, name
        np.testing.assert_array_equal(column, expected[name], err_msg=name)


@pytest.mark.parametrize("name", ["input_bound", "launch_bound", "item_in_loop"])
def test_a_model_built_in_place_is_the_model_built_from_lists(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a sample trace built with its columns filled in place (the loader gives a capacity), and
    # with none (every column a list of batches, concatenated)
    path = SAMPLES / f"{name}.pt.trace.json.gz"
    capacities: list[int | None] = []

    def recorded(capacity: int | None) -> _Columns:
        capacities.append(capacity)
        return _Columns(capacity)

    monkeypatch.setattr(build, "_Columns", recorded)
    in_place = load_file(path, use_cache=False)
    assert capacities and capacities[0] is not None and capacities[0] > in_place.event_count
    monkeypatch.setattr(build, "_Columns", lambda _capacity: _Columns(None))
    listed = load_file(path, use_cache=False)
    # THEN every column of the event table is the same
    for field in in_place.events.__dataclass_fields__:
        a, b = getattr(in_place.events, field), getattr(listed.events, field)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype, field
            np.testing.assert_array_equal(a, b, err_msg=field)
    assert in_place.lanes == listed.lanes and in_place.strings == listed.strings


@pytest.mark.skipif(build._NORESERVE is None, reason="columns are reserved only on Linux (x86, Arm)")
def test_a_process_holding_models_of_more_columns_than_memory_can_still_fork() -> None:
    # GIVEN models held at once whose columns' reservations add up to three times this machine's memory
    # (each column is reserved for the most events a trace may hold; only written pages exist)
    import os

    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    first = load_file(SAMPLES / "launch_bound.pt.trace.json.gz", use_cache=False)
    per_model = sum(
        len(c.base) * c.dtype.itemsize
        for c in vars(first.events).values()
        if isinstance(c, np.ndarray) and c.base is not None and len(c.base) > len(c)
    )
    assert per_model > 1e8  # reserved, far beyond the trace's own columns
    held = [first] + [
        load_file(SAMPLES / "launch_bound.pt.trace.json.gz", use_cache=False)
        for _ in range(int(3 * ram // per_model) + 1)
    ]
    # WHEN the process forks (as for a decode worker or the cache writer) THEN the kernel lets it: the
    # reservations are not memory it promised
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0 and len(held) > 1
