"""Traces that spread their events over thousands of lanes (one kernel per stream, per device, or one
launch per host thread) analyse to the numbers their construction gives. The time this takes against the
number of lanes is measured in ``benchmarks/bench_lanes.py`` (docs/performance.md), not here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stallscope.analyzer.analysis import Analysis, analyze
from stallscope.analyzer.load.loader import load

KERNEL_US, EVERY_US, LAUNCH_AT, KERNEL_AT = 10.0, 20.0, 1.0, 8.0


def lanes_trace(n: int, shape: str) -> dict[str, Any]:
    """``n`` launches of a 10 µs kernel, 20 µs apart; each kernel on its own stream (``streams``), its own
    device (``devices``), or launched by its own host thread (``threads``)."""
    events: list[dict[str, Any]] = []
    for i in range(n):
        corr, t = i + 1, EVERY_US * i
        tid = 100 + i if shape == "threads" else 100
        device = i if shape == "devices" else 0
        stream = 7 + i if shape == "streams" else 7
        host = {"ph": "X", "pid": 100, "tid": tid}
        events.append(
            {**host, "cat": "cpu_op", "name": "aten::add", "ts": t, "dur": 10, "args": {"External id": corr}}
        )
        launch = {"correlation": corr, "External id": corr}
        events.append(
            {
                **host,
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "ts": t + LAUNCH_AT,
                "dur": 5,
                "args": launch,
            }
        )
        kernel = {"device": device, "stream": stream, "correlation": corr, "External id": corr}
        events.append({"ph": "X", "cat": "kernel", "name": "add_kernel", "pid": device, "tid": stream,
                       "ts": t + KERNEL_AT, "dur": KERNEL_US, "args": kernel})  # fmt: skip
        flow = {"id": corr, "cat": "ac2g", "name": "ac2g"}
        events.append({**flow, "ph": "s", "pid": 100, "tid": tid, "ts": t + LAUNCH_AT})
        events.append({**flow, "ph": "f", "pid": device, "tid": stream, "ts": t + KERNEL_AT, "bp": "e"})
    return {"schemaVersion": 1, "traceEvents": events}


def analysed(tmp_path: Path, n: int, shape: str) -> Analysis:
    path = tmp_path / f"{shape}.json"
    path.write_text(json.dumps(lanes_trace(n, shape)))
    return analyze(load(path, use_cache=False))


def test_8000_kernels_each_on_its_own_stream(tmp_path: Path) -> None:
    # GIVEN 8,000 kernels of 10 µs, 20 µs apart, each on its own stream of device 0
    n = 8000
    a = analysed(tmp_path, n, "streams")
    wall = EVERY_US * (n - 1) + KERNEL_AT + KERNEL_US  # from the first op to the last kernel's end
    # THEN every stream is a lane, the device ran all of them, and busy time is the kernels' sum
    assert len(a.model.lanes) == n + 1  # the streams and the host thread
    assert (a.window.start_us, a.window.end_us) == (0.0, wall)
    assert [(d.id, d.activities) for d in a.devices] == [(0, n)]
    assert a.summary.device_busy_us == pytest.approx(KERNEL_US * n)
    assert a.devices[0].compute_us == pytest.approx(KERNEL_US * n)
    assert a.summary.device_idle_us == pytest.approx(wall - KERNEL_US * n)
    assert a.gaps == ()  # the 10 µs between kernels are below the smallest gap reported
    assert a.summary.critical_path_us == pytest.approx(wall)


def test_2000_kernels_each_on_its_own_device(tmp_path: Path) -> None:
    # GIVEN 2,000 kernels, each on its own device
    n = 2000
    a = analysed(tmp_path, n, "devices")
    wall = EVERY_US * (n - 1) + KERNEL_AT + KERNEL_US
    # THEN each device ran one kernel and sat idle the rest of the window, in a gap before and after it
    assert [(d.id, d.activities, d.busy_us) for d in a.devices] == [(i, 1, KERNEL_US) for i in range(n)]
    assert all(d.idle_us == pytest.approx(wall - KERNEL_US) for d in a.devices)
    spans = {d.id: [(g.start_us, g.end_us) for g in a.gaps if g.device == d.id] for d in a.devices}
    for i in range(n):  # device 0's 8 µs before its kernel is below the smallest gap; the last device ends it
        before = [(0.0, EVERY_US * i + KERNEL_AT)] if i else []
        after = [(EVERY_US * i + KERNEL_AT + KERNEL_US, wall)] if i < n - 1 else []
        assert spans[i] == before + after
    assert len(a.gaps) == 2 * n - 2  # device 0 has no gap before its kernel, the last none after it


def test_2000_threads_each_launching_one_kernel(tmp_path: Path) -> None:
    # GIVEN 2,000 host threads, each launching one kernel on the same stream
    n = 2000
    a = analysed(tmp_path, n, "threads")
    wall = EVERY_US * (n - 1) + KERNEL_AT + KERNEL_US
    # THEN the device ran them all; the path is mostly the time between the threads' launches
    assert len(a.model.lanes) == n + 1
    assert [(d.id, d.activities) for d in a.devices] == [(0, n)]
    assert a.summary.device_busy_us == pytest.approx(KERNEL_US * n)
    assert a.summary.critical_path_us == pytest.approx(wall)
    assert sum(a.critical.breakdown_us.values()) == pytest.approx(wall)
