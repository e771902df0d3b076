"""Golden tests of the analyzer core (graph, critical path, gaps, what-if replay, pipeline model) against the
synthetic trace builder's simulated ground truth (``tests/synth/library.py``, ``sample_traces/expected.json``), and
sanity checks on the real traces in ``../shared/traces`` (skipped when absent)."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from synth import library as sc

from stallscope.analyzer.analysis import Analysis, analyze, analyze_model
from stallscope.analyzer.core.model import TraceModel
from stallscope.analyzer.evidence import Options
from stallscope.analyzer.graph.dependency import Blocking, Graph, build_graph
from stallscope.analyzer.graph.inputs import input_intervals, main_thread
from stallscope.analyzer.graph.invariants import check_graph
from stallscope.analyzer.load.loader import load
from stallscope.analyzer.passes.critical import Kind
from stallscope.analyzer.passes.gaps import Cause
from stallscope.analyzer.passes.replay import Costs, Scenario, make_frame, recorded_end, replay

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
EXPECTED: dict[str, Any] = json.loads((SAMPLES / "expected.json").read_text())
MS = 1000.0


def analysed(s: sc.SynthTrace, tmp_path: Path, options: Options | None = None) -> Analysis:
    """Write the builder's trace, load it back and analyse it."""
    return analyze(load(s.write(tmp_path / f"{s.name}.pt.trace.json.gz")), options=options)


@cache
def sample(name: str) -> Analysis:
    return analyze(load(SAMPLES / name))


def whatif(a: Analysis) -> dict[str, float]:
    assert a.whatif is not None
    return {r.scenario.value: r.predicted_wall_us for r in a.whatif.results}


def within(value: float, expected: float, rel: float = 0.01) -> bool:
    return abs(value - expected) <= rel * abs(expected)


# ----- the worked example (DESIGN.md §4) -------------------------------------------------------------

WORKED = {
    # (prep ms, pipelined): window ms, host ms on the path, device ms on the path, device_2x, host_2x
    "serial": ((2.0, False), 24.0, 6.0, 18.0, 15.0, 21.0),
    "pipelined": ((2.0, True), 20.0, 2.0, 18.0, 11.0, 19.0),
    "hostbound": ((8.0, True), 30.0, 24.0, 6.0, 27.0, 22.0),
}


@pytest.mark.parametrize("case", WORKED)
def test_worked_example_critical_path_and_what_if(case: str, tmp_path: Path) -> None:
    # GIVEN the worked example: P ms of host prep, G=6 ms of kernels, 3 batches
    (prep, pipelined), window_ms, host_ms, device_ms, device_2x_ms, host_2x_ms = WORKED[case]
    # WHEN it is built, written, loaded and analysed
    a = analysed(sc.worked_example(prep, 6.0, 3, pipelined=pipelined), tmp_path)
    cp = a.critical
    assert cp is not None
    # THEN the critical path spans the window, which is the modelled wall time within 1%
    assert cp.length_us == pytest.approx(a.window.dur_us, rel=1e-9)
    assert within(a.window.dur_us, window_ms * MS)
    # AND the path splits into host and device time as modelled (6+18, 2+18, 24+6 ms)
    assert within(cp.breakdown_us[Kind.HOST], host_ms * MS)
    assert within(cp.breakdown_us[Kind.DEVICE], device_ms * MS)
    assert cp.bottleneck == (Kind.HOST if prep > 6.0 else Kind.DEVICE)
    # AND the what-if replays predict halved device / host costs within 1%
    w = whatif(a)
    assert within(w["device_2x"], device_2x_ms * MS)
    assert within(w["host_2x"], host_2x_ms * MS)
    assert w["input_overlapped"] == pytest.approx(a.window.dur_us, rel=1e-9)  # no data loading
    assert a.whatif is not None and a.whatif.replay_error < 1e-9


def test_worked_example_serial_without_syncs_is_the_pipelined_time(tmp_path: Path) -> None:
    # GIVEN the serial worked example (a torch.cuda.synchronize() after every batch)
    a = analysed(sc.worked_example(2.0, 6.0, 3, pipelined=False), tmp_path)
    # WHEN the host no longer waits
    w = whatif(a)
    # THEN it runs as the pipelined loop would: P + G + (n-1) G = 20 ms
    assert within(w["no_syncs"], 20.0 * MS)
    # AND the interim avoidable policy (device-wide syncs inside steps) drops the same syncs
    assert within(w["no_avoidable_syncs"], 20.0 * MS)


