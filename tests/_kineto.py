"""Builders for tiny hand-made Kineto documents (the shapes torch.profiler writes)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

Event = dict[str, Any]
WriteTrace = Callable[..., Path]  # the write_trace fixture: (doc, name="trace.json") -> path

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"

HOST = 100  # pid and tid of the one host thread in hand-built traces
GPU_NAME = "Test GPU"


def span(
    cat: str, name: str, ts: float, dur: float, *, pid: Any = HOST, tid: Any = HOST, **args: Any
) -> Event:
    """A complete ('X') event; keyword args become ``args`` (underscores in keys become spaces)."""
    ev: Event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        ev["args"] = {k.replace("_", " "): v for k, v in args.items()}
    return ev


def kernel(
    name: str, ts: float, dur: float, corr: int, *, stream: int = 7, device: int = 0, ext: int | None = None
) -> Event:
    """A kernel on ``device``/``stream``; its External id is the launching op's (``ext``, default ``corr``)."""
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": device,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {
            "device": device,
            "stream": stream,
            "correlation": corr,
            "External id": corr if ext is None else ext,
        },
    }


def flow(ph: str, fid: int, ts: float, *, pid: Any = HOST, tid: Any = HOST, cat: str = "ac2g") -> Event:
    ev: Event = {"ph": ph, "id": fid, "pid": pid, "tid": tid, "ts": ts, "cat": cat, "name": cat}
    if ph == "f":
        ev["bp"] = "e"
    return ev


def launch_pair(
    op_ts: float, corr: int, kernel_ts: float, kernel_dur: float, *, ext: int, stream: int = 7
) -> list[Event]:
    """An ``aten::add`` holding a ``cudaLaunchKernel`` and the kernel it launched, with ac2g flows."""
    return [
        span("cpu_op", "aten::add", op_ts, 20, External_id=ext),
        span("cuda_runtime", "cudaLaunchKernel", op_ts + 5, 8, correlation=corr, External_id=ext),
        kernel("add_kernel", kernel_ts, kernel_dur, corr, stream=stream, ext=ext),
        flow("s", corr, op_ts + 5),
        flow("f", corr, kernel_ts, pid=0, tid=stream),
    ]


def document(events: list[Event], **top: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": GPU_NAME, "totalGlobalMem": 1 << 30}],
    }
    doc.update(top)
    doc["traceEvents"] = events
    return doc


def write_trace_file(path: Path, doc: Any) -> Path:
    """Write a Kineto document (a dict, or a bare event list) as ``.json`` or ``.json.gz`` by its name."""
    data = json.dumps(doc).encode()
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
