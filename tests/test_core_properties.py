"""Property tests of the analyzer core on random builder traces (hypothesis): the critical path tiles the
window, gaps and busy time partition it, the unchanged replay reproduces the trace, cheaper costs never make
a replay slower, scenarios replayed in one pass are each their own replay, and every graph edge goes forward
in time."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import numpy as np
import pytest
from _replay_reference import reference_replay, same_bits
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from synth.trace import SynthTrace

from stallscope.analyzer.analysis import Analysis, analyze
from stallscope.analyzer.core import intervals
from stallscope.analyzer.evidence import Options
from stallscope.analyzer.graph.inputs import input_intervals, main_thread
from stallscope.analyzer.graph.invariants import check_graph
from stallscope.analyzer.load.loader import load
from stallscope.analyzer.passes.replay import (
    Costs,
    make_frame,
    recorded_end,
    replay,
    replay_ends,
    replay_many,
)
from stallscope.analyzer.passes.window import busy_intervals

SYNCS = ("none", "device", "stream", "item", "pageable", "event")


@dataclass(frozen=True)
class Step:
    load_us: float  # data loading before the step's work (0: none)
    prep_us: float  # host prep annotation
    kernels: tuple[float, ...]  # kernel durations on stream 7
    side_copy_us: float  # a copy on stream 20 that stream 7 waits for (0: none)
    sync: str


steps_strategy = st.lists(
    st.builds(
        Step,
        load_us=st.sampled_from([0.0, 0.0, 150.0, 800.0]),
        prep_us=st.floats(0.0, 600.0).map(round),
        kernels=st.lists(st.floats(1.0, 900.0).map(round), min_size=0, max_size=4).map(tuple),
        side_copy_us=st.sampled_from([0.0, 0.0, 120.0, 500.0]),
        sync=st.sampled_from(SYNCS),
    ),
    min_size=1,
    max_size=4,
)


def build(steps: list[Step], final_sync: bool) -> SynthTrace:
    """A loop of profiled steps: optional loading, host prep, a side-stream copy the compute stream waits on,
    kernels, and one of several syncs."""
    sc = SynthTrace("random")
    with sc.py_frame("train.py", 10, "main"):
        for i, s in enumerate(steps):
            with sc.step(), sc.py_frame("train.py", 30, "train_step"):
                if s.load_us:
                    sc.data_loading(s.load_us)
                if s.prep_us:
                    sc.host("prep", s.prep_us, cat="user_annotation")
                if s.side_copy_us:
                    with sc.op("aten::copy_"):
                        sc.memcpy("HtoD", 1 << 20, s.side_copy_us, pinned=True, stream=20)
                    sc.stream_wait_event(7, sc.event_record(20))
                for k in s.kernels or (5.0,):
                    with sc.op("aten::mm", self_us=10):
                        sc.launch("gemm_kernel", k)
                if s.sync == "device":
                    sc.synchronize()
                elif s.sync == "stream":
                    sc.stream_synchronize(7)
                elif s.sync == "item":
                    sc.item()
                elif s.sync == "pageable":
                    sc.to_device(1 << 20, 80.0, pinned=False, non_blocking=True)
                elif s.sync == "event":
                    sc.event_synchronize(sc.event_record(7))
                if final_sync and i == len(steps) - 1:
                    sc.synchronize()
    return sc


def analysed(sc: SynthTrace, min_gap_us: float = 0.0) -> Analysis:
    with TemporaryDirectory() as tmp:
        path = sc.write(Path(tmp) / "random.pt.trace.json.gz")
        return analyze(load(path), options=Options(min_gap_us=min_gap_us))


PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(steps=steps_strategy, final_sync=st.booleans())
def test_critical_path_tiles_the_window(steps: list[Step], final_sync: bool) -> None:
    # GIVEN a random builder trace
    a = analysed(build(steps, final_sync))
    cp = a.critical
    assert cp is not None
    # WHEN its critical path is walked
    # THEN its length is the window, and its segments tile it without overlap or hole
    assert cp.length_us == pytest.approx(a.window.dur_us, rel=1e-6)
    segs = cp.segments
    assert segs[0].start_us == pytest.approx(a.window.start_us, abs=1e-6)
    assert segs[-1].end_us == pytest.approx(a.window.end_us, abs=1e-6)
    for prev, nxt in itertools.pairwise(segs):
        assert nxt.start_us == pytest.approx(prev.end_us, abs=1e-6)
    assert all(s.end_us > s.start_us for s in segs)
    assert sum(cp.breakdown_us.values()) == pytest.approx(a.window.dur_us, rel=1e-6)


@PROPERTY
@given(steps=steps_strategy, final_sync=st.booleans())
def test_gaps_and_busy_partition_the_window(steps: list[Step], final_sync: bool) -> None:
    # GIVEN a random builder trace analysed with min_gap_us=0 (every idle interval is a gap)
    a = analysed(build(steps, final_sync), min_gap_us=0.0)
    assert a.main_device is not None
    bs, be = busy_intervals(a.model, a.main_device, a.window)
    gaps = sorted((g for g in a.gaps if g.device == a.main_device), key=lambda g: g.start_us)
    # THEN no gap overlaps busy time or another gap
    for g in gaps:
        assert g.end_us >= g.start_us
        assert float(intervals.covered_in(bs, be, np.array([g.start_us]), np.array([g.end_us]))[0]) < 1e-6
    for prev, nxt in itertools.pairwise(gaps):
        assert nxt.start_us >= prev.end_us - 1e-6
    # AND gaps + busy == window, and idle per cause adds up to the idle
    idle = sum(g.dur_us for g in gaps)
    assert idle + intervals.total(bs, be) == pytest.approx(a.window.dur_us, rel=1e-9)
    assert sum(a.idle_by_cause.values()) == pytest.approx(idle, rel=1e-9, abs=1e-6)
    assert a.summary.device_idle_us == pytest.approx(idle, rel=1e-9, abs=1e-6)
    # AND a sync never gets more idle charged than the host waited
    assert a.graph is not None
    waited = a.graph.waited()
    for c, bubble in a.bubble_us.items():
        assert 0.0 <= bubble <= waited[c] + 1e-6


@PROPERTY
@given(
    steps=steps_strategy,
    final_sync=st.booleans(),
    device_scale=st.floats(0.0, 1.0),
    host_scale=st.floats(0.0, 1.0),
    input_scale=st.sampled_from([0.0, 0.5, 1.0]),
    drop=st.booleans(),
)
def test_replay_is_exact_unchanged_and_monotone_in_costs(
    steps: list[Step],
    final_sync: bool,
    device_scale: float,
    host_scale: float,
    input_scale: float,
    drop: bool,
) -> None:
    # GIVEN a random builder trace, its graph and replay frame
    a = analysed(build(steps, final_sync))
    g = a.graph
    assert g is not None
    # THEN every graph edge goes forward in time
    assert check_graph(g) == []
    f = make_frame(g, a.window.start_us, a.window.end_us, main_thread(a.model, g), input_intervals(a.model))
    # WHEN replayed unchanged THEN every call and activity time and the makespan are reproduced
    base = replay(g, f, Costs())
    np.testing.assert_allclose(base.call_start, g.call_start, rtol=1e-12, atol=1e-6)
    np.testing.assert_allclose(base.call_end, g.call_end, rtol=1e-12, atol=1e-6)
    np.testing.assert_allclose(base.act_start, g.act_start, rtol=1e-12, atol=1e-6)
    np.testing.assert_allclose(base.act_end, g.act_end, rtol=1e-12, atol=1e-6)
    assert base.end_us - f.start_us == pytest.approx(recorded_end(g, f) - f.start_us, rel=1e-9)
    # AND making any cost smaller never makes the replay slower
    blocking = frozenset(np.flatnonzero(g.call_blocking != 0).tolist()) if drop else frozenset()
    for costs in (
        Costs(device_scale=device_scale),
        Costs(host_scale=host_scale),
        Costs(input_scale=input_scale),
        Costs(no_wait=blocking),
        Costs(device_scale=device_scale, host_scale=host_scale, input_scale=input_scale, no_wait=blocking),
    ):
        assert replay(g, f, costs).end_us <= base.end_us + 1e-6, costs


@PROPERTY
@given(
    steps=steps_strategy,
    final_sync=st.booleans(),
    scales=st.lists(st.tuples(*[st.floats(0.0, 2.0)] * 3, st.sampled_from([0.0, 1.0, 2.0])), max_size=3),
    data=st.data(),
)
def test_scenarios_replayed_in_one_pass_are_each_their_own_replay(
    steps: list[Step], final_sync: bool, scales: list[tuple[float, float, float, float]], data: st.DataObject
) -> None:
    # GIVEN a random builder trace and random scenarios: scales, and blocking calls that no longer wait
    a = analysed(build(steps, final_sync))
    g = a.graph
    assert g is not None
    f = make_frame(g, a.window.start_us, a.window.end_us, main_thread(a.model, g), input_intervals(a.model))
    waits = np.flatnonzero(g.call_blocking != 0).tolist()
    costs = [Costs()] + [
        Costs(d, h, i, launch, frozenset(data.draw(st.sets(st.sampled_from(waits))) if waits else ()))
        for d, h, launch, i in scales
    ]
    # WHEN replayed together THEN each scenario's times are those of its replay alone, step by step
    for r, end, c in zip(replay_many(g, f, costs), replay_ends(g, f, costs), costs, strict=True):
        want = reference_replay(g, f, c)
        got = [*r.call_start, *r.call_end, *r.act_start, *r.act_end, r.end_us, end]
        assert same_bits(
            got, [*want.call_start, *want.call_end, *want.act_start, *want.act_end, want.end_us, want.end_us]
        )


@settings(max_examples=200, deadline=None)
@given(
    spans=st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 3000)), max_size=60),
    lo=st.integers(-100, 2500),
    width=st.integers(1, 800),
)
def test_overlapping_events_found_without_a_scan_are_the_scans(
    spans: list[tuple[int, int]], lo: int, width: int
) -> None:
    from dataclasses import fields

    from stallscope.analyzer.core.model import EventTable

    spans = sorted(spans, key=lambda s: (s[0], -s[1]))  # the table's order: by start, longest first
    ts = np.array([s[0] for s in spans], dtype=np.float64)
    dur = np.array([s[1] / (10 if i % 3 else 1) for i, s in enumerate(spans)], dtype=np.float64)
    columns: dict[str, Any] = {f.name: np.zeros(len(ts), dtype=np.int64) for f in fields(EventTable)}
    columns.update(ts=ts, dur=dur)

    class Few(EventTable):
        _long_kept = 4  # fewer longest events kept apart than the table has: both searches are used

    table = Few(**columns)
    hi = lo + width
    expected = np.flatnonzero((ts < hi) & (ts + dur > lo))
    assert np.array_equal(table.overlapping(lo, hi), expected)
