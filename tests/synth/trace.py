"""Synthetic Kineto traces from a script of host work, launches, copies and syncs.

``SynthTrace`` is a builder: each call simulates one host action (see ``synth.simulation`` for the timing rules)
and records the events torch.profiler would emit for it, in the same shapes (cpu_op / user_annotation /
python_function spans, cuda_runtime calls with ``ac2g`` flows, kernel / gpu_memcpy / gpu_memset / cuda_sync
device records, metadata). ``SynthTrace.write`` produces a ``.json`` or ``.json.gz`` document; the simulated
ground truth (window, busy time, steps, syncs, critical path, pipeline figures) is exposed for tests.

Ready-made traces and their answers as JSON live in ``synth.library``. Pure stdlib.
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from synth.simulation import (
    Activity,
    CriticalPathTruth,
    CudaEvent,
    DropWaits,
    ExpectedSyncKind,
    GapTruth,
    JsonDict,
    RuntimeCosts,
    Simulation,
    StepTruth,
    SyncTruth,
    UserFrame,
    WhatIfKnobs,
    _Thread,
)

__all__ = [
    "CriticalPathTruth",
    "CudaEvent",
    "DropWaits",
    "ExpectedSyncKind",
    "PipelineFigures",
    "RuntimeCosts",
    "SynthTrace",
    "UserFrame",
    "WhatIfKnobs",
]

DATALOADER_SPAN = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
_MEMCPY_NAMES = {
    ("HtoD", False): "Memcpy HtoD (Pageable -> Device)",
    ("HtoD", True): "Memcpy HtoD (Pinned -> Device)",
    ("DtoH", False): "Memcpy DtoH (Device -> Pageable)",
    ("DtoH", True): "Memcpy DtoH (Device -> Pinned)",
    ("DtoD", False): "Memcpy DtoD (Device -> Device)",
    ("DtoD", True): "Memcpy DtoD (Device -> Device)",
}


@dataclass(frozen=True)
class PipelineFigures:
    """Two-stage pipeline figures, serial and pipelined, for P, G and n (DESIGN.md section 4, "Pipeline model")."""

    host_prep_us: float
    device_us: float
    batches: int
    serial_us: float
    pipelined_us: float
    bottleneck: str  # "host" or "device"

    @staticmethod
    def of(prep_us: float, device_us: float, batches: int) -> PipelineFigures:
        serial = batches * (prep_us + device_us)
        pipelined = prep_us + device_us + (batches - 1) * max(prep_us, device_us)
        return PipelineFigures(
            prep_us, device_us, batches, serial, pipelined, "host" if prep_us > device_us else "device"
        )


class SynthTrace:
    """Script builder and simulator for one synthetic single-rank trace."""

    def __init__(
        self,
        name: str = "synthetic",
        *,
        pid: int = 4242,
        tid: int = 4242,
        device: int = 0,
        rank: int = 0,
        world_size: int = 1,
        device_name: str = "NVIDIA H100 80GB HBM3",
        base_ts_us: int = 1_700_000_000_000,
        first_step: int = 1,
        costs: RuntimeCosts | None = None,
        whatif: WhatIfKnobs | None = None,
        device_properties: JsonDict | None = None,
    ) -> None:
        self.name = name
        self.device_properties = device_properties or {}  # overrides of the H100 deviceProperties
        self.rank = rank
        self.world_size = world_size
        self.device_name = device_name
        self.base_ts_us = base_ts_us
        self.costs = costs or RuntimeCosts()
        self.whatif = whatif or WhatIfKnobs()
        self._m = Simulation(pid=pid, tid=tid, device=device, costs=self.costs, whatif=self.whatif)
        self._next_step = first_step

    # ----- host ------------------------------------------------------------------------------------------

    def host(self, name: str, dur_us: float, *, cat: str = "cpu_op") -> None:
        """A leaf host span (``cpu_op`` or ``user_annotation``) taking ``dur_us`` of host time."""
        with self._m.span(cat, name, {"External id": self._m.next_ext(), "Record function id": 0}):
            self._m.advance(self._m.host_cost(dur_us))

    def untraced(self, dur_us: float) -> None:
        """Host time outside any traced event (Python between profiled events)."""
        self._m.advance(self._m.host_cost(dur_us))

    @contextmanager
    def op(self, name: str, *, cat: str = "cpu_op", self_us: float = 0.0) -> Iterator[None]:
        """An op span enclosing whatever the block does; ``self_us`` is its own time before its children."""
        m = self._m
        with m.span(cat, name, {"External id": m.next_ext(), "Record function id": 0}):
            m.advance(m.host_cost(self.costs.op_enter_us + self_us))
            yield
            m.advance(m.host_cost(self.costs.op_exit_us))

    @contextmanager
    def py_frame(self, file: str, line: int, function: str) -> Iterator[None]:
        """A ``python_function`` frame named ``file(line): function`` (``line`` = the def line, as Kineto)."""
        with self.py_call(f"{file}({line}): {function}"):
            yield

    @contextmanager
    def py_call(self, name: str) -> Iterator[None]:
        """A ``python_function`` event with a raw name, e.g. ``<built-in method item of Tensor ...>``."""
        m = self._m
        th = m.current
        pid = m.next_py()
        parent = th.py_ids[-1] if th.py_ids else None
        th.py_ids.append(pid)
        try:
            with m.span("python_function", name, {"Python parent id": parent, "Python id": pid}):
                yield
        finally:
            th.py_ids.pop()

    @contextmanager
    def step(self) -> Iterator[int]:
        """A ``ProfilerStep#N`` span (N counts up from ``first_step``); yields N."""
        m = self._m
        n = self._next_step
        self._next_step += 1
        name = f"ProfilerStep#{n}"
        m.open_step()
        start = m.current.clock
        with m.span("user_annotation", name, {"External id": m.next_ext(), "Record function id": 0}):
            yield n
        m.close_step(name, start)

    @contextmanager
    def thread(self, tid: int) -> Iterator[None]:
        """Run the block on host thread ``tid`` (a new thread starts at the current thread's clock)."""
        m = self._m
        prev = m.current
        m.current = m.threads.setdefault(tid, _Thread(tid, clock=prev.clock))
        try:
            yield
        finally:
            m.current = prev

    def data_loading(self, dur_us: float, *, name: str = DATALOADER_SPAN) -> None:
        """A DataLoader ``__next__`` span (user_annotation) taking ``dur_us`` of host time."""
        m = self._m
        start = m.current.clock
        with m.span("user_annotation", name, {"External id": m.next_ext(), "Record function id": 0}):
            m.advance(m.host_cost(dur_us * self.whatif.input_scale))
        m.input_spans.append((m.current.tid, start, m.current.clock))

    # ----- device work -----------------------------------------------------------------------------------

    def launch(self, kernel: str, dur_us: float, *, stream: int = 7) -> int:
        """``cudaLaunchKernel`` now; the kernel runs ``dur_us`` on ``stream``. Returns the correlation id."""
        m = self._m
        corr = m.next_corr()
        args = m.device_args(corr, stream)
        args = {k: v for k, v in args.items() if k == "External id"} | {"queued": 0} | args
        args.update(
            {
                "registers per thread": 32,
                "shared memory": 0,
                "blocks per SM": 1.0,
                "warps per SM": 4.0,
                "grid": [132, 1, 1],
                "block": [128, 1, 1],
                "est. achieved occupancy %": 6,
            }
        )
        t0 = m.current.clock
        m.enqueue("kernel", kernel, stream, dur_us, "cudaLaunchKernel", args)
        m.advance(m.host_cost(self.costs.launch_cpu_us))
        m.runtime("cudaLaunchKernel", t0, m.current.clock, corr, "s")
        return corr

    def memset(self, nbytes: int, dur_us: float, *, stream: int = 7) -> int:
        """``cudaMemsetAsync`` + a ``Memset (Device)`` record. Returns the correlation id."""
        m = self._m
        corr = m.next_corr()
        args = m.device_args(corr, stream) | {"bytes": nbytes}
        args["memory bandwidth (GB/s)"] = nbytes / (dur_us * self.whatif.device_scale) / 1e3
        t0 = m.current.clock
        m.enqueue("gpu_memset", "Memset (Device)", stream, dur_us, "cudaMemsetAsync", args)
        m.advance(m.host_cost(self.costs.launch_cpu_us))
        m.runtime("cudaMemsetAsync", t0, m.current.clock, corr, "s")
        return corr

    def memcpy(
        self,
        kind: str,
        nbytes: int,
        dur_us: float,
        *,
        pinned: bool = True,
        non_blocking: bool = True,
        stream: int = 7,
        sync_kind: ExpectedSyncKind | None = None,
        avoidable: bool = False,
        reasons: tuple[str, ...] = (),
    ) -> int:
        """``cudaMemcpyAsync`` of ``kind`` ("HtoD", "DtoH", "DtoD"); returns the correlation id.

        As CUDA does: from pageable host memory, the call first waits for the stream's earlier work, stages
        the data and returns before the DMA runs; to pageable host memory, it returns once the copy is done; with
        ``non_blocking=False`` a ``cudaStreamSynchronize`` follows (as ``Tensor.copy_`` does). A blocking copy
        is recorded as one sync of ``sync_kind`` (default: pageable_copy for a non_blocking pageable copy,
        to_host for DtoH, else other).
        """
        if kind not in ("HtoD", "DtoH", "DtoD"):
            raise ValueError(f"memcpy kind must be HtoD, DtoH or DtoD, not {kind!r}")
        m = self._m
        pageable = not pinned and kind != "DtoD"
        if sync_kind is None:
            sync_kind = (
                ExpectedSyncKind.PAGEABLE_COPY
                if pageable and non_blocking
                else (ExpectedSyncKind.TO_HOST if kind == "DtoH" else ExpectedSyncKind.OTHER)
            )
        group: AbstractContextManager[None] = nullcontext()
        if pageable or not non_blocking:
            group = m.sync_group(sync_kind, m.enclosing_op(), avoidable, reasons)
        with group:
            corr = m.next_corr()
            args = m.device_args(corr, stream) | {"bytes": nbytes}
            args["memory bandwidth (GB/s)"] = nbytes / (dur_us * self.whatif.device_scale) / 1e3
            name = _MEMCPY_NAMES[(kind, not pageable)]
            t0 = m.current.clock
            if pageable and kind == "HtoD":
                # CUDA: synchronise the stream, stage the pageable data, return; the DMA runs afterwards
                m.block("cudaMemcpyAsync", corr, self.costs.launch_cpu_us, m.last_on([stream]))
                m.enqueue("gpu_memcpy", name, stream, dur_us, "cudaMemcpyAsync", args)
            elif pageable:  # to pageable host memory: returns once the copy itself is done
                act = m.enqueue("gpu_memcpy", name, stream, dur_us, "cudaMemcpyAsync", args)
                m.block("cudaMemcpyAsync", corr, self.costs.launch_cpu_us, act)
            else:
                m.enqueue("gpu_memcpy", name, stream, dur_us, "cudaMemcpyAsync", args)
                m.advance(m.host_cost(self.costs.launch_cpu_us))
            m.runtime("cudaMemcpyAsync", t0, m.current.clock, corr, "s")
            if not non_blocking:
                self._stream_sync(stream)
        return corr

    # ----- syncs -----------------------------------------------------------------------------------------

    def synchronize(self, *, avoidable: bool = False, reasons: tuple[str, ...] = ()) -> None:
        """``torch.cuda.synchronize()``: cudaDeviceSynchronize, waits for every stream; "Context Sync"."""
        m = self._m
        with m.sync_group(ExpectedSyncKind.BLANKET, m.enclosing_op(), avoidable, reasons):
            corr = m.next_corr()
            args = m.device_args(corr, -1)
            t0, t1 = m.block(
                "cudaDeviceSynchronize", corr, self.costs.sync_cpu_us, m.last_on(sorted(m.streams))
            )
            m.runtime("cudaDeviceSynchronize", t0, t1, corr, "s")
            m.device_sync(
                "Context Sync",
                -1,
                t0,
                t1,
                {k: args[k] for k in ("stream", "correlation", "device", "context")},
            )

    def stream_synchronize(
        self, stream: int = 7, *, avoidable: bool = False, reasons: tuple[str, ...] = ()
    ) -> None:
        """``torch.cuda.current_stream().synchronize()``: cudaStreamSynchronize; "Stream Sync"."""
        m = self._m
        with m.sync_group(ExpectedSyncKind.STREAM, m.enclosing_op(), avoidable, reasons):
            self._stream_sync(stream)

    def _stream_sync(self, stream: int) -> None:
        m = self._m
        corr = m.next_corr()
        args = m.device_args(corr, stream)
        t0, t1 = m.block("cudaStreamSynchronize", corr, self.costs.sync_cpu_us, m.last_on([stream]))
        m.runtime("cudaStreamSynchronize", t0, t1, corr, "s")
        m.device_sync(
            "Stream Sync",
            stream,
            t0,
            t1,
            {k: args[k] for k in ("stream", "correlation", "device", "context")},
        )

    def event_record(self, stream: int = 7) -> CudaEvent:
        """``event.record(stream)``: cudaEventRecord (Kineto gives it a host-side flow finish only)."""
        m = self._m
        corr = m.next_corr()
        last = m.last_on([stream])
        ev = CudaEvent(m.next_event_id(), stream, corr, None if last is None else last.index)
        t0 = m.current.clock
        m.advance(m.host_cost(self.costs.event_record_cpu_us))
        m.runtime("cudaEventRecord", t0, m.current.clock, corr, "f")
        return ev

    def event_synchronize(
        self, ev: CudaEvent, *, avoidable: bool = False, reasons: tuple[str, ...] = ()
    ) -> None:
        """``event.synchronize()``: cudaEventSynchronize, waits for the recorded point; "Event Sync"."""
        m = self._m
        with m.sync_group(ExpectedSyncKind.EVENT, m.enclosing_op(), avoidable, reasons):
            corr = m.next_corr()
            awaited = None if ev.activity is None else m.activities[ev.activity]
            t0, t1 = m.block("cudaEventSynchronize", corr, self.costs.sync_cpu_us, awaited)
            m.runtime("cudaEventSynchronize", t0, t1, corr, "f")
            args = m.device_args(corr, -1)
            m.device_sync("Event Sync", -1, t0, t1, self._wait_args(ev) | args)

    def stream_wait_event(self, stream: int, ev: CudaEvent) -> None:
        """``stream.wait_event(ev)``: later work on ``stream`` cannot start before the recorded point ends."""
        m = self._m
        corr = m.next_corr()
        t0 = m.current.clock
        m.advance(m.host_cost(self.costs.event_record_cpu_us))
        m.runtime("cudaStreamWaitEvent", t0, m.current.clock, corr, "s")
        m.device_sync(
            "Stream Wait Event",
            stream,
            t0,
            m.current.clock,
            self._wait_args(ev) | m.device_args(corr, stream),
        )
        m.streams.add(stream)
        if ev.activity is not None:
            old = m.stream_floor.get(stream)
            if old is None or m.activities[old].end_us < m.activities[ev.activity].end_us:
                m.stream_floor[stream] = ev.activity

    @staticmethod
    def _wait_args(ev: CudaEvent) -> JsonDict:
        return {
            "wait_on_stream": ev.stream,
            "wait_on_cuda_event_record_corr_id": ev.correlation,
            "wait_on_cuda_event_id": ev.event_id,
        }

    def item(
        self, *, stream: int = 7, copy_us: float = 2.0, avoidable: bool = False, reasons: tuple[str, ...] = ()
    ) -> None:
        """``tensor.item()``: aten::item > aten::_local_scalar_dense > blocking 4-byte DtoH to pageable memory
        + cudaStreamSynchronize, one ``scalar_read`` sync (as in torch's own traces)."""
        m = self._m
        with (
            m.sync_group(ExpectedSyncKind.SCALAR_READ, "aten::item", avoidable, reasons),
            self.op("aten::item"),
            self.op("aten::_local_scalar_dense"),
        ):
            self.memcpy("DtoH", 4, copy_us, pinned=False, non_blocking=False, stream=stream)

    def to_device(
        self,
        nbytes: int,
        dur_us: float,
        *,
        pinned: bool,
        non_blocking: bool,
        stream: int = 7,
        avoidable: bool = False,
        reasons: tuple[str, ...] = (),
    ) -> None:
        """``x.to("cuda", non_blocking=...)``: aten::to > _to_copy > copy_ > HtoD cudaMemcpyAsync."""
        m = self._m
        kind = ExpectedSyncKind.PAGEABLE_COPY if not pinned and non_blocking else ExpectedSyncKind.OTHER
        blocking = not pinned or not non_blocking
        group = m.sync_group(kind, "aten::to", avoidable, reasons) if blocking else nullcontext()
        with group, self.op("aten::to"), self.op("aten::_to_copy"), self.op("aten::copy_"):
            self.memcpy("HtoD", nbytes, dur_us, pinned=pinned, non_blocking=non_blocking, stream=stream)

    def cuda_free(
        self, own_us: float = 20.0, *, avoidable: bool = False, reasons: tuple[str, ...] = ()
    ) -> None:
        """``cudaFree`` (the caching allocator releasing a block, e.g. in ``torch.cuda.empty_cache()``): CUDA
        synchronises the whole device first. One ``allocator`` sync."""
        m = self._m
        with m.sync_group(ExpectedSyncKind.ALLOCATOR, m.enclosing_op(), avoidable, reasons):
            corr = m.next_corr()
            t0, t1 = m.block("cudaFree", corr, own_us, m.last_on(sorted(m.streams)))
            m.runtime("cudaFree", t0, t1, corr, None)

    def cuda_malloc(self, own_us: float = 10.0) -> None:
        """``cudaMalloc`` (the caching allocator growing its pool): host time only, no sync."""
        m = self._m
        corr = m.next_corr()
        t0 = m.current.clock
        m.advance(m.host_cost(own_us))
        m.runtime("cudaMalloc", t0, m.current.clock, corr, None)

    def memory(self, reserved: int, allocated: int, nbytes: int) -> None:
        """A ``[memory]`` instant (``profile_memory=True``): an allocation of ``nbytes`` (negative: a free)
        and the caching allocator's totals after it."""
        m = self._m
        args = {
            "Total Reserved": reserved,
            "Total Allocated": allocated,
            "Bytes": nbytes,
            "Addr": 139_900_000_000_000 + len(m.instant_events) * 4096,
            "Device Id": m.device,
            "Device Type": 1,
            "Ev Idx": m.next_ev_idx(),
        }
        ev: JsonDict = {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]"}
        ev.update(pid=m.pid, tid=m.current.tid, ts=m.current.clock, args=args)
        m.instant_events.append(ev)

    # ----- ground truth ----------------------------------------------------------------------------------

    @property
    def window(self) -> tuple[float, float]:
        """Analysis window (relative µs): first to last ProfilerStep, else the whole trace."""
        return self._m.window()

    @property
    def window_us(self) -> float:
        lo, hi = self.window
        return hi - lo

    @property
    def makespan_us(self) -> float:
        """Earliest start to latest end of any host or device event."""
        lo, hi = self._m.extent()
        return hi - lo

    @property
    def wall_us(self) -> float:
        """Window start to the later of the window end and the end of device work launched in steps."""
        lo, hi = self.window
        ends = [a.end_us for a in self._m.activities if a.step is not None]
        return max([hi, *ends]) - lo

    @property
    def steps(self) -> tuple[StepTruth, ...]:
        return tuple(self._m.steps)

    @property
    def syncs(self) -> tuple[SyncTruth, ...]:
        return tuple(self._m.syncs)

    @property
    def activities(self) -> tuple[Activity, ...]:
        return tuple(self._m.activities)

    @property
    def busy_intervals(self) -> list[tuple[float, float]]:
        """Merged device-busy intervals (all streams), relative µs."""
        return self._m.busy_intervals()

    @property
    def device_busy_us(self) -> float:
        """Device busy time inside the window."""
        return self._m.busy_in(*self.window)

    def step_busy_us(self, step: StepTruth) -> float:
        """Device busy time inside the step's own interval."""
        return self._m.busy_in(step.start_us, step.end_us)

    def critical_path(self) -> CriticalPathTruth:
        return self._m.critical_path()

    def gaps(self, min_gap_us: float = 20.0) -> list[GapTruth]:
        """Device idle intervals of at least ``min_gap_us`` in the window, with their simulated cause."""
        return self._m.gaps(min_gap_us)

    def pipeline(self) -> PipelineFigures | None:
        """P = median host prep per step, G = median device time launched per step, n = steps."""
        if not self._m.steps:
            return None
        prep = statistics.median(s.host_prep_us for s in self._m.steps)
        dev = statistics.median(s.launched_device_us for s in self._m.steps)
        return PipelineFigures.of(prep, dev, len(self._m.steps))

    def abs_us(self, rel_us: float) -> float:
        """A relative time on the written trace's clock."""
        return _as_written(self.base_ts_us + rel_us)

    # ----- output ----------------------------------------------------------------------------------------

    def to_document(self) -> JsonDict:
        """The Kineto Chrome-trace document, as torch.profiler's ``export_chrome_trace`` writes it."""
        return _kineto_document(self, self._m)

    def write(self, path: str | Path) -> Path:
        """Write ``.json`` or ``.json.gz`` (byte-identical for the same script: gzip mtime is 0)."""
        path = Path(path)
        doc = self.to_document()
        events = ",\n  ".join(json.dumps(e) for e in doc["traceEvents"])
        head = {k: v for k, v in doc.items() if k != "traceEvents"}
        text = json.dumps(head, indent=2)[:-2] + ',\n  "traceEvents": [\n  ' + events + "\n  ]\n}\n"
        data = text.encode()
        if path.name.endswith(".gz"):
            with path.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
                gz.write(data)
        else:
            path.write_bytes(data)
        return path


