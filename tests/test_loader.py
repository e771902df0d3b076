"""The trace loader and trace model on tiny hand-built traces (GIVEN / WHEN / THEN).

Each test writes a small Kineto document, loads it with ``stallscope.analyzer.load.loader.load`` and checks computed
values: event order, lanes, steps, links, the load report. Large-file (streaming) and cache behaviour
and property tests of the nesting and interval helpers are at the end.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kineto import (
    GPU_NAME,
    HOST,
    Event,
    WriteTrace,
    document,
    flow,
    kernel,
    launch_pair,
    span,
    write_trace_file,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import stallscope.analyzer.load.loader
from stallscope.analyzer.analysis import analyze_model
from stallscope.analyzer.core import intervals
from stallscope.analyzer.core.errors import TraceError
from stallscope.analyzer.core.model import NO_ID, LaneKind, Step, TraceModel
from stallscope.analyzer.core.names import ApiKind, EventKind
from stallscope.analyzer.load import cache
from stallscope.analyzer.load.build import build_model
from stallscope.analyzer.load.links import _nest_sorted, nest
from stallscope.analyzer.load.loader import load, load_file
from stallscope.analyzer.load.raw import decode
from stallscope.analyzer.passes.window import WindowBasis


def load_one(path: Path, **kwargs: Any) -> TraceModel:
    traces = load(path, **kwargs)
    assert len(traces.models) == 1
    return traces.models[0]


def index_of(model: TraceModel, name: str) -> int:
    """Index of the one event called ``name``."""
    hits = [i for i in range(model.event_count) if model.name_of(i) == name]
    assert len(hits) == 1, (name, hits)
    return hits[0]


# ----- a minimal trace --------------------------------------------------------------------------------


def minimal_trace() -> dict[str, Any]:
    """One host thread: ProfilerStep#1 > aten::add > cudaLaunchKernel (corr 5) -> kernel on stream 7."""
    events: list[Event] = [
        kernel("add_kernel", 1050, 20, 5, ext=11),  # file order is not time order: the loader sorts
        flow("f", 5, 1050, pid=0, tid=7),
        span("cuda_runtime", "cudaLaunchKernel", 1015, 10, correlation=5, External_id=11),
        flow("s", 5, 1015),
        span("cpu_op", "aten::add", 1010, 30, External_id=11),
        span("user_annotation", "ProfilerStep#1", 1000, 100, External_id=1),
        {"ph": "M", "name": "thread_name", "pid": HOST, "tid": HOST, "args": {"name": "python main"}},
    ]
    return document(events, distributedInfo={"rank": 0, "world_size": 1})


def test_minimal_trace_lanes_steps_and_links(write_trace: WriteTrace) -> None:
    # GIVEN a step holding an aten op that launches one kernel (correlation 5, ac2g flows)
    path = write_trace(minimal_trace())
    # WHEN it is loaded
    m = load_one(path)
    ev = m.events
    # THEN events are sorted by time, one host lane and one stream lane
    assert [m.name_of(i) for i in range(len(ev))] == [
        "ProfilerStep#1",
        "aten::add",
        "cudaLaunchKernel",
        "add_kernel",
    ]
    assert ev.ts.tolist() == [1000.0, 1010.0, 1015.0, 1050.0]
    assert ev.dur.tolist() == [100.0, 30.0, 10.0, 20.0]
    assert ev.kind.tolist() == [EventKind.ANNOTATION, EventKind.CPU_OP, EventKind.RUNTIME, EventKind.KERNEL]
    assert ev.api.tolist() == [ApiKind.NONE, ApiKind.NONE, ApiKind.LAUNCH, ApiKind.NONE]
    (host,) = m.lanes_of(LaneKind.HOST)
    (stream,) = m.lanes_of(LaneKind.STREAM)
    assert len(m.lanes) == 2
    assert (host.pid, host.tid, host.name) == ("100", "100", "python main")
    assert (stream.device, stream.stream, stream.label) == (0, 7, "GPU 0 stream 7")
    assert ev.lane.tolist() == [host.id, host.id, host.id, stream.id]
    # ... the step, with its number and span
    assert m.steps == (Step("ProfilerStep#1", 1, 1000.0, 1100.0, host.id, 0),)
    # ... the kernel links to its launch call, the launch call to its op, and host events nest
    assert ev.launch.tolist() == [NO_ID, NO_ID, NO_ID, 2]
    assert ev.op.tolist() == [NO_ID, NO_ID, 1, NO_ID]
    assert ev.parent.tolist() == [NO_ID, 0, 1, NO_ID]
    assert ev.correlation.tolist() == [NO_ID, NO_ID, 5, 5]
    assert ev.external_id.tolist() == [1, 11, 11, 11]
    assert (ev.stream[3], ev.device[3]) == (7, 0)
    # ... the device is named from deviceProperties, and rank comes from distributedInfo
    assert [(d.id, d.name) for d in m.devices] == [(0, GPU_NAME)]
    assert (m.rank, m.world_size, m.format) == (0, 1, "json")
    assert m.report.skipped == {} and m.report.unpaired_flows == 0
    assert m.report.unlinked_device_events == 0
    # ... and the analysis sees the step window and the kernel as the device's only busy time
    a = analyze_model(m)
    assert (a.window.start_us, a.window.end_us, a.window.basis) == (1000.0, 1100.0, WindowBasis.STEPS)
    (dev,) = a.devices
    assert (dev.busy_us, dev.idle_us, dev.utilization, dev.activities) == (20.0, 80.0, 0.2, 1)


def test_gzip_and_plain_json_give_the_same_model(write_trace: WriteTrace) -> None:
    # GIVEN the same document as .json and .json.gz
    plain = load_one(write_trace(minimal_trace(), "t.json"))
    gz = load_one(write_trace(minimal_trace(), "t.json.gz"))
    # THEN only the format differs
    assert (plain.format, gz.format) == ("json", "json.gz")
    assert_same_events(plain, gz)


# ----- older and other spellings ------------------------------------------------------------------------


def test_legacy_categories_and_flows_without_correlation(write_trace: WriteTrace) -> None:
    # GIVEN an old trace: Operator / Runtime / Kernel / Memcpy categories, async_cpu_to_gpu flows, and no
    # args.correlation anywhere (the flows are the only link); the kernel has no args at all
    events = [
        span("Operator", "aten::copy_", 0, 50),
        span("Runtime", "cudaLaunchKernel", 5, 5),
        span("Runtime", "cudaMemcpyAsync", 20, 5),
        {"ph": "X", "cat": "Kernel", "name": "old_kernel", "pid": 0, "tid": 7, "ts": 30, "dur": 10},
        span("Memcpy", "Memcpy HtoD (Pinned -> Device)", 45, 5, pid=0, tid=7, device=0, stream=7),
        flow("s", 1, 5, cat="async_cpu_to_gpu"),
        flow("f", 1, 30, pid=0, tid=7, cat="async_cpu_to_gpu"),
        flow("s", 2, 20, cat="async_cpu_to_gpu"),
        flow("f", 2, 45, pid=0, tid=7, cat="async_cpu_to_gpu"),
    ]
    # WHEN loaded
    m = load_one(write_trace(document(events)))
    ev = m.events
    op, launch, copy = (index_of(m, n) for n in ("aten::copy_", "cudaLaunchKernel", "cudaMemcpyAsync"))
    k, mc = index_of(m, "old_kernel"), index_of(m, "Memcpy HtoD (Pinned -> Device)")
    # THEN kinds follow the legacy spellings
    assert ev.kind[[op, launch, copy, k, mc]].tolist() == [
        EventKind.CPU_OP,
        EventKind.RUNTIME,
        EventKind.RUNTIME,
        EventKind.KERNEL,
        EventKind.MEMCPY,
    ]
    assert ev.api[[launch, copy]].tolist() == [ApiKind.LAUNCH, ApiKind.MEMCPY]
    # ... the flows link each device activity to the call that issued it
    assert (ev.launch[k], ev.launch[mc]) == (launch, copy)
    assert ev.correlation[[launch, k, copy, mc]].tolist() == [1, 1, 2, 2]
    # ... the calls find their op by nesting (no External id), and the kernel lands on GPU 0 stream 7
    assert (ev.op[launch], ev.op[copy]) == (op, op)
    assert [(lane.device, lane.stream) for lane in m.lanes_of(LaneKind.STREAM)] == [(0, 7)]
    assert m.report.unpaired_flows == 0 and m.report.unlinked_device_events == 0
    assert m.report.unknown_categories == {}


