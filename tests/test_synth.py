"""Tests of the synthetic Kineto trace builder (``tests/synth``).

The written JSON is parsed with the stdlib and checked against the simulated timings; no analyzer import.
"""

from __future__ import annotations

import gzip
import importlib.util
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from synth import library as sc
from synth.trace import ExpectedSyncKind, RuntimeCosts, SynthTrace, WhatIfKnobs

BASE = 1_700_000_000_000
SAMPLES_DIR = Path(__file__).resolve().parent.parent / "sample_traces"

Event = dict[str, Any]


def written(s: SynthTrace, tmp_path: Path, name: str = "t.pt.trace.json.gz") -> dict[str, Any]:
    path = s.write(tmp_path / name)
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc: dict[str, Any] = json.load(f)
    return doc


def events(doc: dict[str, Any], **match: Any) -> list[Event]:
    return [e for e in doc["traceEvents"] if all(e.get(k) == v for k, v in match.items())]


def one(doc: dict[str, Any], **match: Any) -> Event:
    found = events(doc, **match)
    assert len(found) == 1, (match, found)
    return found[0]


def end(e: Event) -> float:
    return float(e["ts"]) + float(e["dur"])


# ----- document shape --------------------------------------------------------------------------------------


def test_document_has_kineto_top_level_keys_and_metadata(tmp_path: Path) -> None:
    s = SynthTrace("shape", rank=3, world_size=8)
    with s.step(), s.op("aten::mm"):
        s.launch("gemm", 10)
    doc = written(s, tmp_path)

    assert doc["schemaVersion"] == 1
    assert doc["displayTimeUnit"] == "ms"
    assert isinstance(doc["baseTimeNanoseconds"], int)
    assert doc["traceName"] == "shape.pt.trace.json"
    assert [d["id"] for d in doc["deviceProperties"]] == [0]
    assert doc["distributedInfo"]["rank"] == 3 and doc["distributedInfo"]["world_size"] == 8
    assert one(doc, ph="M", name="process_labels", pid=4242)["args"] == {"labels": "CPU"}
    assert one(doc, ph="M", name="process_labels", pid=0)["args"] == {"labels": "GPU 0"}
    assert one(doc, ph="M", name="thread_name", pid=0, tid=7)["args"] == {"name": "stream 7 "}
    assert one(doc, ph="M", name="thread_name", pid=4242, tid=4242)["args"] == {
        "name": "thread 4242 (python3)"
    }
    trace = one(doc, cat="Trace")
    assert trace["pid"] == "Spans" and trace["ts"] == BASE and trace["dur"] == s.makespan_us
    assert one(doc, ph="i", name="Iteration Start: PyTorch Profiler")["ts"] == BASE
    assert one(doc, ph="i", name="Record Window End")["ts"] > BASE + s.makespan_us


def test_plain_json_and_gzip_hold_the_same_document(tmp_path: Path) -> None:
    s = sc.item_in_loop(steps=2)
    assert written(s, tmp_path, "a.json") == written(s, tmp_path, "a.json.gz")


def test_output_is_byte_identical_across_runs(tmp_path: Path) -> None:
    a = sc.multistream_overlap().write(tmp_path / "a.json.gz").read_bytes()
    b = sc.multistream_overlap().write(tmp_path / "b.json.gz").read_bytes()
    assert a == b


# ----- launches, links and stream order ---------------------------------------------------------------------


def test_launch_links_runtime_kernel_and_flow_by_correlation_and_external_id(tmp_path: Path) -> None:
    # GIVEN an aten op that launches one kernel at t=0 with the default costs
    s = SynthTrace()
    with s.op("aten::mm"):
        corr = s.launch("gemm", 100)
    doc = written(s, tmp_path)

    op = one(doc, cat="cpu_op", name="aten::mm")
    rt = one(doc, cat="cuda_runtime", name="cudaLaunchKernel")
    k = one(doc, cat="kernel")
    # THEN runtime and kernel share the correlation and the op's External id
    assert rt["args"]["correlation"] == k["args"]["correlation"] == corr
    assert rt["args"]["External id"] == k["args"]["External id"] == op["args"]["External id"]
    assert rt["args"]["cbid"] == 211
    assert (k["pid"], k["tid"], k["args"]["stream"], k["args"]["device"]) == (0, 7, 7, 0)
    # AND the runtime call nests in the op; the kernel starts one launch latency after the call
    assert op["ts"] <= rt["ts"] and end(rt) <= end(op)
    assert rt["dur"] == 5 and k["ts"] == rt["ts"] + 5 and k["dur"] == 100
    # AND the ac2g flow goes from the call (s) to the kernel (f, bp e)
    s_flow = one(doc, ph="s", id=corr)
    f_flow = one(doc, ph="f", id=corr)
    assert (s_flow["pid"], s_flow["tid"], s_flow["ts"], s_flow["cat"]) == (4242, 4242, rt["ts"], "ac2g")
    assert (f_flow["pid"], f_flow["tid"], f_flow["ts"], f_flow["bp"]) == (0, 7, k["ts"], "e")