@pytest.mark.parametrize(
    ("prep", "pipelined", "serial_ms", "pipelined_ms", "bottleneck"),
    [(2.0, False, 24.0, 20.0, "device"), (2.0, True, 24.0, 20.0, "device"), (8.0, True, 42.0, 30.0, "host")],
)
def test_worked_example_pipeline_model(
    prep: float, pipelined: bool, serial_ms: float, pipelined_ms: float, bottleneck: str, tmp_path: Path
) -> None:
    # GIVEN the worked example with P ms of prep and G=6 ms of device work per batch
    # WHEN the two-stage pipeline model is read from the trace
    p = analysed(sc.worked_example(prep, 6.0, 3, pipelined=pipelined), tmp_path).pipeline
    # THEN P, G and n are recovered, and serial / pipelined times follow the model within 1%
    assert p is not None
    assert within(p.host_prep_us, prep * MS)
    assert within(p.device_us, 6.0 * MS)
    assert p.batches == 3
    assert within(p.serial_us, serial_ms * MS)
    assert within(p.pipelined_us, pipelined_ms * MS)
    assert p.bottleneck == bottleneck


def test_gaps_after_blocking_syncs_are_charged_to_the_sync(tmp_path: Path) -> None:
    # GIVEN the serial worked example: each synchronize blocks the host while the device runs 6 ms
    a = analysed(sc.worked_example(2.0, 6.0, 3, pipelined=False), tmp_path)
    g = a.graph
    assert g is not None
    # WHEN gaps are judged
    sync_gaps = [gap for gap in a.gaps if gap.cause == Cause.SYNC]
    # THEN the device idles during the next batch's prep (2 ms) after each of the first two syncs
    assert len(sync_gaps) == 2
    for gap in sync_gaps:
        assert within(gap.dur_us, 2.0 * MS)
        # the charged call is a device-wide synchronize that blocked and returned right at the gap's start
        c = gap.blocking_call
        assert g.call_blocking[c] == Blocking.DEVICE
        assert g.waited()[c] > 5.0 * MS
        assert gap.start_us <= g.call_end[c] <= gap.end_us
        assert gap.charged_us == pytest.approx(gap.dur_us)
        # AND the sync's bubble is the idle charged to it
        assert a.bubble_us[c] == pytest.approx(gap.charged_us)
    assert sum(a.bubble_us.values()) == pytest.approx(a.idle_by_cause[Cause.SYNC])
    # AND the first gap (before any sync) is the host preparing the first batch
    assert a.gaps[0].cause == Cause.HOST and a.gaps[0].start_us == a.window.start_us


def test_slow_host_prep_reads_as_host(tmp_path: Path) -> None:
    # GIVEN the host-bound worked example (P=8 ms > G=6 ms, no sync in the loop)
    a = analysed(sc.worked_example(8.0, 6.0, 3, pipelined=True), tmp_path)
    # WHEN gaps are judged THEN all idle is the host falling behind: 8 ms, then 2 ms per later batch
    assert {gap.cause for gap in a.gaps} == {Cause.HOST}
    assert [round(gap.dur_us / MS) for gap in a.gaps] == [8, 2, 2]
    assert a.idle_by_cause[Cause.HOST] == pytest.approx(sum(gap.dur_us for gap in a.gaps))
    # (the rest of the device idle is shorter than min_gap_us: 2 µs at the final synchronize)
    assert 0.0 <= a.summary.device_idle_us - a.idle_by_cause[Cause.HOST] < 20.0
    assert a.bubble_us == {}


def test_input_bound_reads_as_input(tmp_path: Path) -> None:
    # GIVEN 3 ms of data loading per step for 1 ms of device work
    a = analysed(sc.input_bound_loop(), tmp_path)
    assert a.critical is not None
    # WHEN analysed THEN the device idle is charged to input, and input dominates the critical path
    assert {gap.cause for gap in a.gaps} == {Cause.INPUT}
    assert a.critical.bottleneck == Kind.INPUT
    assert within(a.critical.breakdown_us[Kind.INPUT], 12.0 * MS)
    # AND moving loading off the main thread leaves about the device work (expected.json's value)
    exp = {r["scenario"]: r["predicted_wall_us"] for r in EXPECTED["input_bound.pt.trace.json.gz"]["whatif"]}
    assert within(whatif(a)["input_overlapped"], exp["input_overlapped"])
    assert whatif(a)["input_overlapped"] < 0.35 * a.window.dur_us


