"""The model classes behind verdicts on real traces, each on a tiny hand-built trace: waits between host
threads, launch delays past a plausible latency, waits across streams without records, gap causes by
share, data loading in any category, the bottleneck by sensitivity and the self-consistency check."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from _kineto import Event, WriteTrace, document, flow, kernel, span

from stallscope.analyzer.analysis import Analysis, analyze
from stallscope.analyzer.core.model import LaneKind
from stallscope.analyzer.graph.inputs import input_intervals
from stallscope.analyzer.load.loader import load
from stallscope.analyzer.passes.critical import CriticalPath, Kind
from stallscope.analyzer.passes.gaps import Cause
from stallscope.analyzer.passes.replay import Scenario
from stallscope.analyzer.passes.verdict import decide
from stallscope.analyzer.selfcheck import check

MAIN, AUTOGRAD = 100, 200


def launch(ts: float, corr: int, k_ts: float, k_dur: float, *, tid: int = MAIN, stream: int = 7,
           name: str = "cudaLaunchKernel", kname: str = "k", dur: float = 6.0) -> list[Event]:  # fmt: skip
    """An op holding a launch call on thread ``tid`` and the kernel it launched."""
    return [
        span("cpu_op", "aten::mul", ts, dur + 4, tid=tid, External_id=corr),
        span("cuda_runtime", name, ts + 2, dur, tid=tid, correlation=corr, External_id=corr),
        kernel(kname, k_ts, k_dur, corr, stream=stream),
        flow("s", corr, ts + 2, tid=tid),
        flow("f", corr, k_ts, pid=0, tid=stream),
    ]


def analysed(write_trace: WriteTrace, events: list[Event], **top: Any) -> Analysis:
    return analyze(load(write_trace(document(events, **top))))


def on_lane(a: Analysis, kind: Kind, tid: int) -> float:
    cp = a.critical
    assert cp is not None
    lanes = [lane.id for lane in a.model.lanes if lane.tid == str(tid)]
    mask = (cp.kind == list(Kind).index(kind)) & np.isin(cp.lane, lanes)
    return float(np.sum(cp.end_us[mask] - cp.start_us[mask]))


# ----- waits between host threads ----------------------------------------------------------------------


def autograd_step(corr0: int = 1) -> list[Event]:
    """A 10 ms step: the main thread launches the forward (0-1 ms), then waits in backward() while the
    autograd thread launches 80 kernels (1-9 ms), then launches the optimizer step (9.2-10 ms)."""
    ev = [span("user_annotation", "ProfilerStep#1", 0, 10_000, External_id=0)]
    corr = corr0
    for i in range(8):  # forward on the main thread
        ev += launch(i * 120.0, corr, i * 120.0 + 10, 30)
        corr += 1
    ev.append(span("cpu_op", "aten::ones_like", 990, 8, External_id=999))
    for i in range(80):  # backward on the autograd thread: ~100 µs of host work per launch
        t = 1_050.0 + i * 100
        ev += launch(t, corr, t + 10, 20, tid=AUTOGRAD)
        corr += 1
    for i in range(6):  # optimizer on the main thread after the autograd thread finished (~9,050)
        t = 9_200.0 + i * 120
        ev += launch(t, corr, t + 10, 30)
        corr += 1
    return ev


def test_the_critical_path_follows_the_thread_that_issued_the_work(write_trace: WriteTrace) -> None:
    # GIVEN a step whose backward pass is issued by the autograd thread while the main thread waits
    a = analysed(write_trace, autograd_step())
    # THEN the 8 ms the main thread sat in backward() are the autograd thread's host work on the path
    assert on_lane(a, Kind.HOST, AUTOGRAD) == pytest.approx(8_000, rel=0.05)
    assert on_lane(a, Kind.HOST, MAIN) < 2_200
    # AND the graph records both handoffs: the autograd thread began when the main thread handed it the
    # backward pass, and the optimizer's first launch waited for the autograd thread
    g = a.graph
    assert g is not None
    tid = {c: a.model.lanes[int(g.call_lane[c])].tid for c in range(g.calls)}
    deps = {
        (tid[c], float(g.call_start[c]), tid[int(g.call_dep[c])]) for c in np.flatnonzero(g.call_dep >= 0)
    }
    assert deps == {(str(AUTOGRAD), 1_052.0, str(MAIN)), (str(MAIN), 9_202.0, str(AUTOGRAD))}
    # AND the replay reproduces the window; a 2x faster host saves about half of it
    assert a.whatif is not None and a.whatif.replay_error < 0.01
    assert 4_000 <= a.whatif.sensitivity_us["host"] <= 5_500
    assert a.summary.bottleneck == "host" and a.warnings == ()


def test_a_thread_that_ends_before_the_window_does_not_hold_its_end(write_trace: WriteTrace) -> None:
    # GIVEN a trace without steps: thread A launches for 2 ms and ends; thread B then launches and ends
    # the trace in a device synchronize that waits 3 ms for a long kernel
    ev: list[Event] = []
    for i in range(20):
        ev += launch(i * 100.0, i + 1, i * 100.0 + 10, 20, tid=MAIN)
    ev += launch(2_100, 50, 2_110, 3_000, tid=AUTOGRAD)
    ev.append(span("cuda_runtime", "cudaDeviceSynchronize", 2_200, 2_915, tid=AUTOGRAD, correlation=51))
    a = analysed(write_trace, ev)
    # THEN the path ends through B's sync into the kernel, and A holds nothing after its last event
    assert on_lane(a, Kind.SYNC, AUTOGRAD) > 0
    assert a.critical is not None and a.critical.breakdown_us[Kind.DEVICE] >= 3_000
    assert on_lane(a, Kind.HOST, MAIN) <= 2_100
    assert a.summary.bottleneck in ("device", "balanced") and a.warnings == ()


# ----- launch delays and waits on other streams -------------------------------------------------------


def held_kernel(stream_wait: bool) -> list[Event]:
    """40 kernels launched ~5 µs before they run, then one launched at 5 ms that runs at 25 ms; the host
    waits for it in a device synchronize that ends the step."""
    ev = [span("user_annotation", "ProfilerStep#1", 0, 25_220, External_id=0)]
    for i in range(40):
        ev += launch(i * 120.0, i + 1, i * 120.0 + 7, 50)
    if stream_wait:
        ev.append(span("cuda_runtime", "cudaStreamWaitEvent", 4_990, 3, correlation=99))
    ev += launch(5_000, 100, 25_000, 200)
    ev.append(span("cuda_runtime", "cudaDeviceSynchronize", 5_020, 20_190, correlation=101))
    return ev


@pytest.mark.parametrize("stream_wait", [False, True])
def test_a_delay_past_a_plausible_launch_latency_is_not_launch(
    write_trace: WriteTrace, stream_wait: bool
) -> None:
    a = analysed(write_trace, held_kernel(stream_wait))
    (gap,) = [g for g in a.gaps if g.dur_us > 10_000]
    # THEN the 20 ms gap is not launch latency: a stream wait explains it, or nothing in the trace does
    if stream_wait:
        assert gap.cause == Cause.DEPENDENCY and "stream wait" in gap.detail
    else:
        assert gap.cause == Cause.UNKNOWN and "not in the trace" in gap.detail
    # AND on the critical path it is idle waiting, not launch; the verdict is not launch-bound
    assert a.critical is not None
    assert a.critical.breakdown_us[Kind.LAUNCH] < 500
    assert a.critical.breakdown_us[Kind.IDLE] >= 19_000
    assert a.summary.bottleneck != "launch"
    # the self-check says when most of the idle has no known cause (a bug report about itself: here, a
    # hold the trace does not show)
    expected = (
        () if stream_wait else ("88% of the device's idle time has no known cause (20263 of 23013 us)",)
    )
    assert a.warnings == expected


def test_copies_waiting_for_a_collective_on_another_stream_are_dependency(write_trace: WriteTrace) -> None:
    # GIVEN ROCm-style: no wait records, a hipStreamWaitEvent before each copy, copies on stream 0 that
    # start 15 µs after the collective on stream 4 ends
    ev = [span("user_annotation", "ProfilerStep#1", 0, 3_000, External_id=0)]
    for i in range(10):  # compute kernels to set the device's launch and queue delays
        ev += launch(i * 20.0, i + 1, 30.0 + i * 60, 58, name="hipLaunchKernel")
    ev += launch(230, 20, 640, 1_200, stream=4, name="hipExtLaunchKernel", kname="ncclDevKernel_Generic")
    for i in range(4):
        t = 260.0 + i * 30
        ev.append(span("cuda_runtime", "hipStreamWaitEvent", t, 3, correlation=30 + 2 * i))
        ev += launch(t + 10, 31 + 2 * i, 1_855.0 + i * 8, 6, name="hipMemcpyAsync", kname="Memcpy DtoD")
    ev += launch(
        500, 60, 2_400, 500, name="hipLaunchKernel"
    )  # queued behind the copies' stream? no: new work
    a = analysed(write_trace, ev)
    g = a.graph
    assert g is not None
    # THEN the first copy waits for the collective (a tolerance derived from the trace, not 3 µs)
    names = [a.model.name_of(int(e)) for e in g.act_event]
    first_copy = names.index("Memcpy DtoD")
    (waited,) = g.act_waits[first_copy]
    assert names[waited] == "ncclDevKernel_Generic"
    assert g.wait_tolerance_us >= 15
    # AND no device gap is blamed on an unknown cause or on launch latency
    assert all(gp.cause not in (Cause.UNKNOWN, Cause.LAUNCH) for gp in a.gaps if gp.dur_us > 100)


# ----- gap causes by share, data loading -----------------------------------------------------------------


LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


@pytest.mark.parametrize(
    ("cat", "name"),
    [
        ("user_annotation", LOADER),
        ("Operator", LOADER),  # TensorBoard-era traces
        ("cpu_op", LOADER),
        ("python_function", "torch/utils/data/dataloader.py(628): __next__"),
        ("user_annotation", "prepare_batch"),
        ("python_function", "my_project/data.py(12): __getitem__"),
    ],
)
def test_a_sync_explains_only_its_share_of_a_gap_spent_loading_data(
    write_trace: WriteTrace, cat: str, name: str
) -> None:
    # GIVEN a .item()-like sync that blocks 30 µs, then 5 ms of data loading before the next launch
    ev = [span("user_annotation", "ProfilerStep#1", 0, 6_000, External_id=0)]
    ev += launch(0, 1, 10, 100)
    ev.append(span("cuda_runtime", "cudaStreamSynchronize", 80, 35, correlation=2))
    ev.append(span(cat, name, 130, 5_000))
    ev += launch(5_200, 3, 5_210, 700)
    a = analysed(write_trace, ev)
    assert input_intervals(a.model)  # recognised as data loading, whatever its category
    (gap,) = [g for g in a.gaps if g.dur_us > 1_000]
    # THEN the gap is input; the sync keeps the 30 µs its lead explains, no more
    assert gap.cause == Cause.INPUT
    assert gap.charged_us == pytest.approx(30, abs=6)
    (sync,) = a.syncs
    assert sync.bubble_us == pytest.approx(gap.charged_us)
    # AND input lies on the critical path, overlapping it would save it, and the verdict says input
    assert a.critical is not None and a.critical.breakdown_us[Kind.INPUT] >= 4_900
    assert a.whatif is not None and a.whatif.saving(a.whatif.results[-1].scenario) >= 4_500
    assert a.summary.bottleneck == "input" and a.warnings == ()


def test_names_that_only_contain_the_words_are_not_data_loading(write_trace: WriteTrace) -> None:
    ev = [
        span("user_annotation", "DistributedDataParallel.forward", 0, 100),
        span("python_function", "torch/nn/modules/container.py(300): __getitem__", 0, 10),
        span("cpu_op", "aten::index", 20, 10),
    ]
    ev += launch(200, 1, 210, 10)
    assert input_intervals(analysed(write_trace, ev).model) == {}


# ----- the verdict ---------------------------------------------------------------------------------------


def path(**share: float) -> CriticalPath:
    breakdown = {k: share.get(k.value, 0.0) * 1000 for k in Kind}
    empty = np.zeros(0)
    return CriticalPath(1000.0, breakdown, empty.astype(np.int8), empty.astype(np.int64),
                        empty.astype(np.int64), empty, empty)  # fmt: skip


def test_the_bottleneck_is_what_would_save_most_not_the_paths_largest_share() -> None:
    # a host-heavy path on a 90% busy GPU: a faster device saves more than a faster host
    v = decide(1000, {"device": 300, "host": 80, "input": 0, "sync": 0}, path(host=0.7, device=0.3), 0.9)
    assert (v.bottleneck, v.basis) == ("device", "sensitivity")
    assert "host 70%" in v.evidence() and "GPU 90% busy" in v.evidence()


def test_balanced_when_host_and_device_are_both_near_saturation() -> None:
    v = decide(1000, {"device": 300, "host": 250, "input": 0, "sync": 0}, path(host=0.5, device=0.5), 0.8)
    assert v.bottleneck == "balanced"
    # not balanced when the GPU is mostly idle, or one side saves far more
    assert decide(1000, {"device": 300, "host": 250}, path(host=1.0), 0.3).bottleneck == "device"
    assert decide(1000, {"device": 300, "host": 100}, path(device=1.0), 0.9).bottleneck == "device"


def test_without_a_decisive_saving_the_path_decides_and_idle_on_a_busy_gpu_is_device() -> None:
    small = {"device": 10.0, "host": 5.0, "input": 0.0, "sync": 0.0}
    assert decide(1000, small, path(idle=0.9, device=0.1), 0.02).bottleneck == "idle"
    v = decide(1000, small, path(idle=0.6, device=0.4), 0.7)
    assert (v.bottleneck, v.basis) == ("device", "critical path")


def test_the_self_check_reports_a_verdict_its_numbers_contradict(write_trace: WriteTrace) -> None:
    a = analysed(write_trace, autograd_step())
    assert check(a) == ()
    assert a.verdict is not None
    wrong = replace(a.verdict, bottleneck="device")  # a faster host saves more
    stalled = replace(a.verdict, bottleneck="idle", basis="critical path", utilization=0.9)
    assert any("would save more" in w for w in check(replace(a, verdict=wrong)))
    assert any("stalled" in w and "90%" in w for w in check(replace(a, verdict=stalled)))


def test_the_self_check_counts_host_segments_outside_their_threads_lifetime(write_trace: WriteTrace) -> None:
    # GIVEN an analysis whose critical path has host and device segments
    a = analysed(write_trace, autograd_step())
    cp = a.critical
    assert cp is not None and check(a) == ()
    host_lanes = {lane.id for lane in a.model.lanes if lane.kind == LaneKind.HOST}
    kinds = list(Kind)
    on_host = [
        i
        for i, (k, lane) in enumerate(zip(cp.kind.tolist(), cp.lane.tolist(), strict=True))
        if kinds[k] in (Kind.HOST, Kind.INPUT, Kind.SYNC) and lane in host_lanes
    ]
    elsewhere = [i for i in range(len(cp.kind)) if i not in on_host]
    assert len(on_host) >= 2 and elsewhere
    # WHEN two host segments are moved past their thread's last event (one by less than the slack), one
    # before its first, and segments of other kinds (or of no lane) far away
    start, end = cp.start_us.copy(), cp.end_us.copy()
    lane = cp.lane.copy()
    end[on_host[0]] += 1e6
    start[on_host[1]] -= 1e6
    if len(on_host) > 2:
        end[on_host[2]] += 10.0  # within the 50 us of clock rounding allowed
    start[elsewhere[0]] -= 1e6
    moved = replace(cp, start_us=start, end_us=end, lane=lane)
    # THEN the two are counted, and only they
    assert check(replace(a, critical=moved)) == (
        "2 host segment(s) of the critical path lie outside their thread's lifetime",
    )
    lane[on_host[0]] = -1  # a segment of no lane is not judged
    assert check(replace(a, critical=replace(moved, lane=lane))) == (
        "1 host segment(s) of the critical path lie outside their thread's lifetime",
    )


def test_the_whatif_baseline_is_the_window_and_device_work_past_it_is_said(write_trace: WriteTrace) -> None:
    # GIVEN a step whose last kernel runs 2 ms past the step's end
    ev = [span("user_annotation", "ProfilerStep#1", 0, 1_000, External_id=0)]
    ev += launch(100, 1, 110, 400) + launch(600, 2, 610, 2_400)
    a = analysed(write_trace, ev)
    assert a.whatif is not None
    # THEN "as recorded" is the window, every prediction is the window less its saving
    assert a.whatif.window_us == a.window.dur_us == 1_000
    assert all(r.predicted_wall_us == pytest.approx(1_000 - r.saving_us) for r in a.whatif.results)
    # AND one note says the device work ran past the window
    assert a.whatif.overrun_us == pytest.approx(2_010, abs=1)
    assert any("past its end" in n for n in a.notes)


def test_a_cpu_only_run_gets_whatif_savings_that_agree_with_its_findings(write_trace: WriteTrace) -> None:
    # GIVEN a CPU-only run: 3 steps of 10 ms, each 6 ms of data loading then 4 ms of ops
    ev: list[Event] = []
    for i in range(3):
        t = i * 10_000.0
        ev.append(span("user_annotation", f"ProfilerStep#{i + 1}", t, 10_000, External_id=100 + i))
        ev.append(span("cpu_op", LOADER, t, 6_000))
        ev.append(span("cpu_op", "aten::mm", t + 6_000, 4_000))
    a = analysed(write_trace, ev)
    assert a.main_device is None and a.whatif is not None and a.critical is not None
    # THEN the what-if follows the critical path: overlapped loading saves its 18 ms, a 2x host half of all
    assert a.critical.breakdown_us[Kind.INPUT] == pytest.approx(18_000)
    assert a.whatif.saving(Scenario.INPUT_OVERLAPPED) == pytest.approx(18_000)
    assert a.whatif.saving(Scenario.HOST_2X) == pytest.approx(15_000)
    assert a.whatif.saving(Scenario.DEVICE_2X) == 0.0
    # AND the input finding and the best saving quote the same number; the verdict says input
    (finding,) = [f for f in a.findings if f.rule == "input_bound"]
    assert finding.est_saving_us == pytest.approx(18_000) == a.summary.est_saving_us
    assert a.summary.bottleneck == "input" and a.warnings == ()


def test_the_self_check_compares_each_kinds_path_share_with_what_speeding_it_up_saves(
    write_trace: WriteTrace,
) -> None:
    a = analysed(write_trace, autograd_step())
    assert a.verdict is not None and a.critical is not None and check(a) == ()
    # WHEN host is 60% of the path but a faster host saves nothing THEN the two disagree
    w = a.window.dur_us
    breakdown = {k: 0.0 for k in Kind} | {Kind.HOST: 0.6 * w, Kind.DEVICE: 0.4 * w}
    sens = dict(a.verdict.sensitivity_us) | {"host": 0.001 * w}
    contradicted = replace(
        a,
        critical=replace(a.critical, breakdown_us=breakdown),
        verdict=replace(a.verdict, sensitivity_us=sens),
    )
    assert "host is 60% of the critical path but speeding it up saves 0.1% of the window" in check(
        contradicted
    )


def test_the_self_check_flags_a_device_verdict_on_an_idle_path_and_a_mostly_idle_gpu(
    write_trace: WriteTrace,
) -> None:
    a = analysed(write_trace, autograd_step())
    assert a.verdict is not None
    w = a.window.dur_us
    verdict = replace(
        a.verdict,
        bottleneck="device",
        utilization=0.2,
        sensitivity_us=dict(a.verdict.sensitivity_us) | {"device": 0.2 * w, "host": 0.0},
        path_share={"idle": 0.7, "device": 0.3},
    )
    assert "verdict device-bound with the GPU 20% busy and 70% of the path idle" in check(
        replace(a, verdict=verdict)
    )


def test_the_self_check_flags_a_launch_segment_past_the_bound_and_a_walk_that_stopped(
    write_trace: WriteTrace,
) -> None:
    a = analysed(write_trace, autograd_step())
    cp, g = a.critical, a.graph
    assert cp is not None and g is not None and check(a) == ()
    bound = float(np.max(g.act_bound))
    # a launch segment twice the plausible launch delay, as a walk without one bound made
    kind = np.array([list(Kind).index(Kind.LAUNCH)], dtype=np.int8)
    long = replace(
        cp,
        kind=kind,
        lane=np.array([0]),
        event=np.array([-1]),
        start_us=np.array([a.window.start_us]),
        end_us=np.array([a.window.start_us + 2 * bound]),
    )
    (warning,) = [w for w in check(replace(a, critical=long)) if "launch segment" in w]
    assert f"lasts {2 * bound:.0f} us, longer than a plausible launch delay ({bound:.0f} us)" in warning
    stopped = replace(cp, stopped="the recorded order has a cycle (an edge back in time): the rest is idle")
    assert check(replace(a, critical=stopped)) == (
        "the critical path walk stopped early: the recorded order has a cycle (an edge back in time): the rest "
        "is idle",
    )


def test_one_launch_bound_serves_the_gaps_and_the_path_even_when_typical_launches_are_slow() -> None:
    from stallscope.analyzer.graph.edges import MAX_BOUND_US, launch_latency

    # GIVEN a device whose every launch onto an idle stream took ~150 ms (first use: module loads)
    observed = np.array([149_000.0, 150_000.0, 151_000.0, 5.0])
    free = np.array([True, True, True, False])
    lat = launch_latency(observed, free, np.zeros(4, dtype=np.int64))
    # THEN the typical latency never exceeds the plausible bound, which is at most 2 ms: the critical path's
    # launch segments (typical, when held longer) cannot be 150 ms long
    assert float(lat.bound.max()) == MAX_BOUND_US == 2000.0
    assert np.all(lat.typical <= lat.bound)