def test_runtime_call_outside_any_op_has_no_external_id(tmp_path: Path) -> None:
    s = SynthTrace()
    s.launch("gemm", 10)
    doc = written(s, tmp_path)
    assert "External id" not in one(doc, cat="cuda_runtime")["args"]
    assert "External id" not in one(doc, cat="kernel")["args"]


def test_stream_runs_kernels_in_fifo_order_and_streams_overlap(tmp_path: Path) -> None:
    # GIVEN three 100 µs kernels launched back to back on stream 7 and one on stream 20
    s = SynthTrace()
    for _ in range(3):
        s.launch("k7", 100)
    s.launch("k20", 50, stream=20)
    doc = written(s, tmp_path)

    k7 = sorted(events(doc, cat="kernel", tid=7), key=lambda e: e["args"]["correlation"])
    # THEN the first starts at launch + 5 µs, each next one when the previous ends
    assert [e["ts"] - BASE for e in k7] == [5, 105, 205]
    # AND stream 20's kernel does not wait for stream 7 (launched at 15 µs)
    assert one(doc, cat="kernel", tid=20)["ts"] - BASE == 20
    assert s.busy_intervals == [(5.0, 305.0)]


def test_correlation_ids_are_unique_and_every_device_record_has_its_runtime_call(tmp_path: Path) -> None:
    doc = written(sc.multistream_overlap(), tmp_path)
    runtime = events(doc, cat="cuda_runtime")
    corrs = [e["args"]["correlation"] for e in runtime]
    assert len(corrs) == len(set(corrs))
    device = [
        e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync")
    ]
    assert device and {e["args"]["correlation"] for e in device} <= set(corrs)
    assert all(e["dur"] >= 0 for e in doc["traceEvents"] if e.get("ph") == "X")


# ----- copies and syncs -------------------------------------------------------------------------------------


def test_pinned_copy_returns_at_once_but_pageable_copy_waits_for_the_stream_first(tmp_path: Path) -> None:
    s = SynthTrace()
    s.launch("busy", 1000)  # the copies queue behind this kernel
    s.memcpy("HtoD", 1 << 20, 100, pinned=True, non_blocking=True)
    s.memcpy("HtoD", 1 << 20, 100, pinned=False, non_blocking=True)
    doc = written(s, tmp_path)

    pinned, pageable = sorted(events(doc, cat="gpu_memcpy"), key=lambda e: e["ts"])
    assert pinned["name"] == "Memcpy HtoD (Pinned -> Device)"
    assert pageable["name"] == "Memcpy HtoD (Pageable -> Device)"
    assert pinned["args"]["bytes"] == 1 << 20 and pinned["args"]["stream"] == 7
    calls = sorted(events(doc, name="cudaMemcpyAsync"), key=lambda e: e["ts"])
    assert calls[0]["dur"] == 5
    # the pageable call waits for the stream's earlier work (the kernel, then the pinned copy), stages the
    # data and returns (+2 µs); only then is its DMA issued (+5 µs launch latency), as CUDA does
    assert end(calls[1]) == end(pinned) + 2 == 1_700_000_001_107
    assert pageable["ts"] == end(calls[1]) + 5
    (sync,) = s.syncs
    assert sync.kind is ExpectedSyncKind.PAGEABLE_COPY and sync.api == "cudaMemcpyAsync"
    assert sync.wait_us == calls[1]["dur"] == pytest.approx(1107 - 10)


