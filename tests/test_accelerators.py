"""Accelerators other than CUDA/HIP and CUPTI's range-profiler mode are device work (GIVEN / WHEN / THEN).

Hand-built traces in the shapes MTIA (``mtia_runtime`` / ``mtia_ccp_events``) and CUPTI range profiling
(``cuda_profiler_range``) write: device activity must land on device lanes, runtime calls must be
classified as launches and syncs, and the analysis must not call such a trace CPU-only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from _kineto import HOST, Event, WriteTrace, document, span

from stallscope.analyzer.analysis import analyze_model
from stallscope.analyzer.core.model import LaneKind, TraceModel
from stallscope.analyzer.core.names import ApiKind, EventKind, api_kind, command_kind, event_kind
from stallscope.analyzer.load.loader import load

MTIA = 17  # the device's pid, as MTIA traces write it


def ccp(name: str, ts: float, dur: float, stream: int, **args: object) -> Event:
    """A command-processor event on the device's process, one thread per stream."""
    return {
        "ph": "X",
        "cat": "mtia_ccp_events",
        "name": name,
        "pid": MTIA,
        "tid": 3000 + stream,
        "ts": ts,
        "dur": dur,
        "args": {"stream": stream, **args},
    }


def mtia_doc() -> dict[str, object]:
    events: list[Event] = [
        span("cpu_op", "aten::linear", 0, 60),
        span(
            "mtia_runtime",
            "runFunction - job_prep_and_submit_for_execution",
            5,
            10,
            correlation=1,
            device=MTIA,
        ),
        span("mtia_runtime", "enqueueCommand memcpyDtoHAsync", 20, 2, correlation=2, device=MTIA),
        span("mtia_runtime", "synchronizeStream", 30, 400, correlation=3, device=MTIA, stream_id=5),
        ccp("merge", 40, 300, 5, correlation=1),
        ccp("dma_request", 350, 20, 5, correlation=2, direction="DEVICE_TO_HOST", size=1024),
        ccp("event_wait", 10, 25, 6, wait_on_stream=5),
        # the device side of the stream synchronize, written on the device's own process
        {
            "ph": "X",
            "cat": "mtia_runtime",
            "name": "synchronize",
            "pid": MTIA,
            "tid": 2999,
            "ts": 428,
            "dur": 1,
            "args": {"correlation": 3, "device": MTIA, "stream_id": "5"},
        },
        {"ph": "M", "name": "process_labels", "pid": MTIA, "tid": 0, "args": {"labels": "MTIA 17"}},
    ]
    return document(events, deviceProperties=[{"id": MTIA, "name": "ARTEMIS"}])


def test_category_families_map_to_kinds() -> None:
    assert event_kind("mtia_runtime") == EventKind.RUNTIME
    assert event_kind("xpu_driver") == EventKind.DRIVER
    assert event_kind("cuda_profiler_range") == EventKind.KERNEL
    assert event_kind("some_new_thing") == EventKind.OTHER
    assert [command_kind(n) for n in ("pe_exe", "merge", "dma_request", "event_wait", "event_record")] == [
        EventKind.KERNEL,
        EventKind.KERNEL,
        EventKind.MEMCPY,
        EventKind.SYNC,
        EventKind.SYNC,
    ]


def test_other_runtimes_calls_are_classified_by_name() -> None:
    assert api_kind("synchronizeStream") == ApiKind.SYNC_STREAM
    assert api_kind("synchronize") == ApiKind.SYNC_DEVICE
    assert api_kind("recordEvent") == ApiKind.EVENT_RECORD
    assert api_kind("enqueueCommand waitOnEvent") == ApiKind.STREAM_WAIT
    assert api_kind("enqueueCommand memcpyHtoDAsync") == ApiKind.MEMCPY
    assert api_kind("runFunction - job_prep_and_submit_for_execution") == ApiKind.LAUNCH
    assert api_kind("urEnqueueKernelLaunch") == ApiKind.LAUNCH
    assert api_kind("urEventWait") == ApiKind.SYNC_EVENT  # the host waits
    assert api_kind("urEnqueueEventsWait") == ApiKind.STREAM_WAIT  # the queue waits
    assert api_kind("urQueueFinish") == ApiKind.SYNC_STREAM
    assert api_kind("predictor_executor::run") == ApiKind.NONE
    assert api_kind("cudaStreamIsCapturing") == ApiKind.NONE  # CUDA names keep their own rules


def load_one(path: Path) -> TraceModel:
    traces = load(path, use_cache=False)
    assert len(traces.models) == 1
    return traces.models[0]