def test_ns_display_unit_keeps_fractional_microseconds_exactly(write_trace: WriteTrace) -> None:
    # GIVEN displayTimeUnit "ns" and fractional-µs timestamps, as HTA's ns-resolution traces have
    raw = [
        ("aten::mm", 1694128201545123.25, 12.375),
        ("aten::relu", 1694128201545130.5, 0.125),
        ("aten::sum", 1694128201545200.75, 1.047),
        ("aten::view", 1712195495519689.047, 63.813),  # as in the HTA trace: beyond float64's 0.25 µs
    ]
    events = [span("cpu_op", n, ts, dur) for n, ts, dur in raw]
    path = write_trace(document(events, displayTimeUnit="ns", baseTimeNanoseconds=1694128200000000000))
    # WHEN loaded
    m = load_one(path)
    # THEN times stay µs as float64, exactly the numbers the JSON holds (no unit conversion, no rounding
    # beyond float64's own: at epoch-µs magnitudes its step is 0.25 µs, as for any JSON reader)
    parsed = json.loads(path.read_text())["traceEvents"]
    assert m.events.ts.dtype == np.float64
    assert m.events.ts.tolist() == [e["ts"] for e in parsed]
    assert m.events.dur.tolist() == [12.375, 0.125, 1.047, 63.813]
    assert m.events.ts[:3].tolist() == [1694128201545123.25, 1694128201545130.5, 1694128201545200.75]
    assert (m.display_time_unit, m.base_time_ns) == ("ns", 1694128200000000000)
    # ... and nesting works at sub-µs resolution (relu starts inside mm, which ends at 135.625)
    assert m.events.parent.tolist()[:3] == [NO_ID, 0, NO_ID]


def test_python_frames_link_to_their_parent_frames_and_enclose_ops(write_trace: WriteTrace) -> None:
    # GIVEN python_function frames main > step > aten::mul, and a second child of main
    events = [
        span("python_function", "train.py(10): main", 0, 100, Python_id=1, Python_parent_id=None),
        span("python_function", "train.py(20): step", 10, 60, Python_id=2, Python_parent_id=1),
        span("cpu_op", "aten::mul", 20, 10, External_id=7),
        span("python_function", "train.py(30): log", 80, 10, Python_id=3, Python_parent_id=1),
        span("python_function", "orphan.py(1): f", 200, 5, Python_id=4, Python_parent_id=99),
    ]
    # WHEN loaded
    m = load_one(write_trace(document(events)))
    ev = m.events
    main, step, mul, log, orphan = (index_of(m, e["name"]) for e in events)
    # THEN py_parent follows Python parent id; non-python events and unknown parents get none
    assert ev.py_parent[[main, step, mul, log, orphan]].tolist() == [NO_ID, main, NO_ID, main, NO_ID]
    assert ev.python_id[[main, step, mul, log, orphan]].tolist() == [1, 2, NO_ID, 3, 4]
    # ... and time nesting makes the step frame the op's parent
    assert ev.parent[[main, step, mul, log, orphan]].tolist() == [NO_ID, main, step, main, NO_ID]
    assert (ev.kind[step], ev.kind[mul]) == (EventKind.PYTHON, EventKind.CPU_OP)


def test_hip_driver_and_graph_api_names_are_classified(write_trace: WriteTrace) -> None:
    # GIVEN runtime/driver calls with HIP, driver and graph spellings (one per µs, in this order)
    calls = [
        ("cuda_runtime", "hipLaunchKernel", ApiKind.LAUNCH),
        ("cuda_runtime", "hipExtLaunchKernel", ApiKind.LAUNCH),
        ("cuda_runtime", "hipMemcpyAsync", ApiKind.MEMCPY),
        ("cuda_runtime", "hipMemsetAsync", ApiKind.MEMSET),
        ("cuda_runtime", "hipDeviceSynchronize", ApiKind.SYNC_DEVICE),
        ("cuda_runtime", "hipStreamSynchronize", ApiKind.SYNC_STREAM),
        ("cuda_driver", "cuLaunchKernelEx", ApiKind.LAUNCH),
        ("cuda_driver", "cuLaunchKernel", ApiKind.LAUNCH),
        ("cuda_runtime", "cudaLaunchKernelExC", ApiKind.LAUNCH),
        ("cuda_runtime", "cudaGraphLaunch", ApiKind.GRAPH_LAUNCH),
        ("cuda_runtime", "cudaEventRecord", ApiKind.EVENT_RECORD),
        ("cuda_runtime", "cudaStreamWaitEvent", ApiKind.STREAM_WAIT),
        ("cuda_runtime", "cudaEventQuery", ApiKind.QUERY),
        ("cuda_runtime", "cudaFree", ApiKind.FREE),
        ("cuda_runtime", "cudaGetDevice", ApiKind.NONE),
        ("cpu_op", "cudaLaunchKernel", ApiKind.NONE),  # an op is never an API call, whatever its name
    ]
    events = [span(cat, name, 10 * i, 5, correlation=i) for i, (cat, name, _) in enumerate(calls)]
    # WHEN loaded
    m = load_one(write_trace(document(events)))
    # THEN each call has its ApiKind, and runtime vs driver kinds are told apart
    assert [ApiKind(a) for a in m.events.api] == [api for _, _, api in calls]
    assert m.events.kind[6] == EventKind.DRIVER and m.events.kind[0] == EventKind.RUNTIME
    assert m.events.kind[-1] == EventKind.CPU_OP


def test_hip_launch_links_to_its_kernel(write_trace: WriteTrace) -> None:
    # GIVEN a hipLaunchKernel and its kernel sharing correlation 3 (ROCm traces use the same shape)
    events = [
        span("cuda_runtime", "hipLaunchKernel", 0, 4, correlation=3),
        kernel("hip_kernel", 10, 2, 3, stream=0),
        flow("s", 3, 0),
        flow("f", 3, 10, pid=0, tid=0),
    ]
    m = load_one(write_trace(document(events)))
    # THEN the kernel's launch is the HIP call, on GPU 0 stream 0
    assert m.events.launch.tolist() == [NO_ID, 0]
    assert [(lane.device, lane.stream) for lane in m.lanes_of(LaneKind.STREAM)] == [(0, 0)]