def test_item_emits_the_torch_call_chain_and_counts_as_one_scalar_read_sync(tmp_path: Path) -> None:
    # GIVEN a 500 µs kernel and then .item()
    s = SynthTrace()
    with s.op("aten::sum"):
        s.launch("reduce", 500)
    s.item()
    doc = written(s, tmp_path)

    item = one(doc, name="aten::item")
    dense = one(doc, name="aten::_local_scalar_dense")
    copy_call = one(doc, name="cudaMemcpyAsync")
    stream_sync = one(doc, name="cudaStreamSynchronize")
    copy = one(doc, cat="gpu_memcpy")
    assert item["ts"] < dense["ts"] <= copy_call["ts"] < stream_sync["ts"] and end(stream_sync) <= end(dense)
    assert (
        copy_call["args"]["External id"] == stream_sync["args"]["External id"] == dense["args"]["External id"]
    )
    assert copy["name"] == "Memcpy DtoH (Device -> Pageable)" and copy["args"]["bytes"] == 4
    # THEN the copy waits behind the kernel and the blocking memcpy call covers it
    assert copy["ts"] == one(doc, cat="kernel")["ts"] + 500
    assert end(copy_call) == end(copy) + 2
    cs = one(doc, cat="cuda_sync")
    assert (cs["name"], cs["args"]["cuda_sync_kind"]) == ("Stream Sync", "Stream Sync")
    assert (cs["tid"], cs["args"]["stream"]) == (7, 7)
    (sync,) = s.syncs
    assert (
        sync.kind is ExpectedSyncKind.SCALAR_READ
        and sync.op == "aten::item"
        and sync.api == "cudaMemcpyAsync"
    )
    assert [c.api for c in sync.calls] == ["cudaMemcpyAsync", "cudaStreamSynchronize"]
    assert sync.wait_us == copy_call["dur"] + stream_sync["dur"]


def test_synchronize_waits_for_every_stream_and_records_a_context_sync(tmp_path: Path) -> None:
    s = SynthTrace()
    s.launch("short", 100, stream=7)
    s.launch("long", 900, stream=20)
    s.synchronize()
    doc = written(s, tmp_path)

    call = one(doc, name="cudaDeviceSynchronize")
    long_kernel = one(doc, name="long")
    assert call["args"]["cbid"] == 165
    assert end(call) == end(long_kernel) + 2
    ctx = one(doc, cat="cuda_sync")
    assert (ctx["name"], ctx["pid"], ctx["tid"], ctx["args"]["stream"]) == ("Context Sync", 0, -1, -1)
    assert call["ts"] <= ctx["ts"] and end(ctx) <= end(call)
    assert one(doc, ph="f", id=call["args"]["correlation"])["tid"] == -1
    assert s.syncs[0].kind is ExpectedSyncKind.BLANKET and s.syncs[0].blocked_us == end(call) - call["ts"] - 3


def test_sync_with_nothing_queued_costs_only_its_own_time(tmp_path: Path) -> None:
    s = SynthTrace()
    s.synchronize()
    doc = written(s, tmp_path)
    assert one(doc, name="cudaDeviceSynchronize")["dur"] == 3
    assert s.syncs[0].blocked_us == 0


def test_event_record_wait_and_event_synchronize(tmp_path: Path) -> None:
    # GIVEN a copy on stream 20 recorded by an event, stream 7 waiting on it, then a kernel on 7
    s = SynthTrace()
    s.memcpy("HtoD", 1 << 20, 400, stream=20)
    ev = s.event_record(20)
    s.stream_wait_event(7, ev)
    s.launch("compute", 100, stream=7)
    s.event_synchronize(s.event_record(7))
    doc = written(s, tmp_path)

    copy = one(doc, cat="gpu_memcpy")
    kernel = one(doc, cat="kernel")
    # THEN the kernel starts when the copy ends, not at its launch + 5 µs
    assert kernel["ts"] == end(copy)
    assert s.activities[-1].bound_by == "event"
    record = events(doc, name="cudaEventRecord")[0]
    assert record["args"]["correlation"] == ev.correlation
    assert [f["ph"] for f in events(doc, id=ev.correlation)] == ["f"]  # Kineto: host-side finish only
    wait = one(doc, cat="cuda_sync", name="Stream Wait Event")
    assert (wait["tid"], wait["args"]["stream"], wait["args"]["wait_on_stream"]) == (7, 7, 20)
    assert wait["args"]["wait_on_cuda_event_record_corr_id"] == ev.correlation
    es = one(doc, cat="cuda_sync", name="Event Sync")
    assert (es["tid"], es["args"]["stream"], es["args"]["wait_on_stream"]) == (-1, -1, 7)
    es_call = one(doc, name="cudaEventSynchronize")
    assert end(es_call) == end(kernel) + 2
    assert s.syncs[-1].kind is ExpectedSyncKind.EVENT


