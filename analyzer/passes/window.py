"""The window and what the device did in it (DESIGN.md §4): the profiled steps' span, each device's busy
and idle time, per-step figures and the summary every view leads with."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from stallscope.analyzer.core import intervals
from stallscope.analyzer.core.model import F64, I64, TraceModel
from stallscope.analyzer.core.names import EventKind, collective_strings
from stallscope.analyzer.graph.dependency import Blocking, Graph
from stallscope.analyzer.passes import grouped


class WindowBasis(str, Enum):
    STEPS = "steps"  # first to last ProfilerStep#N span
    TRACE = "trace"  # first to last event


@dataclass(frozen=True)
class Window:
    start_us: float
    end_us: float
    basis: WindowBasis

    @property
    def dur_us(self) -> float:
        return self.end_us - self.start_us


@dataclass(frozen=True)
class DeviceUsage:
    id: int
    name: str
    busy_us: float
    idle_us: float
    utilization: float
    activities: int  # kernels, copies and memsets inside the window
    # the busy time split by what ran (they add up to busy_us): compute kernels; collectives while no compute
    # kernel ran; copies and memsets while neither did
    compute_us: float = 0.0
    communication_us: float = 0.0
    copy_us: float = 0.0


@dataclass(frozen=True)
class StepStats:
    name: str
    start_us: float
    dur_us: float
    device_busy_us: float
    device_idle_us: float
    host_sync_wait_us: float


@dataclass(frozen=True)
class Summary:
    wall_us: float
    device_busy_us: float
    device_idle_us: float
    device_utilization: float
    host_sync_wait_us: float
    # filled by later passes (sync classification, critical path, what-if); None until then
    sync_count: int | None = None
    avoidable_sync_count: int | None = None
    critical_path_us: float | None = None
    bottleneck: str | None = None
    est_saving_us: float | None = None


_NOT_WORK = (EventKind.INSTANT, EventKind.TRACE_SPAN, EventKind.OVERHEAD)


def find_window(model: TraceModel) -> Window:
    """First to last profiled step when the trace has ``ProfilerStep#N`` spans, else first to last event
    (instants, the profiler's own span and its overhead records excluded)."""
    if model.steps:
        start = min(s.start_us for s in model.steps)
        end = max(s.end_us for s in model.steps)
        return Window(start, end, WindowBasis.STEPS)
    ev = model.events
    work = ~ev.is_kind(*_NOT_WORK)
    if not work.any():
        work = np.ones(len(ev), dtype=np.bool_)
    return Window(float(ev.ts[work].min()), float(ev.end[work].max()), WindowBasis.TRACE)


def busy_intervals(
    model: TraceModel, device: int, window: Window, without_collectives: bool = False
) -> tuple[F64, F64]:
    """Disjoint busy intervals of one device (all streams), clipped to the window; with
    ``without_collectives``, of its compute, copies and memsets only."""
    ev = model.events
    on = model.device_activities(device)
    if without_collectives:
        on = on[~(collective_strings(model.strings, ev.name[on]) & (ev.kind[on] == EventKind.KERNEL))]
    s, e = intervals.union(ev.ts[on], ev.end[on])
    return intervals.clip(s, e, window.start_us, window.end_us)


def busy_by_device(
    model: TraceModel, devices: list[int], window: Window, without_collectives: bool = False
) -> tuple[I64, F64, F64]:
    """``busy_intervals`` of each of ``devices`` at once: the offsets of each device's intervals (device
    ``k`` of the list has ``s[at[k] : at[k + 1]]``) and their starts and ends."""
    ev = model.events
    on, group = _activities_of(model, devices)
    if without_collectives:
        keep = ~(collective_strings(model.strings, ev.name[on]) & (ev.kind[on] == EventKind.KERNEL))
        on, group = on[keep], group[keep]
    return _clipped_union(ev.ts, ev.end, on, group, len(devices), window)


def _activities_of(model: TraceModel, devices: list[int]) -> tuple[I64, I64]:
    """The activities of each of ``devices`` (in event order within each) and the device's position."""
    mine = [model.device_activities(d) for d in devices]
    lengths = np.array([len(m) for m in mine], dtype=np.int64)
    on = np.concatenate(mine) if mine else np.zeros(0, dtype=np.int64)
    return on.astype(np.int64), np.repeat(np.arange(len(devices), dtype=np.int64), lengths)


def _clipped_union(
    ts: F64, end: F64, events: I64, group: I64, groups: int, window: Window
) -> tuple[I64, F64, F64]:
    """The union of each group's ``events`` clipped to the window, as ``busy_by_device`` gives it."""
    g, s, e = grouped.union(group, ts[events], end[events])
    s, e = np.maximum(s, window.start_us), np.minimum(e, window.end_us)
    keep = e > s
    return grouped.bounds(g[keep], groups), s[keep], e[keep]


def _totals(at: I64, s: F64, e: F64) -> list[float]:
    """``intervals.total`` of each group's intervals (each summed on its own: the same float)."""
    length = e - s
    return [
        float(np.sum(length[a:b])) if b > a else 0.0
        for a, b in zip(at[:-1].tolist(), at[1:].tolist(), strict=True)
    ]


def device_usage(model: TraceModel, window: Window) -> tuple[DeviceUsage, ...]:
    """Each device's busy and idle time in the window, split by what ran (every device at once: a trace
    can have thousands)."""
    ev = model.events
    act = ev.activity_mask()
    inside = act & (ev.end > window.start_us) & (ev.ts < window.end_us)
    kernel = ev.is_kind(EventKind.KERNEL)
    comm = np.zeros(len(ev), dtype=np.bool_)
    comm[kernel] = collective_strings(model.strings, ev.name[kernel])
    ids = [d.id for d in model.devices]
    on, group = _activities_of(model, ids)
    counts = np.bincount(group[inside[on]], minlength=len(ids)).tolist()
    busy = _totals(*_clipped_union(ev.ts, ev.end, on, group, len(ids), window))
    kernels_on = kernel[on]
    kernels = _totals(*_clipped_union(ev.ts, ev.end, on[kernels_on], group[kernels_on], len(ids), window))
    computing = kernels_on & ~comm[on]
    compute = _totals(*_clipped_union(ev.ts, ev.end, on[computing], group[computing], len(ids), window))
    dur = window.dur_us
    return tuple(
        DeviceUsage(
            d.id,
            d.name,
            busy[k],
            max(dur - busy[k], 0.0),
            busy[k] / dur if dur > 0 else 0.0,
            counts[k],
            compute_us=compute[k],
            communication_us=max(kernels[k] - compute[k], 0.0),
            copy_us=max(busy[k] - kernels[k], 0.0),
        )
        for k, d in enumerate(model.devices)
    )


def host_end(model: TraceModel, lane: int, window: Window) -> float:
    """When the thread ``lane``'s own work in the window ended: the window's end for a window of profiled
    steps (the host closes each step), else its last event's end (a window timed to its last event can
    end in device work queued after the host finished)."""
    if window.basis == WindowBasis.STEPS:
        return window.end_us
    ev = model.events
    mine = (ev.lane == lane) & ~ev.is_kind(*_NOT_WORK) & (ev.ts <= window.end_us)
    if not mine.any():
        return window.end_us
    return float(min(ev.end[mine].max(), window.end_us))


def host_sync_calls(g: Graph) -> tuple[F64, F64]:
    """Disjoint intervals in which a host call was blocked waiting for device work (device/stream/event
    synchronize, synchronous copies and copies to or from pageable memory, allocator syncs): from each
    call's start to the end of what it awaited (``Graph.waited``, the syncs' ``wait_us``). A call whose
    awaited work had already finished (a 6 s ``cudaFree`` on an idle device) is the host's own time."""
    waited = g.waited()
    on = (g.call_blocking != Blocking.NO) & (waited > 0)
    return intervals.union(g.call_start[on], g.call_start[on] + waited[on])


def step_stats(
    model: TraceModel, main_device: int | None, window: Window, waits: tuple[F64, F64]
) -> tuple[StepStats, ...]:
    if not model.steps:
        return ()
    lo = np.array([s.start_us for s in model.steps])
    hi = np.array([s.end_us for s in model.steps])
    if main_device is None:
        busy = np.zeros(len(lo))
    else:
        s, e = busy_intervals(model, main_device, window)
        busy = intervals.covered_in(s, e, lo, hi)
    wait = intervals.covered_in(waits[0], waits[1], lo, hi)
    return tuple(
        StepStats(st.name, st.start_us, st.dur_us, float(b), max(st.dur_us - float(b), 0.0), float(w))
        for st, b, w in zip(model.steps, busy, wait, strict=True)
    )


def summarize(
    window: Window, devices: tuple[DeviceUsage, ...], waits: tuple[F64, F64]
) -> tuple[int | None, Summary]:
    main = max(devices, key=lambda d: (d.busy_us, -d.id)) if devices else None
    ws, we = intervals.clip(waits[0], waits[1], window.start_us, window.end_us)
    summary = Summary(
        wall_us=window.dur_us,
        device_busy_us=main.busy_us if main else 0.0,
        device_idle_us=main.idle_us if main else window.dur_us,
        device_utilization=main.utilization if main else 0.0,
        host_sync_wait_us=intervals.total(ws, we),
    )
    return (main.id if main else None), summary