def test_bare_event_list_document_loads(write_trace: WriteTrace) -> None:
    # GIVEN a top-level JSON array of events (Chrome's other trace format), no deviceProperties
    events = launch_pair(100, 9, 130, 7, ext=4)
    # WHEN loaded
    m = load_one(write_trace(events))
    # THEN the events are there and linked; the device has a generic name; no rank is known
    assert m.event_count == 3
    assert m.events.launch[index_of(m, "add_kernel")] == index_of(m, "cudaLaunchKernel")
    assert [(d.id, d.name) for d in m.devices] == [(0, "device 0")]
    assert (m.rank, m.world_size, m.display_time_unit) == (None, None, None)


def test_unknown_categories_and_phases_are_kept_or_counted(write_trace: WriteTrace) -> None:
    # GIVEN an event of an unknown category, and events of phases the loader does not use
    events: list[Event] = [
        span("cpu_op", "aten::add", 0, 10),
        span("my_vendor_cat", "vendor thing", 2, 3),
        span("my_vendor_cat", "vendor thing 2", 20, 3),
        {"ph": "C", "name": "memory", "pid": HOST, "tid": HOST, "ts": 5, "args": {"bytes": 1}},
        {"ph": "b", "cat": "async", "name": "async span", "id": 1, "pid": HOST, "tid": HOST, "ts": 6},
        {"ph": "C", "name": "memory", "pid": HOST, "tid": HOST, "ts": 7, "args": {"bytes": 2}},
        flow("s", 1, 0, cat="fwdbwd"),
        flow("f", 1, 20, cat="fwdbwd"),
    ]
    # WHEN loaded (not an error)
    m = load_one(write_trace(document(events)))
    # THEN unknown-category events are kept as OTHER and counted; unknown phases are counted, not kept;
    # counters ("C") are kept as counters (tests/test_counters.py), not as events
    assert m.event_count == 3
    assert m.report.unknown_categories == {"my_vendor_cat": 2}
    assert m.report.unknown_phases == {"b": 1}
    assert m.report.counter_samples == 2 and m.counters.of(0)[1].tolist() == [1.0, 2.0]
    assert m.events.kind[index_of(m, "vendor thing")] == EventKind.OTHER
    # ... known non-launch flows (fwdbwd) are neither unknown nor unpaired
    assert m.report.unpaired_flows == 0


def test_malformed_events_are_skipped_and_counted(write_trace: WriteTrace) -> None:
    # GIVEN good events mixed with: a string timestamp, a missing timestamp, a missing duration, a
    # negative duration, non-object elements, and a launch flow whose other end is missing
    events: list[Any] = [
        span("cpu_op", "good 1", 0, 10),
        span("cpu_op", "string ts", "12", 1),
        {"ph": "X", "cat": "cpu_op", "name": "no ts", "pid": HOST, "tid": HOST, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "no dur", "pid": HOST, "tid": HOST, "ts": 3},
        span("cpu_op", "negative", 4, -2),
        42,
        "not an event",
        flow("s", 77, 0),
        span("cpu_op", "good 2", 20, 5),
        {
            "ph": "i",
            "s": "t",
            "cat": "cpu_instant_event",
            "name": "instant",
            "pid": HOST,
            "tid": HOST,
            "ts": 21,
        },
    ]
    # WHEN loaded
    m = load_one(write_trace(document(events)))
    # THEN only the usable events are in the model (instants get a zero duration) ...
    assert [m.name_of(i) for i in range(m.event_count)] == ["good 1", "good 2", "instant"]
    assert m.events.dur.tolist() == [10.0, 5.0, 0.0]
    # ... and every skipped element is counted with its reason
    assert m.report.skipped == {
        "ts: not a number (str)": 1,
        "timestamp missing or not a number": 1,
        "duration missing or not a number": 1,
        "negative duration": 1,
        "not an event object": 2,
    }
    assert m.report.skipped_total == 6
    assert m.report.unpaired_flows == 1


def test_device_activity_without_launch_call_is_counted(write_trace: WriteTrace) -> None:
    # GIVEN a kernel whose launch happened before the profiler started (no runtime call in the trace)
    m = load_one(write_trace(document([span("cpu_op", "aten::add", 0, 10), kernel("k", 5, 3, 123)])))
    # THEN it is kept, unlinked, and counted as such
    assert m.events.launch.tolist() == [NO_ID, NO_ID]
    assert m.report.unlinked_device_events == 1


# ----- folders of rank files ----------------------------------------------------------------------------


def rank_doc(rank: int | None, kernels: int = 1) -> dict[str, Any]:
    events = [e for i in range(kernels) for e in launch_pair(100 * i, 10 + i, 100 * i + 30, 5, ext=i + 1)]
    top = {} if rank is None else {"distributedInfo": {"rank": rank, "world_size": 2}}
    return document(events, **top)


def test_folder_of_rank_files_gives_one_model_per_rank(tmp_path: Path) -> None:
    # GIVEN rank 1 in a file that sorts first by name, rank 0 in another, and a non-trace JSON beside them
    write_trace_file(tmp_path / "a_worker1.pt.trace.json", rank_doc(1, kernels=2))
    write_trace_file(tmp_path / "b_worker0.pt.trace.json", rank_doc(0, kernels=1))
    write_trace_file(tmp_path / "sidecar.json", {"hello": 1})
    # WHEN the folder is loaded
    traces = load(tmp_path)
    # THEN models come in rank order, each from its own file
    assert traces.ranks == [0, 1]
    assert [m.event_count for m in traces.models] == [3, 6]
    assert Path(traces.for_rank(1).path).name == "a_worker1.pt.trace.json"
    assert traces.for_rank(None) is traces.models[0]
    # ... and the sidecar.json that is not a stallscope sidecar is not read as a trace, and said so
    (note,) = traces.notes
    assert note.endswith("sidecar.json: ignored (not a stallscope.sidecar/1 document)")
    assert traces.sidecar is None
    with pytest.raises(KeyError):
        traces.for_rank(5)


def test_folder_with_one_bad_file_loads_the_good_one_and_says_so(tmp_path: Path) -> None:
    # GIVEN a good rank file and a truncated one
    write_trace_file(tmp_path / "good.pt.trace.json", rank_doc(0))
    bad = tmp_path / "bad.pt.trace.json"
    bad.write_text(json.dumps(rank_doc(1))[:150])
    # WHEN the folder is loaded
    traces = load(tmp_path)
    # THEN the good file is used and a note names the bad one and its problem
    assert [Path(m.path).name for m in traces.models] == ["good.pt.trace.json"]
    (note,) = traces.notes
    assert "bad.pt.trace.json" in note and "truncated JSON" in note


def test_a_file_without_rank_beside_ranked_files_is_a_separate_run(tmp_path: Path) -> None:
    # GIVEN a rank file and a file without distributedInfo
    write_trace_file(tmp_path / "x.pt.trace.json", rank_doc(None))
    write_trace_file(tmp_path / "y.pt.trace.json", rank_doc(0, kernels=2))
    traces = load(tmp_path)
    # THEN only the ranked file is a rank; the other is named in a note as a separate run
    assert traces.ranks == [0]
    assert [Path(m.path).name for m in traces.models] == ["y.pt.trace.json"]
    (note,) = traces.notes
    assert "1 more trace file without distributedInfo is a separate run, not ranks" in note
    assert note.endswith("x.pt.trace.json")


def test_runs_without_distributed_info_are_not_ranks(tmp_path: Path) -> None:
    # GIVEN two runs of one worker (tensorboard_trace_handler files, no distributedInfo)
    write_trace_file(tmp_path / "worker0.1623143089861.pt.trace.json", rank_doc(None, kernels=2))
    write_trace_file(tmp_path / "worker0.1623212756351.pt.trace.json", rank_doc(None, kernels=1))
    # WHEN the folder is loaded
    traces = load(tmp_path)
    # THEN the first run is analysed alone (not "rank 0 of 2") and the note lists the other
    assert traces.ranks == [0]
    (model,) = traces.models
    assert Path(model.path).name == "worker0.1623143089861.pt.trace.json" and model.event_count == 6
    (note,) = traces.notes
    assert "separate run, not ranks" in note and "analysed" in note
    assert "worker0.1623212756351.pt.trace.json" in note