def test_memset_and_bad_memcpy_kind(tmp_path: Path) -> None:
    s = SynthTrace()
    s.memset(512, 2)
    doc = written(s, tmp_path)
    ms = one(doc, cat="gpu_memset")
    assert ms["name"] == "Memset (Device)" and ms["args"]["bytes"] == 512
    assert one(doc, name="cudaMemsetAsync")["args"]["cbid"] == 51
    with pytest.raises(ValueError, match="HtoD"):
        s.memcpy("HtoX", 1, 1)


# ----- host structure ------------------------------------------------------------


def test_steps_are_numbered_contiguous_user_annotations(tmp_path: Path) -> None:
    s = SynthTrace(first_step=7)
    for _ in range(3):
        with s.step():
            s.host("work", 100)
    doc = written(s, tmp_path)
    steps = sorted(
        (e for e in events(doc, cat="user_annotation") if e["name"].startswith("ProfilerStep#")),
        key=lambda e: e["ts"],
    )
    assert [e["name"] for e in steps] == ["ProfilerStep#7", "ProfilerStep#8", "ProfilerStep#9"]
    assert all(end(a) == b["ts"] for a, b in itertools.pairwise(steps))
    assert s.window == (0.0, 300.0) and [st.dur_us for st in s.steps] == [100, 100, 100]


def test_python_frames_form_a_tree_with_kineto_names(tmp_path: Path) -> None:
    s = SynthTrace()
    with (
        s.py_frame("train.py", 10, "main"),
        s.py_frame("train.py", 42, "train_step"),
        s.py_call("<built-in method item of Tensor object at 0x7f00>"),
    ):
        s.item()
    doc = written(s, tmp_path)
    frames = {e["name"]: e for e in events(doc, cat="python_function")}
    main, step, builtin = (
        frames[n] for n in ("train.py(10): main", "train.py(42): train_step", next(iter(frames)))
    )
    builtin = frames["<built-in method item of Tensor object at 0x7f00>"]
    assert main["args"]["Python parent id"] is None
    assert step["args"]["Python parent id"] == main["args"]["Python id"]
    assert builtin["args"]["Python parent id"] == step["args"]["Python id"]
    assert main["ts"] <= step["ts"] <= builtin["ts"] and end(builtin) <= end(step) <= end(main)
    assert doc["with_stack"] == 1
    # the innermost user frame is the call site (the builtin frame is skipped)
    site = s.syncs[0].call_site
    assert site is not None and (site.file, site.line, site.function) == ("train.py", 42, "train_step")


def test_data_loading_span_is_a_user_annotation_counted_as_input(tmp_path: Path) -> None:
    s = SynthTrace()
    with s.step():
        s.data_loading(1000)
        s.launch("k", 10)
    doc = written(s, tmp_path)
    span = one(doc, name=sc.DATALOADER_SPAN)
    assert span["cat"] == "user_annotation" and span["dur"] == 1000
    assert s.critical_path().breakdown_us["input"] == 1000


def test_second_host_thread_has_its_own_clock_and_lane(tmp_path: Path) -> None:
    s = SynthTrace()
    s.host("main_work", 100)
    with s.thread(99):
        s.host("side_work", 50)
    s.host("more_main", 10)
    doc = written(s, tmp_path)
    assert one(doc, name="side_work")["tid"] == 99 and one(doc, name="side_work")["ts"] == BASE + 100
    assert one(doc, name="more_main")["ts"] == BASE + 100
    assert one(doc, ph="M", name="thread_name", tid=99)["args"]["name"] == "thread 99 (python3)"


# ----- ground truth -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prep_ms", "pipelined", "model_us"),
    [(2, False, 24_000), (2, True, 20_000), (8, True, 30_000), (8, False, 42_000)],
)
def test_worked_example_matches_the_pipeline_model_within_one_percent(
    prep_ms: float, pipelined: bool, model_us: float
) -> None:
    s = sc.worked_example(prep_ms, 6, 3, pipelined=pipelined)
    assert len(s.steps) == 3
    assert s.window_us == pytest.approx(model_us, rel=0.01)
    pipe = s.pipeline()
    assert pipe is not None and pipe.batches == 3 and pipe.device_us == 6000
    assert pipe.host_prep_us == pytest.approx(prep_ms * 1000, rel=0.01)
    assert pipe.bottleneck == ("host" if prep_ms > 6 else "device")


