"""Analysis time against the number of lanes: one kernel on each of N streams, on each of N devices, or
one launch on each of N host threads (1k/2k/4k/8k). The work per event is the same in each shape; only its
spread over lanes changes, so the time should grow about linearly with N.

    .venv/bin/python benchmarks/bench_lanes.py [--sizes 1000,2000,4000,8000] [--shapes streams,devices,threads]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from stallscope.analyzer.analysis import analyze
from stallscope.analyzer.load.loader import load

SHAPES = ("streams", "devices", "threads")


def lanes_trace(n: int, shape: str) -> dict[str, Any]:
    """A trace of ``n`` launches of 10 µs kernels, 20 µs apart: each kernel on its own stream
    (``streams``), its own device (``devices``), or launched from its own host thread (``threads``)."""
    events: list[dict[str, Any]] = []
    for i in range(n):
        corr, t = i + 1, 20.0 * i
        tid = 100 + i if shape == "threads" else 100
        device = i if shape == "devices" else 0
        stream = 7 + i if shape == "streams" else 7
        launch = {"correlation": corr, "External id": corr}
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 100, "tid": tid, "ts": t, "dur": 10,
                       "args": {"External id": corr}})  # fmt: skip
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": tid,
                       "ts": t + 1, "dur": 5, "args": launch})  # fmt: skip
        kernel = {"device": device, "stream": stream, "correlation": corr, "External id": corr}
        events.append({"ph": "X", "cat": "kernel", "name": "add_kernel", "pid": device, "tid": stream,
                       "ts": t + 8, "dur": 10, "args": kernel})  # fmt: skip
        events.append(
            {"ph": "s", "id": corr, "pid": 100, "tid": tid, "ts": t + 1, "cat": "ac2g", "name": "ac2g"}
        )
        events.append({"ph": "f", "id": corr, "pid": device, "tid": stream, "ts": t + 8, "cat": "ac2g",
                       "name": "ac2g", "bp": "e"})  # fmt: skip
    return {"schemaVersion": 1, "traceEvents": events}


def time_analysis(path: Path) -> float:
    started = time.perf_counter()
    analyze(load(path, use_cache=False))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,2000,4000,8000")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    args = parser.parse_args()
    shapes = args.shapes.split(",")
    sizes = [int(s) for s in args.sizes.split(",")]
    seconds: dict[tuple[str, int], float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for shape in shapes:
            for n in sizes:
                path = Path(tmp) / f"{shape}_{n}.json"
                path.write_text(json.dumps(lanes_trace(n, shape)))
                seconds[shape, n] = time_analysis(path)
                print(f"{shape:8s} {n:6,d} lanes: {seconds[shape, n]:6.2f} s", flush=True)
    # the table: seconds per shape and size, and per 1,000 lanes (flat when the work is linear in lanes)
    print("\n| lanes | " + " | ".join(f"{s} (s) | {s} per 1k lanes" for s in shapes) + " |")
    print("|---:|" + "---:|---:|" * len(shapes))
    for n in sizes:
        cells = " | ".join(f"{seconds[s, n]:.2f} | {1000 * seconds[s, n] / n:.3f}" for s in shapes)
        print(f"| {n:,d} | {cells} |")


if __name__ == "__main__":
    main()