def test_launch_bound_loop_is_host_bound_with_low_utilization(tmp_path: Path) -> None:
    # GIVEN 160 3 µs kernels behind ~32 µs of host time each
    a = analysed(sc.launch_bound_loop(), tmp_path)
    # WHEN analysed THEN the host is the bottleneck and the device is mostly idle
    assert a.critical is not None and a.critical.bottleneck == Kind.HOST
    assert a.summary.device_utilization < 0.15
    assert a.summary.bottleneck == "host"
    assert len(a.gaps) == 160 and {gap.cause for gap in a.gaps} == {Cause.HOST}
    assert a.pipeline is not None and a.pipeline.bottleneck == "host"
    # AND halving host costs halves the wall time, halving device costs changes next to nothing
    w = whatif(a)
    assert within(w["host_2x"], a.window.dur_us / 2, rel=0.02)
    assert within(w["device_2x"], a.window.dur_us)


# ----- every sample against expected.json ------------------------------------------------------------

SAMPLE_NAMES = sorted(EXPECTED)


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_sample_critical_path_matches_expected(name: str) -> None:
    # GIVEN a committed sample trace and its simulated answers
    exp = EXPECTED[name]
    # WHEN analysed
    a = sample(name)
    cp = a.critical
    assert cp is not None
    # THEN the window, path length and breakdown match (1%, or 2 µs of rounding for tiny entries)
    assert a.window.dur_us == pytest.approx(exp["window"]["dur_us"], rel=1e-9)
    assert cp.length_us == pytest.approx(a.window.dur_us, rel=1e-9)
    for kind, us in exp["critical_path"]["breakdown_us"].items():
        assert cp.breakdown_us[Kind(kind)] == pytest.approx(us, rel=0.01, abs=2.0), kind
    assert cp.bottleneck.value == exp["critical_path"]["bottleneck"]
    assert a.summary.device_busy_us == pytest.approx(exp["device"]["busy_us"], rel=0.01)


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_sample_gaps_match_expected(name: str) -> None:
    # GIVEN a sample trace and its simulated gaps (>= 20 µs) with their causes
    exp = EXPECTED[name]
    a = sample(name)
    main = [gap for gap in a.gaps if gap.device == a.main_device]
    # WHEN compared gap by gap THEN the same intervals (within 1 µs) carry the same causes
    want = [(g["start_us"], g["end_us"], g["cause"]) for g in exp["gaps"]]
    got = [(gap.start_us, gap.end_us, gap.cause.value) for gap in main]
    assert len(got) == len(want)
    for (s, e, cause), (ws, we, wcause) in zip(got, want, strict=True):
        assert (s, e) == pytest.approx((ws, we), abs=1.0)
        assert cause == wcause
    # AND idle per cause adds up the same
    by_cause: dict[str, float] = {}
    for g in exp["gaps"]:
        by_cause[g["cause"]] = by_cause.get(g["cause"], 0.0) + g["dur_us"]
    for cause in Cause:
        assert a.idle_by_cause[cause] == pytest.approx(by_cause.get(cause.value, 0.0), rel=0.01, abs=1.0)
    # AND every sync's bubble is the idle charged to it (non-zero bubbles, in order)
    bubbles = [a.bubble_us[c] for c in sorted(a.bubble_us)]
    assert bubbles == pytest.approx([s["bubble_us"] for s in exp["syncs"] if s["bubble_us"] > 0], abs=1.0)


#: Samples whose avoidable syncs are .item() calls and pageable copies (not device-wide synchronizes).
AVOIDABLE_NOT_BLANKET = {"item_in_loop.pt.trace.json.gz", "pageable_copy_loop.pt.trace.json.gz"}


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_sample_what_if_matches_expected(name: str) -> None:
    # GIVEN a sample trace and its simulated what-if wall times
    a = sample(name)
    assert a.whatif is not None
    # WHEN replayed THEN the unchanged replay is the recorded makespan
    assert a.whatif.replayed_wall_us == pytest.approx(a.whatif.recorded_wall_us, rel=1e-9)
    assert a.whatif.recorded_wall_us == pytest.approx(EXPECTED[name]["wall_us"], rel=1e-9)
    # AND each scenario predicts the simulated wall time within 1%
    got = whatif(a)
    wrong = []
    for r in EXPECTED[name]["whatif"]:
        scenario, want = r["scenario"], r["predicted_wall_us"]
        if not within(got[scenario], want):
            wrong.append(f"{scenario}: {got[scenario]} vs {want}")
    assert wrong == []