def _as_written(x: float) -> float:
    """A µs figure as the trace and the answers write it: rounded to the ns, whole numbers as ints."""
    r = round(x, 3)
    return int(r) if r == int(r) else r


def _shift(ev: JsonDict, base: int) -> JsonDict:
    out = {k: v for k, v in ev.items() if k != "flow"}
    out["ts"] = _as_written(base + float(ev["ts"]))
    if "dur" in ev:
        out["dur"] = _as_written(float(ev["dur"]))
    return out


def _flow(ph: str, corr: int, pid: int, tid: int, ts: float) -> JsonDict:
    ev: JsonDict = {"ph": ph, "id": corr, "pid": pid, "tid": tid, "ts": ts, "cat": "ac2g", "name": "ac2g"}
    if ph == "f":
        ev["bp"] = "e"
    return ev


def _kineto_document(sc: SynthTrace, m: Simulation) -> JsonDict:
    """Assemble the document in Kineto's order: host spans, python frames, device/runtime pairs, metadata."""
    base = sc.base_ts_us
    host = sorted(
        (e for e in m.host_events if e["cat"] != "python_function"), key=lambda e: (e["ts"], -e["dur"])
    )
    py = sorted(
        (e for e in m.host_events if e["cat"] == "python_function"), key=lambda e: (e["ts"], -e["dur"])
    )
    events = [_shift(e, base) for e in host + py + m.instant_events]
    by_corr: dict[int, list[JsonDict]] = {}
    for d in m.device_events:
        by_corr.setdefault(int(d["args"]["correlation"]), []).append(d)
    for rt in sorted(m.runtime_events, key=lambda e: int(e["args"]["correlation"])):
        corr = int(rt["args"]["correlation"])
        for d in by_corr.get(corr, []):
            events.append(_shift(d, base))
            events.append(_flow("f", corr, m.device, int(d["tid"]), _as_written(base + float(d["ts"]))))
        events.append(_shift(rt, base))
        if rt["flow"] is not None:
            events.append(
                _flow(str(rt["flow"]), corr, m.pid, int(rt["tid"]), _as_written(base + float(rt["ts"])))
            )
    lo, hi = m.extent()
    start, end = min(lo, 0.0), hi
    events += _metadata(sc, m, _as_written(base + start))
    trace_ts = _as_written(base + start)
    events.append(
        {
            "ph": "X",
            "cat": "Trace",
            "ts": trace_ts,
            "dur": _as_written(end - start),
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "name": "PyTorch Profiler (0)",
            "args": {"Op count": 0},
        }
    )
    events.append(_meta("process_sort_index", trace_ts, "Spans", 0, {"sort_index": 536870912}))
    iteration = {"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces"}
    events.append(iteration | {"tid": "Trace PyTorch Profiler", "ts": trace_ts})
    events.append(
        {
            "name": "Record Window End",
            "ph": "i",
            "s": "g",
            "pid": "",
            "tid": "",
            "ts": _as_written(base + end + 10),
        }
    )
    return {
        "schemaVersion": 1,
        "deviceProperties": [_device_properties(m.device, sc.device_name) | sc.device_properties],
        "distributedInfo": {"backend": "nccl", "rank": sc.rank, "world_size": sc.world_size},
        "cupti_version": 22,
        "cuda_runtime_version": 12040,
        "cuda_driver_version": 12090,
        "with_stack": int(any(e["cat"] == "python_function" for e in m.host_events)),
        "trace_id": _trace_id(sc.name),
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1_600_000_000_000_000_000,
        "traceEvents": events,
        "traceName": f"{sc.name}.pt.trace.json",
    }