def test_trace_files_one_level_down_are_found(tmp_path: Path) -> None:
    # GIVEN tensorboard_trace_handler output kept in a subfolder per worker (ranks 1 and 0)
    write_trace_file(tmp_path / "w1" / "host.1.pt.trace.json.gz", rank_doc(1, kernels=2))
    write_trace_file(tmp_path / "w0" / "host.2.pt.trace.json.gz", rank_doc(0, kernels=1))
    write_trace_file(tmp_path / "w0" / "deeper" / "x.pt.trace.json", rank_doc(5))  # two levels: not searched
    traces = load(tmp_path)
    assert traces.ranks == [0, 1]
    assert [Path(m.path).parent.name for m in traces.models] == ["w0", "w1"]
    assert traces.notes == ()


def test_repeated_rank_files_newest_wins(tmp_path: Path) -> None:
    # GIVEN two tensorboard_trace_handler files of rank 0; the newer stamp is the one that sorts first
    # as text (13 digits vs 12), so only a numeric comparison picks it
    older = "host_123.999999999999.pt.trace.json.gz"
    newer = "host_123.1000000000000.pt.trace.json.gz"
    write_trace_file(tmp_path / older, rank_doc(0, kernels=1))
    write_trace_file(tmp_path / newer, rank_doc(0, kernels=2))
    # WHEN the folder is loaded
    traces = load(tmp_path)
    # THEN one model, from the newest file, and a note says which file was ignored
    (model,) = traces.models
    assert Path(model.path).name == newer and model.event_count == 6
    assert traces.notes == (f"rank 0: using {newer}, ignoring older {older}",)


# ----- large files: the streaming decoder ---------------------------------------------------------------


def big_document(launches: int, *, bad_ts_at: int | None = None, name: str = "add_kernel") -> dict[str, Any]:
    """Thousands of steps of op > launch -> kernel, with top-level facts both before and after the events."""
    events: list[Event] = [
        {"ph": "M", "name": "thread_name", "pid": HOST, "tid": HOST, "args": {"name": "main"}},
    ]
    for i in range(launches):
        t = 50.25 * i
        events.append(span("user_annotation", f"ProfilerStep#{i}", t, 50))
        pair = launch_pair(t + 1, 1000 + i, t + 30, 10, ext=i + 1, stream=7 + i % 2)
        pair[2]["name"] = name
        events += pair
        if bad_ts_at == i:
            events.append(span("cpu_op", "bad", str(t), 1))
    doc = document(events, displayTimeUnit="ms")
    doc["distributedInfo"] = {"rank": 3, "world_size": 4}  # after traceEvents, as some writers do
    doc["baseTimeNanoseconds"] = 1700000000000000000
    return doc


def assert_same_events(a: TraceModel, b: TraceModel) -> None:
    ca, cb = a.events.columns(), b.events.columns()
    assert list(ca) == list(cb)
    for name in ca:
        assert ca[name].dtype == cb[name].dtype, name
        np.testing.assert_array_equal(ca[name], cb[name], err_msg=name)
    assert a.strings == b.strings


def assert_same_model(a: TraceModel, b: TraceModel) -> None:
    assert_same_events(a, b)
    assert (a.lanes, a.devices, a.steps) == (b.lanes, b.devices, b.steps)
    assert (a.rank, a.world_size, a.display_time_unit, a.base_time_ns) == (
        b.rank,
        b.world_size,
        b.display_time_unit,
        b.base_time_ns,
    )
    assert a.report == b.report


def whole_document_model(path: Path) -> TraceModel:
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        import gzip

        data = gzip.decompress(data)
    return build_model(decode(data, str(path)), str(path), "json.gz" if path.name.endswith(".gz") else "json")


@pytest.fixture
def no_whole_document_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the loader's in-memory decode fail, so a passing load proves the streaming path was used."""

    def refuse(data: bytes, path: str) -> Any:
        raise AssertionError("the whole-document decoder was used")

    monkeypatch.setattr(stallscope.analyzer.load.loader, "decode", refuse)


def test_streaming_and_whole_document_decoding_give_identical_models(
    tmp_path: Path, no_whole_document_decode: None
) -> None:
    # GIVEN a trace file over the 1 MiB streaming threshold
    path = write_trace_file(tmp_path / "big.pt.trace.json", big_document(4000))
    assert path.stat().st_size > 1 << 20
    # WHEN loaded by the loader (streaming) and by decoding the document in memory
    streamed = load_one(path, use_cache=False)
    whole = whole_document_model(path)
    # THEN every column, string, lane, step and report entry is the same
    assert_same_model(streamed, whole)
    assert streamed.event_count == 4 * 4000
    assert len(streamed.steps) == 4000 and len(streamed.lanes_of(LaneKind.STREAM)) == 2
    assert (streamed.rank, streamed.world_size, streamed.base_time_ns) == (3, 4, 1700000000000000000)
    kernels = streamed.events.kind == EventKind.KERNEL
    assert np.all(streamed.events.launch[kernels] >= 0)