def test_stream_wait_held_kernel_is_not_launch_latency() -> None:
    # GIVEN compute on stream 7 waiting (cudaStreamWaitEvent) for a prefetch copy on stream 20
    a = sample("multistream_overlap.pt.trace.json.gz")
    exp = {
        r["scenario"]: r["predicted_wall_us"]
        for r in EXPECTED["multistream_overlap.pt.trace.json.gz"]["whatif"]
    }
    # WHEN the device runs twice as fast
    # THEN the first kernel starts when the (faster) copy ends: 2008 µs (the analyzer gives 2208)
    assert within(whatif(a)["device_2x"], exp["device_2x"])


def test_no_avoidable_syncs_policy_hook() -> None:
    # GIVEN item_in_loop / pageable_copy_loop, where the simulation marks .item() and the pageable copies
    # avoidable, and a policy given through Options saying the same: every blocking call in the window
    # except device-wide ones
    def not_device_wide(model: TraceModel, g: Graph, start: float, end: float) -> frozenset[int]:
        blocking = np.flatnonzero((g.call_blocking != Blocking.NO) & (g.call_blocking != Blocking.DEVICE))
        return frozenset(c for c in blocking.tolist() if start <= g.call_start[c] < end)

    for name in sorted(AVOIDABLE_NOT_BLANKET):
        # WHEN analysed with that policy, and with the default one (the sync classification)
        custom = analyze(load(SAMPLES / name), options=Options(avoidable=not_device_wide))
        want = {r["scenario"]: r["predicted_wall_us"] for r in EXPECTED[name]["whatif"]}
        # THEN both predict the simulated no_avoidable_syncs wall time within 1%
        assert within(whatif(custom)["no_avoidable_syncs"], want["no_avoidable_syncs"]), name
        assert within(whatif(sample(name))["no_avoidable_syncs"], want["no_avoidable_syncs"]), name


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_sample_pipeline_matches_expected(name: str) -> None:
    # GIVEN a sample trace and its simulated pipeline figures
    want = EXPECTED[name]["pipeline"]
    # WHEN the pipeline model is read from the trace
    p = sample(name).pipeline
    assert p is not None
    got = {
        "host_prep_us": p.host_prep_us,
        "device_us": p.device_us,
        "serial_us": p.serial_us,
        "pipelined_us": p.pipelined_us,
    }
    # THEN n is the step count and P, G, serial and pipelined times agree within 1%
    assert p.batches == want["batches"]
    wrong = {k: (v, want[k]) for k, v in got.items() if not within(v, want[k])}
    assert wrong == {}
    assert p.bottleneck == want["bottleneck"]


# ----- the graph and the replay on the samples -------------------------------------------------------


def frame_of(a: Analysis) -> Any:
    assert a.graph is not None
    return make_frame(
        a.graph, a.window.start_us, a.window.end_us, main_thread(a.model, a.graph), input_intervals(a.model)
    )


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_sample_graph_is_sound_and_replays_exactly(name: str) -> None:
    # GIVEN a sample's dependency graph
    a = sample(name)
    g = a.graph
    assert g is not None
    # WHEN checked and replayed unchanged
    f = frame_of(a)
    r = replay(g, f, Costs())
    # THEN every edge goes forward in time, and the replay reproduces every recorded time
    assert check_graph(g) == []
    np.testing.assert_allclose(r.call_start, g.call_start, rtol=0, atol=1e-6)
    np.testing.assert_allclose(r.call_end, g.call_end, rtol=0, atol=1e-6)
    np.testing.assert_allclose(r.act_start, g.act_start, rtol=0, atol=1e-6)
    np.testing.assert_allclose(r.act_end, g.act_end, rtol=0, atol=1e-6)
    assert r.end_us == pytest.approx(recorded_end(g, f), rel=1e-12)


