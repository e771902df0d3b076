"""Many devices judged at once: the gaps, busy time and launch latency of every device come from one
pass over all of them (``passes.gaps.device_gaps``, ``passes.window.busy_by_device``). An 8,000-device
trace analyses to the numbers its construction gives, and real traces spread over several devices give
each device the gaps the one-gap-at-a-time reference gives it alone. (Speed: ``benchmarks/bench_lanes.py``.)"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from test_gaps_fast import reference_gaps
from test_many_lanes import EVERY_US, KERNEL_AT, KERNEL_US, analysed

from stallscope.analyzer.analysis import analyze
from stallscope.analyzer.core.model import TraceModel
from stallscope.analyzer.graph.dependency import build_graph
from stallscope.analyzer.graph.inputs import input_intervals, untraced_intervals
from stallscope.analyzer.load.loader import load, load_file
from stallscope.analyzer.passes import gaps
from stallscope.analyzer.passes.gaps import MIN_GAP_US, Cause, device_gaps
from stallscope.analyzer.passes.window import busy_by_device, busy_intervals, device_usage, find_window

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
_DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def test_8000_kernels_each_on_its_own_device(tmp_path: Path) -> None:
    # GIVEN 8,000 kernels of 10 µs, 20 µs apart, each on its own device, launched by one thread
    n = 8000
    a = analysed(tmp_path, n, "devices")
    wall = EVERY_US * (n - 1) + KERNEL_AT + KERNEL_US
    # THEN each device ran one kernel and sat idle the rest of the window
    assert (a.window.start_us, a.window.end_us) == (0.0, wall)
    assert [(d.id, d.activities, d.busy_us, d.compute_us) for d in a.devices] == [
        (i, 1, KERNEL_US, KERNEL_US) for i in range(n)
    ]
    assert all(d.idle_us == pytest.approx(wall - KERNEL_US) for d in a.devices)
    # each device's gaps: before its kernel (device 0's 8 µs is below the smallest gap) and after it
    # (none after the last device's, which ends the window), in device order, then time order
    expected = []
    for i in range(n):
        kernel_at = EVERY_US * i + KERNEL_AT
        expected += [(i, 0.0, kernel_at)] if i else []
        expected += [(i, kernel_at + KERNEL_US, wall)] if i < n - 1 else []
    assert [(g.device, g.start_us, g.end_us) for g in a.gaps] == expected
    # every gap is the host's: the thread launched each kernel only after its device's gap began, and
    # after a device's kernel no work followed while the thread went on with its own
    details = {(g.start_us == 0.0, g.cause, g.detail) for g in a.gaps}
    assert details == {
        (True, Cause.HOST, "host busy in aten::add"),
        (False, Cause.HOST, "host busy in aten::add (no device work followed)"),
    }
    # the summary is the main device's: the busiest, the lowest id on a tie
    assert a.main_device == 0
    assert a.idle_by_cause[Cause.HOST] == wall - KERNEL_AT - KERNEL_US  # device 0's gap after its kernel
    assert sum(a.idle_by_cause.values()) == a.idle_by_cause[Cause.HOST]
    assert a.summary.critical_path_us == pytest.approx(wall)


def spread(events: list[dict[str, Any]], devices: int) -> list[dict[str, Any]]:
    """The events with each stream's work moved to a device of its own: device ``pid * 10 + stream %
    devices`` (flows into the work move with it)."""
    gpu = {e.get("pid") for e in events if e.get("cat") in _DEVICE_CATS}
    out = []
    for e in events:
        if e.get("pid") in gpu and e.get("ph") != "M" and isinstance(e["pid"], int):
            tid = e.get("tid", 0)
            moved = e["pid"] * 10 + (tid if isinstance(tid, int) else len(str(tid))) % devices
            e = {**e, "pid": moved}
            if isinstance(e.get("args"), dict) and "device" in e["args"]:
                e["args"] = {**e["args"], "device": moved}
        out.append(e)
    return out


def spread_model(source: Path, folder: Path, devices: int) -> TraceModel:
    doc = json.loads(gzip.decompress(source.read_bytes()))
    path = folder / "spread.json"
    path.write_text(json.dumps({**doc, "traceEvents": spread(doc["traceEvents"], devices)}))
    return load_file(path, use_cache=False)


def same_as_reference(model: TraceModel, min_gap_us: float) -> int:
    """Asserts that ``device_gaps`` over every device gives each device the reference's report; the
    number of devices."""
    window = find_window(model)
    ids = [d.id for d in device_usage(model, window)]
    inputs, untraced = input_intervals(model), untraced_intervals(model)
    g = build_graph(model)
    start, end = window.start_us, window.end_us
    found = device_gaps(
        model, g, ids, busy_by_device(model, ids, window), start, end, inputs, min_gap_us, untraced
    )
    every = []
    for d in ids:
        busy = busy_intervals(model, d, window)
        reference = reference_gaps(model, g, d, busy, start, end, inputs, min_gap_us, untraced)
        assert repr(found.report(d)) == repr(reference)  # the same floats, to the last bit
        every += reference.gaps
    assert found.gaps == tuple(every)
    return len(ids)


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.json.gz")), ids=lambda p: p.name.split(".")[0])
def test_sample_traces_spread_over_devices_give_each_device_its_gaps(tmp_path: Path, path: Path) -> None:
    # GIVEN a sample trace (syncs, data loading, copies, two streams) whose streams are moved onto devices
    model = spread_model(path, tmp_path, 3)
    # THEN every device's gaps are those the reference gives it alone
    for min_gap_us in (MIN_GAP_US, 0.0):
        assert same_as_reference(model, min_gap_us) == 2


@pytest.mark.parametrize(
    "name",
    [
        "hta_a100_alexnet_cuda_sync.pt.trace.json.gz",
        "hta_a100_multistream_event_sync.pt.trace.json.gz",
        "field/tracelens_sglang_qwen3_decode.pt.trace.json.gz",
    ],
)
def test_real_traces_spread_over_devices_give_each_device_its_gaps(
    shared_traces: Path, tmp_path: Path, name: str
) -> None:
    # GIVEN a real trace whose streams are moved onto two or three devices (syncs, waits on other
    # streams, launch latency: each device now has its own)
    model = spread_model(shared_traces / name, tmp_path, 3)
    # THEN every device's gaps are those the reference gives it alone
    assert same_as_reference(model, MIN_GAP_US) >= 2
    assert same_as_reference(model, 1.0) >= 2


def test_devices_without_work_or_a_launching_thread(tmp_path: Path) -> None:
    # GIVEN a device whose kernel no call launched, beside one launched as usual
    doc = {
        "traceEvents": [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 0,
             "dur": 5, "args": {"correlation": 1}},
            {"ph": "X", "cat": "kernel", "name": "k0", "pid": 0, "tid": 7, "ts": 100, "dur": 10,
             "args": {"device": 0, "stream": 7, "correlation": 1}},
            {"ph": "X", "cat": "kernel", "name": "k1", "pid": 1, "tid": 7, "ts": 40, "dur": 10,
             "args": {"device": 1, "stream": 7}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 100},
        ]
    }  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    a = analyze(load(path, use_cache=False))
    # THEN each device's gaps are judged with its own facts: device 0's launch latency is measured on its
    # own launch (a plausible 100 µs); device 1's kernel has no launch call, and its driving thread (the
    # one that issued most calls) was busy in aten::mm
    assert [(g.device, g.start_us, g.end_us, g.cause, g.detail) for g in a.gaps] == [
        (0, 0.0, 100.0, Cause.LAUNCH, "cudaLaunchKernel started 100.0 µs before its work ran"),
        (1, 0.0, 40.0, Cause.HOST, "host busy in aten::mm (the launch of k1 is not in the trace)"),
        (1, 50.0, 110.0, Cause.HOST, "host busy in aten::mm (no device work followed)"),
    ]
    assert [(d.id, d.busy_us, d.idle_us) for d in a.devices] == [(0, 10.0, 100.0), (1, 10.0, 100.0)]


def test_a_call_that_waited_on_two_devices_charges_each_its_own_budget() -> None:
    # GIVEN one blocking call (it waited 100 µs) whose lead is on two devices, and three gaps of 40 µs on
    # each device after what it waited for completed (at 10 µs)
    call = 0
    g = SimpleNamespace(call_awaited=np.array([10.0]))
    shared = SimpleNamespace(leads={5: [call], 7: [call]}, waited=np.array([100.0]))
    index = SimpleNamespace(devices=[5, 7])
    leads = gaps._Leads(g, index, shared)
    dev = np.array([0, 0, 0, 1, 1, 1])
    lo = np.array([20.0, 70.0, 120.0, 20.0, 70.0, 120.0])
    # WHEN the gaps are charged THEN each device spends the call's 100 µs on its own gaps: 40, 40, 20
    lead, charge = leads.charges(dev, lo, lo + 40.0)
    assert lead.tolist() == [call] * 6
    assert charge.tolist() == [40.0, 40.0, 20.0, 40.0, 40.0, 20.0]
