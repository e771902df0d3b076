"""The trace model: columnar events, interned strings, lanes, devices, steps and resolved links.

One numpy array per column, never one Python object per event. Every link is an index into the same
event table (``-1`` when absent), so passes follow links with vectorised indexing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import IntEnum
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from stallscope.analyzer.core.names import ACTIVITY_KINDS, EventKind

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
I8 = npt.NDArray[np.int8]
Mask = npt.NDArray[np.bool_]

NO_ID = -1


class LaneKind(IntEnum):
    HOST = 0  # a host thread (pid, tid)
    STREAM = 1  # a device stream
    DEVICE = 2  # device-wide records not tied to a stream (cuda_sync with stream -1)
    META = 3  # profiler pseudo lanes holding only its own spans and instants ("Spans", "Traces")


@dataclass(frozen=True)
class Lane:
    id: int
    kind: LaneKind
    pid: str  # raw pid/tid for host lanes, as text (Kineto uses strings for some pseudo lanes)
    tid: str
    device: int  # device index for device lanes, -1 on the host
    stream: int  # stream id for stream lanes, -1 otherwise
    name: str  # host: thread name from metadata ("thread 1102 (pt_main_thread)"); device: its process
    # label when it names another accelerator ("MTIA 17"), else ""

    @property
    def on_device(self) -> bool:
        return self.kind in (LaneKind.STREAM, LaneKind.DEVICE)

    @property
    def label(self) -> str:
        if self.kind == LaneKind.HOST:
            return self.name or f"thread {self.tid}"
        device = self.name if self.on_device and self.name else f"GPU {self.device}"
        if self.kind == LaneKind.STREAM:
            return f"{device} stream {self.stream}"
        if self.kind == LaneKind.META:
            return f"profiler {self.pid}/{self.tid}"
        return f"{device} (device-wide)"


@dataclass(frozen=True)
class Device:
    id: int
    name: str
    properties: dict[str, Any] = field(default_factory=dict, compare=False)
    # peaks of the caching allocator's totals from ``[memory]`` instants (-1: the trace has none)
    peak_reserved_bytes: int = -1
    peak_allocated_bytes: int = -1


@dataclass(frozen=True)
class Step:
    name: str  # "ProfilerStep#12"
    number: int
    start_us: float
    end_us: float
    lane: int
    event: int  # index of the annotation event

    @property
    def dur_us(self) -> float:
        return self.end_us - self.start_us


def of_kind(kinds: I8, *wanted: EventKind) -> Mask:
    """Which of ``kinds`` (an ``EventTable.kind`` column, or part of one) are one of ``wanted``."""
    table = np.zeros(256, dtype=np.bool_)  # a lookup table: several times faster than np.isin
    table[[int(k) & 0xFF for k in wanted]] = True
    return np.asarray(table[kinds.view(np.uint8)])


@dataclass(frozen=True)
class EventTable:
    """All timed events of one trace, sorted by (ts, longest first). Times are µs on the trace clock."""

    ts: F64
    dur: F64
    kind: I8  # EventKind
    api: I8  # ApiKind for runtime/driver calls, 0 otherwise
    name: I32  # index into TraceModel.strings
    cat: I32  # index into TraceModel.strings
    lane: I32  # index into TraceModel.lanes
    external_id: I64
    correlation: I64
    python_id: I64
    stream: I64  # args.stream (device events), else -1
    device: I64  # args.device (device events), else -1
    bytes: I64
    wait_stream: I64  # cuda_sync: stream waited on
    wait_corr: I64  # cuda_sync: correlation of the cudaEventRecord waited on
    stack: I32  # cpu_op: its legacy ``args["Call stack"]`` (index into TraceModel.strings), else -1
    # resolved links (indices into this table, -1 when absent)
    parent: I64  # enclosing event on the same host thread (op nesting, python frames included)
    launch: I64  # device activity / sync record -> the host API call that issued it
    op: I64  # host API call -> the innermost cpu_op it ran under
    py_parent: I64  # python frame -> its parent frame (Python parent id)

    def __post_init__(self) -> None:
        for f in fields(self):  # the model is shared by every pass: no pass may change it in place
            getattr(self, f.name).setflags(write=False)

    def __len__(self) -> int:
        return len(self.ts)

    @cached_property
    def end(self) -> F64:
        end = self.ts + self.dur
        end.setflags(write=False)
        return end

    def columns(self) -> dict[str, npt.NDArray[Any]]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    _long_kept = 4096  # how many of the longest events ``overlapping`` keeps apart (a class constant)

    @cached_property
    def _longest(self) -> tuple[float, I64]:
        """(d, the events longer than d), d chosen so that at most a few thousand events are longer."""
        n = len(self.dur)
        if n == 0:
            return 0.0, np.zeros(0, dtype=np.int64)
        k = min(n, self._long_kept)
        d = float(np.partition(self.dur, n - k)[n - k])
        return d, np.flatnonzero(self.dur > d)

    def overlapping(self, start_us: float, end_us: float) -> I64:
        """The events that overlap ``[start_us, end_us)`` (start before its end, end after its start), in
        table order, found without a pass over the whole table: those starting less than ``d`` before the
        range from the sorted start times, and the few events longer than ``d`` that start earlier."""
        d, longest = self._longest
        lo, hi = (int(x) for x in np.searchsorted(self.ts, [start_us - d, end_us], side="left"))
        near = np.arange(lo, max(lo, hi), dtype=np.int64)
        near = near[self.end[near] > start_us]
        far = longest[longest < lo]
        far = far[self.end[far] > start_us]
        return np.concatenate([far, near])

    def is_kind(self, *kinds: EventKind) -> Mask:
        return of_kind(self.kind, *kinds)

    def activity_mask(self) -> Mask:
        return self.is_kind(*ACTIVITY_KINDS)


@dataclass(frozen=True)
class Series:
    """One counter series: Chrome counter events (``ph: "C"``, one series per key of their ``args``) or
    the metrics a profiler range carries (CUPTI range-profiler mode)."""

    name: str  # "GPU memory.allocated", "smsp__inst_executed.sum" (raw trace text)
    unit: str | None  # when the trace says it ("bytes"...), else None
    pid: str  # the process the samples were written under, as text
    device: int  # the device they belong to, -1 for the host or unknown


@dataclass(frozen=True)
class Counters:
    """Counter samples, columnar and sorted by (series, ts): ``series`` indexes ``Counters.series``."""

    series: tuple[Series, ...] = ()
    sample_series: I32 = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    ts: F64 = field(default_factory=lambda: np.zeros(0, dtype=np.float64))
    value: F64 = field(default_factory=lambda: np.zeros(0, dtype=np.float64))

    def __len__(self) -> int:
        return len(self.ts)

    def of(self, series: int) -> tuple[F64, F64]:
        """(ts, value) of one series, in time order."""
        lo, hi = np.searchsorted(self.sample_series, [series, series + 1])
        return self.ts[lo:hi], self.value[lo:hi]


@dataclass(frozen=True)
class LoadReport:
    """What the loader could not use or did not recognise. Nothing is dropped silently."""

    skipped: dict[str, int] = field(default_factory=dict)  # reason -> events skipped
    unknown_categories: dict[str, int] = field(default_factory=dict)  # kept as OTHER, not analysed
    unknown_phases: dict[str, int] = field(default_factory=dict)
    unknown_keys: tuple[str, ...] = ()  # top-level document keys not read (kept in the file, ignored)
    unpaired_flows: int = 0  # flow ends with no partner (ignored)
    unlinked_device_events: int = 0  # device activity whose launch call is not in the trace
    notes: tuple[str, ...] = ()
    counter_samples: int = 0  # counter values kept (``TraceModel.counters``), one per series and time

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())


@dataclass(frozen=True)
class TraceModel:
    path: str
    format: str  # "json" | "json.gz"
    events: EventTable
    strings: tuple[str, ...]
    lanes: tuple[Lane, ...]
    devices: tuple[Device, ...]
    steps: tuple[Step, ...]
    rank: int | None
    world_size: int | None
    display_time_unit: str | None
    base_time_ns: int | None
    report: LoadReport
    counters: Counters = field(default_factory=Counters)

    def string(self, index: int) -> str:
        return self.strings[index] if index >= 0 else ""

    def name_of(self, event: int) -> str:
        return self.strings[int(self.events.name[event])]

    @cached_property
    def lane_device(self) -> I64:
        """Each lane's device index (streams and device-wide records); -1 for host threads. Built once:
        per-device questions index it instead of walking the lanes again for each device."""
        return np.array([lane.device if lane.on_device else -1 for lane in self.lanes], dtype=np.int64)

    @cached_property
    def lane_on_device(self) -> Mask:
        """Per-lane mask of the device lanes (streams and device-wide records)."""
        return np.array([lane.on_device for lane in self.lanes], dtype=np.bool_)

    def device_lanes(self, device: int) -> Mask:
        """Per-lane mask of the lanes (streams and device-wide records) of one device."""
        return np.asarray(self.lane_device == device, dtype=np.bool_)

    @cached_property
    def _activities_by_device(self) -> dict[int, I64]:
        ev = self.events
        acts = np.flatnonzero(ev.activity_mask())
        device = self.lane_device[ev.lane[acts]] if len(self.lanes) else np.full(len(acts), -1, np.int64)
        order = np.argsort(device, kind="stable")  # one sort groups them: event order within each device
        acts, device = acts[order], device[order]
        keys, first = np.unique(device, return_index=True)
        bounds = np.append(first, len(device))
        return {int(k): acts[bounds[i] : bounds[i + 1]] for i, k in enumerate(keys.tolist()) if k >= 0}

    def device_activities(self, device: int) -> I64:
        """The activities (kernels, copies, memsets...) on one device's lanes, in event order."""
        return self._activities_by_device.get(device, np.zeros(0, dtype=np.int64))

    def lanes_of(self, kind: LaneKind) -> list[Lane]:
        return [lane for lane in self.lanes if lane.kind == kind]

    @property
    def event_count(self) -> int:
        return len(self.events)


@dataclass(frozen=True)
class TraceSet:
    """What one input path holds: one model per rank (a single file is a set of one)."""

    path: str
    models: tuple[TraceModel, ...]
    notes: tuple[str, ...] = ()
    sidecar: Any = None  # stallscope.analyzer.load.sidecar.Sidecar of a stallscope bundle (exact sync call sites), or None

    @property
    def ranks(self) -> list[int]:
        return [m.rank if m.rank is not None else i for i, m in enumerate(self.models)]

    def for_rank(self, rank: int | None) -> TraceModel:
        if rank is None:
            return self.models[0]
        for model, r in zip(self.models, self.ranks, strict=True):
            if r == rank:
                return model
        raise KeyError(rank)