@pytest.mark.parametrize("name", ["small_blocks.pt.trace.json", "small_blocks.pt.trace.json.gz"])
def test_streaming_in_many_small_batches_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_whole_document_decode: None, name: str
) -> None:
    # GIVEN tiny read blocks and batches, so events are cut at many batch boundaries (gzip too)
    import stallscope.analyzer.load.stream

    monkeypatch.setattr(stallscope.analyzer.load.stream, "_BLOCK", 10_000)
    monkeypatch.setattr(stallscope.analyzer.load.stream, "BATCH_BYTES", 30_000)
    monkeypatch.setattr(stallscope.analyzer.load.loader, "_STREAM_MIN_BYTES", 0)
    cuts = []
    real_cut = stallscope.analyzer.load.stream._prefix
    monkeypatch.setattr(stallscope.analyzer.load.stream, "_prefix", lambda *a: cuts.append(1) or real_cut(*a))
    path = write_trace_file(tmp_path / name, big_document(600))
    # WHEN loaded (streaming) and decoded whole
    streamed = load_one(path, use_cache=False)
    # THEN the result is the same as the in-memory decode, from many batches
    assert len(cuts) > 10
    assert_same_model(streamed, whole_document_model(path))
    assert streamed.event_count == 4 * 600


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Blocks of 10 kB and batches of 30 kB (so a test trace is cut into many pieces), and the sizes of
    the pieces a decode worker made (as their parts arrive here; the worker is forked after the patches).
    Pieces go to whichever process reaches them first, so this process is slowed by 20 ms a piece: the
    worker then makes some of every test trace."""
    import os
    import time

    import stallscope.analyzer.load.stream
    from stallscope.analyzer.load import decode_pool

    monkeypatch.setattr(stallscope.analyzer.load.stream, "_BLOCK", 10_000)
    monkeypatch.setattr(stallscope.analyzer.load.stream, "BATCH_BYTES", 30_000)
    monkeypatch.setattr(stallscope.analyzer.load.loader, "_STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(stallscope.analyzer.load.loader, "_WORKER_MIN_BYTES", 0)
    monkeypatch.setattr(stallscope.analyzer.load.loader, "_WORKER_MIN_GZIP_BYTES", 0)
    made: list[int] = []
    receive = decode_pool._Worker.receive

    def counted(self: Any) -> Any:
        message = receive(self)
        if isinstance(message, tuple):  # (piece, its length, its part), not the last word
            made.append(message[1])
        return message

    monkeypatch.setattr(decode_pool._Worker, "receive", counted)
    parent, part_of = os.getpid(), decode_pool.part_of

    def slower_here(piece: Any) -> Any:
        if os.getpid() == parent:
            time.sleep(0.02)
        return part_of(piece)

    monkeypatch.setattr(decode_pool, "part_of", slower_here)
    return made


needs_fork = pytest.mark.skipif(
    not __import__("stallscope.analyzer.load.decode_pool").analyzer.load.decode_pool.can_fork(),
    reason="decode workers need fork (Linux)",
)


@needs_fork
@pytest.mark.parametrize("name", ["pieces.pt.trace.json", "pieces.pt.trace.json.gz"])
def test_a_decode_worker_builds_the_same_model(
    tmp_path: Path, small_pieces: list[int], no_whole_document_decode: None, name: str
) -> None:
    # GIVEN a trace cut into many pieces
    path = write_trace_file(tmp_path / name, big_document(2000))
    # WHEN loaded by this process alone and with a decode worker
    alone = load_one(path, use_cache=False)
    helped = load_one(path, use_cache=False, workers=1)
    # THEN the worker made some of the pieces, and every column, string, lane, step and report entry is
    # the same (strings are interned in file order whoever decoded them)
    assert len(small_pieces) >= 2
    assert_same_model(helped, alone)
    assert helped.event_count == 4 * 2000


@needs_fork
def test_a_decode_worker_finds_the_counter_samples_this_process_finds(
    tmp_path: Path, small_pieces: list[int]
) -> None:
    # GIVEN a trace cut into many pieces, some holding counter events (one without a value), some profiler
    # ranges (complete events; an instant of that category is no range), some neither
    doc = big_document(2000)
    events = doc["traceEvents"]
    for i in range(0, len(events), 900):
        ts = 50.25 * (i // 4)
        events.insert(
            i, {"ph": "C", "name": "memory", "pid": HOST, "tid": HOST, "ts": ts, "args": {"bytes": i}}
        )
    for i in range(300, len(events), 1700):
        ts = 50.25 * (i // 4)
        ranged = span("cuda_profiler_range", "k", ts, 2.0, pid=0, tid=7)
        events.insert(i, {**ranged, "args": {"sm__cycles": float(i)}})
        events.insert(
            i,
            {
                "ph": "i",
                "cat": "cuda_profiler_range",
                "name": "r",
                "pid": 0,
                "tid": 7,
                "ts": ts,
                "args": {"n": 1},
            },
        )
    events.insert(
        5, {"ph": "C", "name": "memory", "pid": HOST, "tid": HOST, "ts": 3, "args": {"bytes": "none"}}
    )
    path = write_trace_file(tmp_path / "counters.pt.trace.json", doc)
    # WHEN loaded alone and with a decode worker
    alone = load_one(path, use_cache=False)
    helped = load_one(path, use_cache=False, workers=1)
    # THEN the worker made some pieces, and the samples (and the one counter skipped) are the same
    assert len(small_pieces) >= 2
    assert len(alone.counters.series) == 2 and len(alone.counters) > 10
    assert helped.counters.series == alone.counters.series
    for column in ("sample_series", "ts", "value"):
        np.testing.assert_array_equal(getattr(helped.counters, column), getattr(alone.counters, column))
    assert helped.report.skipped == alone.report.skipped
    assert helped.report.skipped.get("counter event without a numeric time and value") == 1
    assert_same_model(helped, alone)


@needs_fork
@pytest.mark.parametrize(
    "name",
    [
        "hta_a100_nccl_2rank_rank0.pt.trace.json.gz",  # NCCL, several streams, CUDA graphs
        "field/hta_mtia_inference_rank0.pt.trace.json.gz",  # device-side calls
        "field/hta_a100_cupti_range_profiler.pt.trace.json.gz",  # counters (profiler ranges)
        "field/kineto_v100_resnet50_nw4.pt.trace.json.gz",  # DataLoader workers
        "tracelens_h100_bert_small_pystack.pt.trace.json.gz",  # python stacks, memory events
    ],
)
def test_a_decode_worker_builds_the_same_model_of_real_traces(
    shared_traces: Path, small_pieces: list[int], name: str
) -> None:
    path = shared_traces / name
    alone = load_one(path, use_cache=False)
    helped = load_one(path, use_cache=False, workers=1)
    assert small_pieces
    assert_same_model(helped, alone)
    assert helped.counters.series == alone.counters.series
    for column in ("sample_series", "ts", "value"):
        np.testing.assert_array_equal(getattr(helped.counters, column), getattr(alone.counters, column))
    assert helped.devices == alone.devices  # memory peaks included


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of workers asked for, each time decode workers are started."""
    from stallscope.analyzer.load import decode_pool

    asked: list[int] = []
    start = decode_pool._start

    def counted(workers: int, *rest: Any) -> Any:
        asked.append(workers)
        return start(workers, *rest)

    monkeypatch.setattr(decode_pool, "_start", counted)
    return asked


@needs_fork
def test_a_decode_worker_started_early_is_the_one_the_parse_takes(
    tmp_path: Path, small_pieces: list[int], starts: list[int]
) -> None:
    from stallscope.analyzer.load import decode_pool
    from stallscope.analyzer.load.loader import start_decoding

    # GIVEN a trace cut into many pieces, and its decode worker started before it is loaded
    path = write_trace_file(tmp_path / "early.pt.trace.json.gz", big_document(2000))
    start_decoding(path, use_cache=False, workers=1)
    assert starts == [1]
    # WHEN it is loaded with a worker
    helped = load_one(path, use_cache=False, workers=1)
    # THEN no other worker was started: the early one made some of the pieces, and the model is the one
    # this process builds alone
    assert starts == [1] and not decode_pool._early
    assert len(small_pieces) >= 2
    assert_same_model(helped, load_one(path, use_cache=False))


