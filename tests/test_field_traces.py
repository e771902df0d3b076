"""Verdicts on the real traces of ``../shared/traces/field`` (other projects' test suites): each gets the
analysis its MANIFEST row asks for, checked on the computed numbers. Skipped when the folder is absent."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest

from stallscope.analyzer.analysis import Analysis, analyze
from stallscope.analyzer.load.loader import load
from stallscope.analyzer.passes.critical import Kind
from stallscope.analyzer.passes.gaps import Cause
from stallscope.analyzer.passes.replay import Scenario

pytestmark = pytest.mark.shared
FIELD = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "field"


@cache
def field(name: str) -> Analysis:
    path = FIELD / f"{name}.pt.trace.json.gz"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    return analyze(load(path))


@cache
def load_shared(name: str) -> Analysis:
    path = FIELD.parent / f"{name}.pt.trace.json.gz"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    return analyze(load(path))


def share(a: Analysis, kind: Kind) -> float:
    assert a.critical is not None
    return a.critical.breakdown_us[kind] / a.window.dur_us


def saving(a: Analysis, scenario: Scenario) -> float:
    assert a.whatif is not None
    return a.whatif.saving(scenario) / a.window.dur_us


def path_lanes(a: Analysis, kind: Kind) -> set[int]:
    cp = a.critical
    assert cp is not None
    return set(cp.lane[cp.kind == list(Kind).index(kind)].tolist())


def test_data_loading_without_workers_is_the_verdict_and_with_four_it_is_not() -> None:
    nw0, nw4 = field("kineto_v100_resnet50_nw0"), field("kineto_v100_resnet50_nw4")
    # TensorBoard's plugin: DataLoader 33.4% of the step with num_workers=0, 0.84% with 4
    assert nw0.summary.bottleneck == "input"
    assert share(nw0, Kind.INPUT) > 0.25
    assert 0.2 < saving(nw0, Scenario.INPUT_OVERLAPPED) < 0.45  # comparable to TensorBoard's 33.4%
    (finding,) = [f for f in nw0.findings if f.rule == "input_bound"]
    assert "num_workers" in finding.advice and finding.est_saving_us > 0.2 * nw0.window.dur_us
    assert nw4.summary.bottleneck != "input"
    assert share(nw4, Kind.INPUT) < 0.05 and saving(nw4, Scenario.INPUT_OVERLAPPED) < 0.02
    assert not [f for f in nw4.findings if f.rule == "input_bound"]


def test_the_path_follows_the_autograd_thread_through_the_backward_pass() -> None:
    a = field("hta_a100_df_index_resolver")
    assert a.critical is not None and a.graph is not None
    # both host threads carry host time on the path; none of it spans a thread's idle wait
    host_lanes = path_lanes(a, Kind.HOST)
    assert len(host_lanes) == 2
    cp = a.critical
    main = a.model.steps[0].lane
    on_main = (cp.lane == main) & (cp.kind == list(Kind).index(Kind.HOST))
    longest_main = float(np.max(cp.end_us[on_main] - cp.start_us[on_main]))
    assert longest_main < 150_000  # each ~250 ms backward wait of the main thread is the other thread's
    assert int(np.count_nonzero(a.graph.call_dep >= 0)) >= 5  # one handoff per step at least
    # the bottleneck is what the what-if says: a faster host saves, a faster device does not
    assert a.verdict is not None and a.verdict.basis == "sensitivity"
    assert a.summary.bottleneck == max(a.verdict.sensitivity_us, key=lambda k: a.verdict.sensitivity_us[k])


def test_the_window_ends_through_the_other_threads_sync_into_busy_device_work() -> None:
    a = field("tracelens_mi210_gpu_only")
    assert a.critical is not None
    # the last segments: the other thread's hipDeviceSynchronize (sync) after device work
    kinds = [s.kind for s in a.critical.segments]
    assert Kind.SYNC in kinds[-3:] and a.critical.breakdown_us[Kind.DEVICE] > 0.4 * a.window.dur_us
    assert a.summary.device_utilization > 0.85 and a.summary.bottleneck != "host"
    assert a.warnings == ()  # every thread's segments lie within its lifetime


def test_copies_waiting_for_the_collective_are_dependency_and_the_path_runs_through_it() -> None:
    a = field("tracelens_mi300_resnet_act_checkpoint")
    g, cp = a.graph, a.critical
    assert g is not None and cp is not None
    names = [a.model.name_of(int(e)) for e in g.act_event]
    # copies starting 9-19 µs after an RCCL kernel ends on another stream wait for it
    waits_on_nccl = [i for i, ws in enumerate(g.act_waits) if any("nccl" in names[w] for w in ws)]
    assert len(waits_on_nccl) >= 3 and g.wait_tolerance_us >= 19
    on_path = {a.model.name_of(int(e)) for e in cp.event[cp.kind == list(Kind).index(Kind.COMMUNICATION)]}
    assert on_path and all("nccl" in n.lower() for n in on_path)
    assert share(a, Kind.IDLE) < 0.2 and a.summary.device_utilization > 0.9


def test_a_rank_mostly_in_collectives_is_communication_bound_not_device_bound() -> None:
    a = field("tracelens_mi300_resnet_act_checkpoint")
    (d,) = a.devices
    # the busy split: RCCL kernels cover ~40 ms of the ~49 ms window, compute ~14 ms
    assert d.compute_us + d.communication_us + d.copy_us == pytest.approx(d.busy_us)
    assert 0.2 < d.compute_us / a.window.dur_us < 0.35 and d.communication_us > 2 * d.compute_us
    assert share(a, Kind.COMMUNICATION) > 0.6 > share(a, Kind.DEVICE)
    # the what-if separates them: device_2x is both together, compute alone saves far less
    compute, comm = saving(a, Scenario.COMPUTE_2X), saving(a, Scenario.COMMUNICATION_2X)
    assert comm > 3 * compute and saving(a, Scenario.DEVICE_2X) >= comm
    assert saving(a, Scenario.COMMUNICATION_OVERLAPPED) >= comm
    assert a.summary.bottleneck == "communication" and a.verdict is not None
    assert a.verdict.sensitivity_us["communication"] == pytest.approx(comm * a.window.dur_us)
    (finding,) = [f for f in a.findings if f.rule == "communication_bound"]
    assert "stallscope analyze FOLDER" in finding.advice and "overlap" in finding.advice.lower()
    assert finding.est_saving_us == pytest.approx(
        saving(a, Scenario.COMMUNICATION_OVERLAPPED) * a.window.dur_us
    )
    assert a.findings[0] is finding


def test_a_kernel_held_for_463_ms_is_not_launch_latency() -> None:
    a = field("tracelens_sglang_qwen3_decode")
    (gap,) = [g for g in a.gaps if g.dur_us > 400_000]
    assert gap.cause == Cause.DEPENDENCY and "stream wait" in gap.detail
    assert a.summary.bottleneck != "launch" and share(a, Kind.LAUNCH) < 0.01
    assert all(g.cause != Cause.LAUNCH or g.dur_us < 1_000 for g in a.gaps)


def test_gaps_spent_in_the_dataloader_after_short_syncs_are_input() -> None:
    a = field("tracelens_mi300_owlv2")
    long_gaps = [g for g in a.gaps if g.dur_us > 100_000]
    assert len(long_gaps) >= 5 and all(g.cause == Cause.INPUT for g in long_gaps)
    # a sync's charge never exceeds what it blocked the host for
    for s in a.syncs:
        assert s.bubble_us <= s.wait_us + 1e-6
    assert a.summary.bottleneck == "input"


def test_the_self_check_is_silent_on_every_shared_trace(shared_traces: Path) -> None:
    # every real trace, in every folder (each rank file of the DLRM job on its own)
    files = sorted(shared_traces.rglob("*.json.gz"))
    assert len(files) >= 25
    for path in files:
        a = analyze(load(path))
        assert a.warnings == (), (path.name, a.warnings)
        assert a.verdict is not None and a.summary.bottleneck == a.verdict.bottleneck
        titles = [f.title for f in a.findings]  # one finding per problem and place: no two read alike
        assert len(set(titles)) == len(titles), (path.name, titles)


def test_counter_series_are_summarized_over_the_window() -> None:
    from stallscope.analyzer.document.analysis import to_json

    a = field("hta_a100_cupti_range_profiler")
    doc = to_json(a)
    ffma = next(s for s in doc["counters"] if s["name"].endswith("ffma_pred_on.sum"))
    c = a.model.counters
    i = next(i for i, s in enumerate(c.series) if s.name == ffma["name"])
    ts, value = c.of(i)
    inside = value[(ts >= a.window.start_us) & (ts <= a.window.end_us)]
    assert len(inside) == 77
    assert ffma["window"] == {
        "min": pytest.approx(float(inside.min())),
        "mean": pytest.approx(float(inside.mean())),
        "max": pytest.approx(float(inside.max())),
    }
    assert ffma["window"]["max"] > 1e9  # the FP32 FMA instructions the ranges executed


def test_a_window_ending_in_queued_device_work_ends_earlier_on_a_faster_device() -> None:
    a = field("tracelens_sglang_qwen3_prefilldecode")
    g, f = a.graph, a.frame
    assert g is not None and f is not None
    # the host finished issuing ~0.46 s before the window's end: the queued device work decides it
    assert a.window.end_us - float(g.call_end.max()) > 0.4 * a.window.dur_us
    assert 0.2 < saving(a, Scenario.DEVICE_2X) < 0.3  # the device work in the tail takes half as long
    assert a.summary.bottleneck == "device" and a.verdict is not None and a.verdict.basis == "sensitivity"


def test_a_blocking_runtime_call_is_a_wait_and_the_verdict_is_the_device() -> None:
    from stallscope.analyzer.core import intervals
    from stallscope.analyzer.graph.dependency import Blocking

    a = field("hta_mtia_single_rank0")
    g = a.graph
    assert g is not None and a.main_device is not None
    # 95% of the device's busy time lies inside runFunction calls; those that return after the work they
    # launched (within clock skew: the rest return a few µs early) now wait for it, and hold 90% of it
    runtime = np.flatnonzero(g.call_blocking == Blocking.RUNTIME)
    assert len(runtime) > 300
    s, e = intervals.union(g.act_start, g.act_end)
    covered = float(
        intervals.covered_in(s, e, *intervals.union(g.call_start[runtime], g.call_end[runtime])).sum()
    )
    assert covered > 0.9 * intervals.total(s, e)
    assert a.summary.bottleneck == "device" and saving(a, Scenario.HOST_2X) < 0.01
    assert {s.kind.value for s in a.syncs if s.calls[0] in set(runtime.tolist())} == {"runtime"}
    assert not [f for f in a.findings if f.rule.startswith("false_sync")]  # how it launches, not a mistake


def test_two_threads_waiting_for_each_other_do_not_stop_the_path() -> None:
    a = field("hta_trace_diff_control")
    cp = a.critical
    assert cp is not None and cp.stopped == ""
    # no single idle segment covers the window: the path runs through real work
    assert float(np.max(cp.end_us - cp.start_us)) < 0.1 * a.window.dur_us
    assert share(a, Kind.IDLE) < 0.1 and share(a, Kind.HOST) + share(a, Kind.DEVICE) > 0.6
    # a host verdict on an 84%-busy GPU stands on the replays: a faster host saves more than a faster device
    assert a.verdict is not None and a.verdict.basis == "sensitivity"
    assert a.summary.bottleneck == "host" and saving(a, Scenario.HOST_2X) > 2 * saving(a, Scenario.DEVICE_2X)


def test_idle_inside_a_long_launch_call_is_host_time() -> None:
    a = field("hta_rocm_mi250_minitoy")
    idle = sum(a.idle_by_cause.values())
    assert a.idle_by_cause[Cause.UNKNOWN] < 0.05 * idle and a.idle_by_cause[Cause.HOST] > 0.9 * idle
    # the long hipLaunchKernel (module load) is host time: a faster host shortens it
    assert a.critical is not None and a.critical.breakdown_us[Kind.LAUNCH] < 1_000
    assert saving(a, Scenario.HOST_2X) > 0.3 and a.summary.bottleneck == "host"


def test_a_filtered_trace_untraced_time_is_said_and_does_not_decide_as_host() -> None:
    a = load_shared("hta_a100_multistream_event_sync")
    # 19 ms of the main thread between two calls with no event at all: untraced, not host work
    assert share(a, Kind.UNTRACED) > 0.8 and share(a, Kind.HOST) < 0.1
    assert saving(a, Scenario.HOST_2X) < 0.05  # halving the host cannot halve what the trace does not show
    assert a.summary.bottleneck == "untraced" and a.idle_by_cause[Cause.UNTRACED] > 0.8 * a.window.dur_us