def test_worked_example_serial_syncs_and_critical_path() -> None:
    s = sc.worked_example(2, 6, 3, pipelined=False)
    assert [(y.kind, y.avoidable, y.reasons) for y in s.syncs] == [
        (ExpectedSyncKind.BLANKET, True, ("blanket", "repeated"))
    ] * 3
    cp = s.critical_path()
    assert cp.length_us == s.window_us
    assert cp.breakdown_us["device"] == 18_000
    assert cp.breakdown_us["host"] == pytest.approx(6_000, rel=0.01)
    # removing the avoidable syncs gives the pipelined figure
    no_sync = sc.worked_example(
        2, 6, 3, pipelined=False, whatif=WhatIfKnobs(drop_waits=sc.DropWaits.AVOIDABLE)
    )
    assert no_sync.wall_us == pytest.approx(20_000, rel=0.01)


READY_MADE = [
    lambda: sc.worked_example(pipelined=False),
    lambda: sc.worked_example(pipelined=True),
    sc.launch_bound_loop,
    sc.item_in_loop,
    sc.pageable_copy_loop,
    sc.input_bound_loop,
    sc.multistream_overlap,
    sc.clean_pipeline,
]


@pytest.mark.parametrize("build", READY_MADE)
def test_every_ready_made_trace_is_self_consistent(build: Any) -> None:
    s: SynthTrace = build()
    cp = s.critical_path()
    assert cp.length_us == pytest.approx(s.window_us)
    assert sum(seg.end_us - seg.start_us for seg in cp.segments) == pytest.approx(s.window_us)
    assert all(a.end_us <= b.start_us + 1e-9 for a, b in itertools.pairwise(cp.segments))
    assert s.wall_us == s.window_us == s.makespan_us  # each ends with a sync inside its last step
    assert 0 < s.device_busy_us <= s.window_us
    assert sum(g.end_us - g.start_us for g in s.gaps(0.0)) == pytest.approx(s.window_us - s.device_busy_us)


def test_bottlenecks_and_sync_expectations_of_the_ready_made_traces() -> None:
    def bottleneck(s: SynthTrace) -> str:
        b = s.critical_path().breakdown_us
        return max(b, key=lambda k: b[k])

    assert bottleneck(sc.launch_bound_loop()) == "host"
    assert sc.launch_bound_loop().device_busy_us / sc.launch_bound_loop().window_us < 0.2
    assert bottleneck(sc.input_bound_loop()) == "input"
    assert {g.cause for g in sc.input_bound_loop().gaps()} == {"input"}
    assert bottleneck(sc.clean_pipeline()) == "device"
    assert [y.avoidable for y in sc.clean_pipeline().syncs] == [False]
    items = sc.item_in_loop(steps=3).syncs
    assert [y.kind for y in items] == [ExpectedSyncKind.SCALAR_READ] * 3 + [ExpectedSyncKind.BLANKET]
    assert {y.call_site for y in items[:3]} == {sc.UserFrame("train.py", 42, "train_step")}
    pageable = sc.pageable_copy_loop(steps=3).syncs
    assert [y.kind for y in pageable[:3]] == [ExpectedSyncKind.PAGEABLE_COPY] * 3
    assert all(y.blocked_us > 1000 for y in pageable[1:3])  # waits behind the previous step's kernels


def test_costs_are_configurable() -> None:
    s = SynthTrace(costs=RuntimeCosts(launch_cpu_us=1, launch_latency_us=20))
    s.launch("k", 10)
    (a,) = s.activities
    assert a.start_us == 20 and s.makespan_us == 30


# ----- committed samples ------------------------------------------------------------


def _make_samples() -> Any:
    spec = importlib.util.spec_from_file_location("make_samples", SAMPLES_DIR / "make_samples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_samples_are_up_to_date(tmp_path: Path) -> None:
    make = _make_samples()
    expected = json.loads((SAMPLES_DIR / "expected.json").read_text())
    assert set(expected) == set(make.SAMPLES)
    for name, (build, params, about) in make.SAMPLES.items():
        fresh = build(WhatIfKnobs()).write(tmp_path / name).read_bytes()
        assert (SAMPLES_DIR / name).read_bytes() == fresh, (
            f"{name} is stale: run sample_traces/make_samples.py"
        )
        assert (SAMPLES_DIR / name).stat().st_size < 200_000
        assert expected[name] == json.loads(json.dumps(make.expected_for(build, params, about)))