@needs_fork
def test_analyze_and_report_start_the_decode_worker_before_importing_the_analysis(
    tmp_path: Path, small_pieces: list[int], starts: list[int], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from stallscope import commands
    from stallscope.analyzer.load import decode_pool

    taken: list[bool] = []
    take = decode_pool._take_early

    def recorded(key: Any) -> Any:
        found = take(key)
        taken.append(found is not None)
        return found

    monkeypatch.setattr(decode_pool, "_take_early", recorded)
    # GIVEN a trace cut into many pieces, on a machine given one decode worker
    monkeypatch.setenv("STALLSCOPE_DECODE_WORKERS", "1")
    path = write_trace_file(tmp_path / "cli.pt.trace.json.gz", big_document(2000))
    # WHEN `analyze --json` runs, and again with no worker
    assert commands.main(["analyze", str(path), "--json", "-", "-q", "--no-cache"]) == 0
    helped = json.loads(capsys.readouterr().out)
    # THEN one worker was started (before the parse, which took it), it made some of the pieces, and the
    # answer is the one without it
    assert starts == [1] and taken == [True] and len(small_pieces) >= 2
    monkeypatch.setenv("STALLSCOPE_DECODE_WORKERS", "0")
    assert commands.main(["analyze", str(path), "--json", "-", "-q", "--no-cache"]) == 0
    assert helped == json.loads(capsys.readouterr().out)
    assert starts == [1]
    # AND `report` starts it early too (before importing the report's modules)
    monkeypatch.setenv("STALLSCOPE_DECODE_WORKERS", "1")
    assert commands.main(["report", str(path), "-o", str(tmp_path / "r.html"), "-q", "--no-cache"]) == 0
    assert starts == [1, 1] and taken == [True, True] and (tmp_path / "r.html").stat().st_size > 0


@needs_fork
def test_early_decode_workers_the_parse_does_not_take_are_stopped(
    tmp_path: Path, small_pieces: list[int], starts: list[int]
) -> None:
    from stallscope.analyzer.load import decode_pool
    from stallscope.analyzer.load.loader import start_decoding

    # GIVEN a decode worker started early for one trace
    first = write_trace_file(tmp_path / "first.pt.trace.json", big_document(2000))
    other = write_trace_file(tmp_path / "other.pt.trace.json", big_document(300))
    start_decoding(first, use_cache=False, workers=1)
    (early,) = decode_pool._early
    # WHEN another trace is loaded
    helped = load_one(other, use_cache=False, workers=1)
    # THEN that worker was stopped before its pieces could be taken for the wrong file, and the other trace
    # had its own worker
    assert not decode_pool._early and all(not w.process.is_alive() for w in early.pool)
    assert starts == [1, 1]
    assert_same_model(helped, load_one(other, use_cache=False))


@needs_fork
def test_no_decode_worker_starts_early_for_a_cached_model_or_a_small_file(
    tmp_path: Path, small_pieces: list[int], starts: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    from stallscope.analyzer.load import cache, decode_pool
    from stallscope.analyzer.load.loader import start_decoding

    # GIVEN a trace whose model is in the cache
    path = write_trace_file(tmp_path / "cached.pt.trace.json", big_document(300))
    load_one(path)
    cache.wait()
    asked = len(starts)
    # WHEN its decode workers are started early THEN none starts: the load will read the cache
    start_decoding(path, workers=1)
    assert len(starts) == asked and not decode_pool._early
    # nor for a file too small for workers, nor with none asked for
    with monkeypatch.context() as patch:
        patch.setattr(stallscope.analyzer.load.loader, "_WORKER_MIN_BYTES", path.stat().st_size + 1)
        start_decoding(path, use_cache=False, workers=1)
    start_decoding(path, use_cache=False, workers=0)
    assert len(starts) == asked and not decode_pool._early


@needs_fork
def test_a_decode_worker_that_dies_leaves_the_file_to_this_process(
    tmp_path: Path, small_pieces: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a decode worker that dies on its first piece
    import os

    import stallscope.analyzer.load.build

    parent = os.getpid()
    real = stallscope.analyzer.load.build.decode_batch

    def dies_in_the_worker(piece: Any, **options: Any) -> Any:
        if os.getpid() != parent:
            os._exit(3)
        return real(piece, **options)

    monkeypatch.setattr(stallscope.analyzer.load.build, "decode_batch", dies_in_the_worker)
    from stallscope.analyzer.load import decode_pool

    lost: list[str] = []

    class Lost(decode_pool.WorkerLost):
        def __init__(self, why: str) -> None:
            lost.append(why)
            super().__init__(why)

    monkeypatch.setattr(decode_pool, "WorkerLost", Lost)
    path = write_trace_file(tmp_path / "dies.pt.trace.json", big_document(300))
    # WHEN loaded with it
    helped = load_one(path, use_cache=False, workers=1)
    # THEN the worker's loss was seen, no part came from it, and this process parsed the file again alone:
    # the model is whole
    assert lost == ["a decode worker died"]
    assert small_pieces == []
    assert_same_model(helped, load_one(path, use_cache=False))


@needs_fork
def test_a_worker_whose_read_of_the_file_differs_makes_the_parts_unusable(tmp_path: Path) -> None:
    # GIVEN pieces read here, and a worker whose read of the file is cut differently (the file changed
    # between the reads): this process hands out its first piece only once the worker has made its own
    import time

    from stallscope.analyzer.load import decode_pool

    texts = [json.dumps([{"ph": "X", "name": "op", "ts": 0, "dur": 1, "pid": 1, "tid": 1}]).encode()]
    texts += [json.dumps([{"ph": "i", "name": "x", "ts": i, "pid": 1, "tid": 1}]).encode() for i in range(3)]
    marker = tmp_path / "worker-made-one"

    def here() -> Any:
        deadline = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        yield from map(memoryview, texts)

    def in_the_worker() -> Any:
        for i, text in enumerate(texts):
            yield memoryview(text + b" ")  # one byte longer than here
            if i == 0:
                marker.touch()  # asked for the next piece: the first is made

    n = len(texts[0])
    # WHEN their parts are put in order
    # THEN the worker's first piece is refused: its length is not the one read here
    with pytest.raises(decode_pool.WorkerLost, match=f"piece 0: {n + 1} bytes in a worker, {n} here"):
        list(decode_pool.parts_in_order(here(), 1, in_the_worker))


@needs_fork
def test_a_decode_worker_that_cannot_start_leaves_the_file_to_this_process(
    tmp_path: Path, small_pieces: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN decode workers that fail to start (as fork under ``-W error`` with threads would)
    from stallscope.analyzer.load import decode_pool

    def refuse(self: Any) -> None:
        raise DeprecationWarning("This process is multi-threaded, use of fork() may lead to deadlocks")

    monkeypatch.setattr(decode_pool._Worker, "__init__", refuse)
    path = write_trace_file(tmp_path / "alone.pt.trace.json", big_document(300))
    # WHEN loaded asking for a worker
    helped = load_one(path, use_cache=False, workers=1)
    # THEN no worker made a piece, and the model is the one this process builds alone
    assert small_pieces == []
    assert_same_model(helped, load_one(path, use_cache=False))


@needs_fork
def test_a_bad_piece_decoded_by_a_worker_falls_back_like_one_decoded_here(
    tmp_path: Path, small_pieces: list[int]
) -> None:
    # GIVEN a trace with a string timestamp in a later piece (the streaming decoder refuses it)
    path = write_trace_file(tmp_path / "bad.pt.trace.json", big_document(600, bad_ts_at=500))
    # WHEN loaded with a decode worker
    m = load_one(path, use_cache=False, workers=1)
    # THEN the whole-document decode took over, as without the worker: the bad event is counted
    assert small_pieces
    assert m.report.skipped == {"ts: not a number (str)": 1}
    assert m.event_count == 4 * 600


@pytest.mark.parametrize(("value", "expected"), [("0", 0), ("2", 2), ("-1", 0), ("many", 0)])
def test_decode_workers_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: int
) -> None:
    from stallscope.analyzer.load.decode_pool import default_workers

    monkeypatch.setenv("STALLSCOPE_DECODE_WORKERS", value)
    assert default_workers() == expected


def test_large_file_with_a_bad_event_falls_back_and_counts_it(tmp_path: Path) -> None:
    # GIVEN a > 1 MiB trace with a string timestamp deep inside (the streaming decoder rejects it)
    path = write_trace_file(tmp_path / "bad_ts.pt.trace.json", big_document(4000, bad_ts_at=3000))
    assert path.stat().st_size > 1 << 20
    # WHEN loaded
    m = load_one(path, use_cache=False)
    # THEN the whole-document fallback keeps every other event and counts the bad one
    assert m.event_count == 4 * 4000
    assert m.report.skipped == {"ts: not a number (str)": 1}
    assert (m.rank, len(m.steps)) == (3, 4000)


def test_large_file_with_event_separators_inside_names_loads_intact(tmp_path: Path) -> None:
    # GIVEN kernel names containing '}, {' (a batch cut there would split a string)
    tricky = 'void f<{lambda()#1}, {x}>"}, {"ph": "X"'
    path = write_trace_file(tmp_path / "names.pt.trace.json", big_document(3000, name=tricky))
    # WHEN loaded
    m = load_one(path, use_cache=False)
    # THEN every kernel has its full name and nothing was mis-parsed
    assert m.event_count == 4 * 3000
    assert int(np.count_nonzero(m.events.name == m.strings.index(tricky))) == 3000
    assert m.report.skipped == {} and m.report.unknown_phases == {}


# ----- the model cache --------------------------------------------------------------------------------


class CountingBuild:
    """Stands in for ``stallscope.analyzer.load.loader.build_model``: counts calls; ``refuse`` makes a call fail."""

    def __init__(self) -> None:
        self.calls = 0
        self.refuse = False

    def __call__(self, *args: Any, **kwargs: Any) -> TraceModel:
        if self.refuse:
            raise AssertionError("parsed although a cached model exists")
        self.calls += 1
        return build_model(*args, **kwargs)


@pytest.fixture
def counting_build(monkeypatch: pytest.MonkeyPatch) -> CountingBuild:
    spy = CountingBuild()
    monkeypatch.setattr(stallscope.analyzer.load.loader, "build_model", spy)
    return spy


def test_second_load_comes_from_the_cache(
    write_trace: WriteTrace, counting_build: CountingBuild, isolated_cache: Path
) -> None:
    # GIVEN a trace loaded once
    path = write_trace(minimal_trace(), "t.pt.trace.json.gz")
    first = load_file(path)
    assert counting_build.calls == 1
    cache.wait()  # the cache is written in the background
    # THEN the cache lives under XDG_CACHE_HOME, one entry with the model's columns
    root = cache.cache_root()
    assert root.is_relative_to(isolated_cache)
    entries = [p for p in root.iterdir() if p.name != "index"]
    assert len(entries) == 1 and (entries[0] / "events.parquet").is_file()
    # WHEN it is loaded again, with parsing forbidden
    counting_build.refuse = True
    second = load_file(path)
    # THEN the cached model is the same model
    assert_same_model(first, second)
    assert second.path == str(path) and second.format == "json.gz"


_CHILD_WRITER = """
import os, sys
from pathlib import Path
from stallscope.analyzer.load import cache
from stallscope.analyzer.load.loader import load_file
path = Path(sys.argv[1])
with cache.writes_in_a_child():
    model = load_file(path)
writer = next(iter(cache._pending.values()))
cache.wait()
print(type(writer).__name__, writer.pid != os.getpid(), "pyarrow" in sys.modules, len(cache._pending))
"""


@pytest.mark.skipif(
    not __import__("sys").platform.startswith("linux"), reason="the cache is written from a child on Linux"
)
def test_a_command_writes_the_cache_from_a_child_that_only_it_imports_pyarrow_in(
    write_trace: WriteTrace, counting_build: CountingBuild, isolated_cache: Path
) -> None:
    # GIVEN a trace loaded in a fresh process that writes its cache from a child (as the commands do)
    import subprocess
    import sys

    path = write_trace(minimal_trace(), "t.pt.trace.json.gz")
    done = subprocess.run(
        [sys.executable, "-c", _CHILD_WRITER, str(path)], capture_output=True, text=True, check=True
    )
    # THEN a child process wrote it, the process itself never imported pyarrow, and after the wait no
    # write is pending
    assert done.stdout.split() == ["_Child", "True", "False", "0"]
    # AND the entry is whole: a load here (parsing forbidden) gives the model a parse gives
    counting_build.refuse = True
    cached = load_file(path)
    counting_build.refuse = False
    assert_same_model(cached, load_file(path, use_cache=False))


def test_no_cache_parses_again(write_trace: WriteTrace, counting_build: CountingBuild) -> None:
    path = write_trace(minimal_trace())
    load_file(path)
    load_file(path, use_cache=False)
    load_file(path, use_cache=False)
    assert counting_build.calls == 3
    load_file(path)
    assert counting_build.calls == 3


def test_corrupted_cache_entry_is_ignored_and_rebuilt(
    write_trace: WriteTrace, counting_build: CountingBuild
) -> None:
    # GIVEN a cached model whose Parquet file was overwritten with garbage
    path = write_trace(minimal_trace())
    first = load_file(path)
    cache.wait()  # the cache is written in the background
    (entry,) = [p for p in cache.cache_root().iterdir() if p.name != "index"]
    (entry / "events.parquet").write_bytes(b"garbage, not parquet" * 10)
    # WHEN loaded again
    again = load_file(path)
    # THEN the trace is parsed again, with the same result
    assert counting_build.calls == 2
    assert_same_model(first, again)
    # ... and the entry was rebuilt: the next load needs no parsing
    counting_build.refuse = True
    assert_same_model(first, load_file(path))


def test_copy_at_another_path_hits_the_same_cache_entry(
    write_trace: WriteTrace, counting_build: CountingBuild, tmp_path: Path
) -> None:
    # GIVEN a loaded trace and a byte-identical copy elsewhere
    path = write_trace(minimal_trace(), "t.json.gz")
    first = load_file(path)
    copy = tmp_path / "elsewhere" / "copy.json.gz"
    copy.parent.mkdir()
    shutil.copyfile(path, copy)
    # WHEN the copy is loaded with parsing forbidden
    counting_build.refuse = True
    second = load_file(copy)
    # THEN it comes from the same (content-keyed) entry, under its own path
    assert_same_model(first, second)
    assert second.path == str(copy)


def test_changed_file_is_not_served_stale(write_trace: WriteTrace, counting_build: CountingBuild) -> None:
    path = write_trace(minimal_trace())
    assert load_file(path).event_count == 4
    doc = minimal_trace()
    doc["traceEvents"].append(span("cpu_op", "aten::extra", 2000, 5))
    write_trace(doc)
    assert load_file(path).event_count == 5
    assert counting_build.calls == 2


# ----- properties: nesting ------------------------------------------------------------------------------


@st.composite
def nested_program(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    """Properly nested intervals, as a program's call tree makes them: a random walk of open/close actions
    with integer time steps (zero-length events, shared starts and touching siblings included)."""
    actions = draw(st.lists(st.tuples(st.booleans(), st.integers(0, 3)), max_size=60))
    t, stack, out = 0, [], []
    for is_open, step in actions:
        t += step
        if is_open or not stack:
            stack.append(t)
        else:
            out.append((stack.pop(), t))
    while stack:
        t += draw(st.integers(0, 2))
        out.append((stack.pop(), t))
    return sorted_intervals(out)


def sorted_intervals(pairs: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    """(ts, end) arrays sorted as the model sorts events: by ts, longest first."""
    ts = np.array([s for s, _ in pairs], dtype=np.float64)
    end = np.array([e for _, e in pairs], dtype=np.float64)
    order = np.lexsort((-(end - ts), ts))
    return ts[order], end[order]


def stack_parents(ts: np.ndarray, end: np.ndarray) -> list[int]:
    """Reference: walk events in order with a stack of open events; an event ending at or before my
    start is closed."""
    parents, stack = [], []
    for i in range(len(ts)):
        while stack and end[stack[-1]] <= ts[i]:
            stack.pop()
        parents.append(stack[-1] if stack else NO_ID)
        stack.append(i)
    return parents


@settings(max_examples=300, deadline=None)
@given(nested_program())
def test_nest_sorted_matches_a_stack_on_nested_intervals(intervals_: tuple[np.ndarray, np.ndarray]) -> None:
    ts, end = intervals_
    assert _nest_sorted(ts, end).tolist() == stack_parents(ts, end)


@settings(max_examples=200, deadline=None)
@given(st.lists(nested_program(), min_size=1, max_size=3), st.data())
def test_nest_per_lane_matches_a_stack_and_skips_device_events(
    lanes: list[tuple[np.ndarray, np.ndarray]], data: st.DataObject
) -> None:
    # GIVEN several host threads' nested events plus device events interleaved, all sorted together
    rows = [
        (float(s), float(e), lane, True)
        for lane, (ts, end) in enumerate(lanes)
        for s, e in zip(ts, end, strict=True)
    ]
    device = data.draw(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 10)), max_size=10))
    rows += [(float(s), float(s + d), len(lanes), False) for s, d in device]
    rows.sort(key=lambda r: (r[0], -(r[1] - r[0])))
    ts = np.array([r[0] for r in rows])
    end = np.array([r[1] for r in rows])
    lane = np.array([r[2] for r in rows])
    host = np.array([r[3] for r in rows], dtype=np.bool_)
    # WHEN nested
    parent = nest(ts, end, lane, host)
    # THEN each host thread matches the stack reference; device events have no parent
    for k in range(len(lanes)):
        idx = np.flatnonzero(lane == k)
        expected = [idx[p] if p >= 0 else NO_ID for p in stack_parents(ts[idx], end[idx])]
        assert parent[idx].tolist() == expected
    assert np.all(parent[~host] == NO_ID)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 15)), max_size=40))