def test_check_graph_reports_an_edge_going_back_in_time() -> None:
    # GIVEN a sound graph from a sample
    a = sample("worked_example_serial.pt.trace.json.gz")
    g = a.graph
    assert g is not None and check_graph(g) == []
    # WHEN a kernel is moved before its launch call and a call before its predecessor's end
    act_start = g.act_start.copy()
    act_start[0] = g.call_start[g.act_call[0]] - 50.0
    call_gap = g.call_gap.copy()
    call_gap[1] = -10.0
    broken = replace(g, act_start=act_start, call_gap=call_gap)
    # THEN the check names both
    problems = check_graph(broken)
    assert any(p.startswith("launch order: activity 0") for p in problems)
    assert any(p.startswith("host order: call 1") for p in problems)


def test_unchanged_replay_on_a_rebuilt_graph_matches_the_analysis(tmp_path: Path) -> None:
    # GIVEN the graph rebuilt from the model (build_graph is pure)
    a = analysed(sc.item_in_loop(), tmp_path)
    g = build_graph(a.model)
    assert a.graph is not None
    # THEN it equals the analysis' graph, and its replay without syncs matches the what-if
    np.testing.assert_array_equal(g.act_start, a.graph.act_start)
    np.testing.assert_array_equal(g.call_blocking, a.graph.call_blocking)
    f = frame_of(a)
    blocking = frozenset(np.flatnonzero(g.call_blocking != Blocking.NO).tolist())
    assert replay(g, f, Costs(no_wait=blocking)).end_us - f.start_us == pytest.approx(whatif(a)["no_syncs"])
    assert Scenario.NO_SYNCS.value in whatif(a)


# ----- real traces -----------------------------------------------------------------------------------


def real_trace_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.json.gz")) + sorted(folder.rglob("*.json"))


#: (A copy returning up to 5 µs before its copy ends is host/device clock skew, ``graph.CLOCK_SKEW_US``:
#: the alexnet, DLRM and MI300 owlv2 traces, once listed here, now pass the check.)
#: CUPTI range-profiler mode: the ranges are spread evenly over the profiling span, not timed against the
#: host clock, so a sync can return before the range it waited for "ends" (the loader says so in a note)
RANGES_NOT_HOST_TIMED = ("hta_a100_cupti_range_profiler",)


@pytest.mark.shared
def test_real_traces_replay_critical_path_and_graph(shared_traces: Path) -> None:
    # GIVEN every real trace (each DLRM rank file on its own)
    files = real_trace_files(shared_traces)
    assert files
    known: list[str] = []
    for path in files:
        for model in load(path).models:
            # WHEN analysed
            a = analyze_model(model)
            assert a.critical is not None and a.whatif is not None and a.graph is not None
            # THEN the unchanged replay reproduces the makespan within 1%
            assert a.whatif.replay_error < 0.01, path.name
            # AND the critical path spans the window, its segments tiling it
            assert a.critical.length_us == pytest.approx(a.window.dur_us, rel=1e-6), path.name
            segs = a.critical.segments
            assert segs[0].start_us == pytest.approx(a.window.start_us)
            assert segs[-1].end_us == pytest.approx(a.window.end_us)
            cp = a.critical  # in time order, each segment starting where the one before it ended
            assert np.allclose(cp.start_us[1:], cp.end_us[:-1], rtol=0, atol=1e-3), path.name
            # AND every graph edge goes forward in time
            problems = check_graph(a.graph)
            if problems and path.name.startswith(RANGES_NOT_HOST_TIMED):
                assert all(p.startswith("sync edge") for p in problems), (path.name, problems[:5])
                known.append(path.name)
                continue
            assert problems == [], (path.name, problems[:5])
    if known:
        pytest.xfail(f"range-profiler traces whose ranges are not host-timed: {len(known)}")


def _pipeline_device_us_by_masks(a: Analysis) -> float:
    """G as the pipeline model first computed it: one mask over every activity per step."""
    from stallscope.analyzer.core import intervals

    g, issued = a.graph, a.graph.issued()
    compute = []
    for step in a.model.steps:
        inside = (g.act_device == a.main_device) & (issued >= step.start_us) & (issued < step.end_us)
        compute.append(intervals.total(*intervals.union(g.act_start[inside], g.act_end[inside])))
    return float(np.median(compute))


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_pipeline_device_time_per_step_is_the_one_masks_give(name: str) -> None:
    # GIVEN a sample trace of several steps
    a = sample(name)
    assert a.pipeline is not None and len(a.model.steps) > 1
    # THEN G, found from the activities sorted by issue time, is exactly the one per-step masks give
    assert a.pipeline.device_us == _pipeline_device_us_by_masks(a)