def test_mtia_activity_is_device_work_linked_to_its_runtime_calls(write_trace: WriteTrace) -> None:
    # GIVEN an MTIA trace: a submitted job (merge) and a copy on stream 5, a wait on stream 6
    m = load_one(write_trace(mtia_doc()))
    ev = m.events
    names = [m.name_of(i) for i in range(len(ev))]
    kind = dict(zip(names, ev.kind.tolist(), strict=True))
    # THEN execution is a kernel, the DMA a copy, the stream-side wait and the device-side sync records
    assert kind["merge"] == EventKind.KERNEL and kind["dma_request"] == EventKind.MEMCPY
    assert kind["event_wait"] == EventKind.SYNC and kind["synchronize"] == EventKind.SYNC
    # ... on stream lanes of device 17, each linked to the runtime call with its correlation
    merge, dma, sync_record = names.index("merge"), names.index("dma_request"), names.index("synchronize")
    lanes = {(m.lanes[int(ev.lane[i])].kind, m.lanes[int(ev.lane[i])].device) for i in (merge, dma)}
    assert lanes == {(LaneKind.STREAM, MTIA)}
    assert m.lanes[int(ev.lane[merge])].label == "MTIA 17 stream 5"  # the device's own label, not "GPU"
    assert names[int(ev.launch[merge])] == "runFunction - job_prep_and_submit_for_execution"
    assert names[int(ev.launch[dma])] == "enqueueCommand memcpyDtoHAsync"
    assert names[int(ev.launch[sync_record])] == "synchronizeStream"
    assert m.lanes[int(ev.lane[sync_record])].stream == 5  # from its stream_id
    assert [d.name for d in m.devices] == ["ARTEMIS"]
    assert [lane.kind for lane in m.lanes].count(LaneKind.HOST) == 1  # no host lane on the device's pid
    # ... and the analysis sees the device busy for the union of merge and the copy, and the sync
    a = analyze_model(m)
    assert a.summary.device_busy_us == 320.0
    assert a.summary.device_utilization > 0
    assert a.summary.host_sync_wait_us > 0


def test_range_profiler_ranges_are_device_time(write_trace: WriteTrace) -> None:
    # GIVEN CUPTI range-profiler mode: kernels launched, device time only as ranges with metric args
    events: list[Event] = [
        span("cuda_runtime", "cudaLaunchKernel", 0, 5, correlation=1),
        span("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=2),
        span("cuda_runtime", "cudaDeviceSynchronize", 20, 200, correlation=3),
    ]
    for i, ts in enumerate((100.0, 150.0)):
        events.append(
            {
                "ph": "X",
                "cat": "cuda_profiler_range",
                "name": f"kernel_{i}",
                "pid": 0,
                "tid": 0,
                "ts": ts,
                "dur": 50,
                "args": {"smsp__inst_executed.sum": 1000 * (i + 1)},
            }
        )
    m = load_one(write_trace(document(events)))
    # THEN the ranges are kernels on GPU 0 and the device is 100 us busy
    ranges = np.flatnonzero(m.events.kind == EventKind.KERNEL)
    assert len(ranges) == 2
    assert {m.lanes[int(lane)].kind for lane in m.events.lane[ranges]} == {LaneKind.STREAM}
    assert m.report.unknown_categories == {}
    a = analyze_model(m)
    assert a.summary.device_busy_us == 100.0
    assert [d.id for d in a.devices] == [0]
    assert HOST in {int(lane.pid) for lane in m.lanes if lane.kind == LaneKind.HOST}


def test_runtime_calls_stay_calls_when_kernels_share_the_host_pid(write_trace: WriteTrace) -> None:
    # GIVEN a trace that writes its kernels under the host's own pid (stream as tid)
    events: list[Event] = [
        span("cpu_op", "aten::add", 0, 20),
        span("cuda_runtime", "cudaLaunchKernel", 5, 8, correlation=1),
        {
            "ph": "X",
            "cat": "kernel",
            "name": "add_kernel",
            "pid": HOST,
            "tid": 7,
            "ts": 30,
            "dur": 5,
            "args": {"device": 0, "stream": 7, "correlation": 1},
        },
    ]
    m = load_one(write_trace(document(events)))
    # THEN the launch is still a host API call that launched the kernel
    names = [m.name_of(i) for i in range(m.event_count)]
    launch, kern = names.index("cudaLaunchKernel"), names.index("add_kernel")
    assert m.events.kind[launch] == EventKind.RUNTIME
    assert int(m.events.launch[kern]) == launch