def test_nest_parents_are_open_and_earlier_on_arbitrary_intervals(raw: list[tuple[int, int]]) -> None:
    # GIVEN arbitrary (overlapping, not nested) intervals, e.g. from clock rounding
    ts, end = sorted_intervals([(s, s + d) for s, d in raw])
    # WHEN nested
    parent = _nest_sorted(ts, end)
    # THEN every parent comes earlier in the order, starts at or before the child and is still open then
    for i, p in enumerate(parent.tolist()):
        if p == NO_ID:
            continue
        assert 0 <= p < i
        assert ts[p] <= ts[i] < end[p]


# ----- properties: intervals ----------------------------------------------------------------------------

small_intervals = st.lists(st.tuples(st.integers(0, 30), st.integers(1, 8)), max_size=25)


def cells(pairs: list[tuple[int, int]]) -> set[int]:
    """Brute force: the unit cells [k, k+1) covered by half-open integer intervals."""
    return {k for s, e in pairs for k in range(s, e)}


def runs(covered: set[int]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for k in sorted(covered):
        if out and out[-1][1] == k:
            out[-1][1] = k + 1
        else:
            out.append([k, k + 1])
    return [(s, e) for s, e in out]


@settings(max_examples=300, deadline=None)
@given(small_intervals)
def test_union_equals_brute_force_cover(raw: list[tuple[int, int]]) -> None:
    pairs = [(s, s + d) for s, d in raw]
    s, e = intervals.union(
        np.array([p[0] for p in pairs], dtype=np.float64), np.array([p[1] for p in pairs], dtype=np.float64)
    )
    assert list(zip(s.tolist(), e.tolist(), strict=True)) == runs(cells(pairs))
    assert intervals.total(s, e) == len(cells(pairs))


@settings(max_examples=300, deadline=None)
@given(small_intervals, st.lists(st.tuples(st.integers(-5, 45), st.integers(0, 20)), min_size=1, max_size=8))
def test_covered_in_equals_brute_force(raw: list[tuple[int, int]], windows: list[tuple[int, int]]) -> None:
    pairs = [(s, s + d) for s, d in raw]
    s, e = intervals.union(
        np.array([p[0] for p in pairs], dtype=np.float64), np.array([p[1] for p in pairs], dtype=np.float64)
    )
    lo = np.array([w[0] for w in windows], dtype=np.float64)
    hi = np.array([w[0] + w[1] for w in windows], dtype=np.float64)
    covered = cells(pairs)
    expected = [
        len([k for k in covered if a <= k < b]) for a, b in zip(lo.astype(int), hi.astype(int), strict=True)
    ]
    assert intervals.covered_in(s, e, lo, hi).tolist() == expected


def test_union_of_nothing_and_clip() -> None:
    s, e = intervals.union(np.empty(0), np.empty(0))
    assert (len(s), len(e)) == (0, 0)
    assert intervals.covered_in(s, e, np.array([0.0, 5.0]), np.array([10.0, 6.0])).tolist() == [0.0, 0.0]
    cs, ce = intervals.clip(np.array([0.0, 5.0, 20.0]), np.array([4.0, 12.0, 30.0]), 3.0, 10.0)
    assert (cs.tolist(), ce.tolist()) == ([3.0, 5.0], [4.0, 10.0])


def test_load_of_a_missing_path_raises_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError) as info:
        load(tmp_path / "nope.json")
    assert info.value.problem == "no such file or directory"