def _trace_id(name: str) -> str:
    """A stable 32-hex-digit id derived from the trace name (no randomness)."""
    acc = 0
    for ch in name.encode():
        acc = (acc * 131 + ch) % (1 << 128)
    return f"{acc:032X}"


def _meta(name: str, ts: float, pid: int | str, tid: int, args: JsonDict) -> JsonDict:
    return {"name": name, "ph": "M", "ts": ts, "pid": pid, "tid": tid, "args": args}


def _metadata(sc: SynthTrace, m: Simulation, ts: float) -> list[JsonDict]:
    d = m.device
    out = [
        _meta("process_name", ts, m.pid, 0, {"name": "python3"}),
        _meta("process_labels", ts, m.pid, 0, {"labels": "CPU"}),
        _meta("process_sort_index", ts, m.pid, 0, {"sort_index": m.pid}),
        _meta("process_name", ts, d, 0, {"name": "python3"}),
        _meta("process_labels", ts, d, 0, {"labels": f"GPU {d}"}),
        _meta("process_sort_index", ts, d, 0, {"sort_index": 5000000 + d}),
    ]
    if any(e["tid"] == -1 for e in m.device_events):
        out.append(_meta("thread_name", ts, d, -1, {"name": f"Device {d}"}))
        out.append(_meta("thread_sort_index", ts, d, -1, {"sort_index": -1}))
    for s in sorted(m.streams):
        out.append(_meta("thread_name", ts, d, s, {"name": f"stream {s} "}))
        out.append(_meta("thread_sort_index", ts, d, s, {"sort_index": s}))
    for tid in sorted(m.threads):
        out.append(_meta("thread_name", ts, m.pid, tid, {"name": f"thread {tid} (python3)"}))
        out.append(_meta("thread_sort_index", ts, m.pid, tid, {"sort_index": tid}))
    return out


def _device_properties(device: int, name: str) -> JsonDict:
    return {
        "id": device,
        "name": name,
        "totalGlobalMem": 85018279936,
        "computeMajor": 9,
        "computeMinor": 0,
        "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048,
        "regsPerBlock": 65536,
        "warpSize": 32,
        "sharedMemPerBlock": 49152,
        "numSms": 132,
        "regsPerMultiprocessor": 65536,
        "sharedMemPerBlockOptin": 232448,
        "sharedMemPerMultiprocessor": 233472,
    }