@pytest.mark.parametrize("stream", [False, True], ids=["whole-document", "streaming"])
def test_unknown_top_level_keys_are_counted_not_fatal(
    write_trace: WriteTrace, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, stream: bool
) -> None:
    # GIVEN a trace with top-level keys stallscope does not read, before and after the event list
    doc = minimal_trace()
    doc = {"tw_job": "x", **doc, "tw_user": "h", "host_name": "known", "traceName": "t", "with_stack": True}
    monkeypatch.setattr(stallscope.analyzer.load.loader, "_STREAM_MIN_BYTES", 0 if stream else 1 << 40)
    if stream:
        request.getfixturevalue("no_whole_document_decode")  # prove the streaming path read it
    # WHEN loaded
    m = load_one(write_trace(doc), use_cache=False)
    # THEN the unknown ones are listed, the known ones are not, and the events load as usual
    assert m.report.unknown_keys == ("tw_job", "tw_user")
    assert m.event_count == len([e for e in minimal_trace()["traceEvents"] if e["ph"] in ("X", "i")])


def test_annotated_iterations_are_the_steps_when_there_is_no_profiler_step(write_trace: WriteTrace) -> None:
    # GIVEN a trace without ProfilerStep#N whose loop annotates "iteration#N" (and a nested "step_fn" and an
    # "Optimizer.step#SGD.step" that must not count), plus one kernel per iteration
    events: list[Event] = [
        span("user_annotation", "setup", 0, 50),
        span("user_annotation", "iteration#7", 100, 300),
        span("user_annotation", "Optimizer.step#SGD.step", 150, 20),
        span("user_annotation", "iteration#8", 400, 250),
        span("user_annotation", "train_step 8", 410, 100),  # nested inside iteration#8: not a new iteration
        *launch_pair(120, 1, 130, 40, ext=1),
        *launch_pair(420, 2, 430, 60, ext=2),
    ]
    # WHEN loaded and analysed
    m = load_one(write_trace(document(events)), use_cache=False)
    # THEN the annotated iterations are the steps and the window spans them
    assert [(s.name, s.number, s.start_us, s.end_us) for s in m.steps] == [
        ("iteration#7", 7, 100.0, 400.0),
        ("iteration#8", 8, 400.0, 650.0),
    ]
    from stallscope.analyzer.passes.window import find_window

    w = find_window(m)
    assert (w.start_us, w.end_us, w.basis.value) == (100.0, 650.0, "steps")
