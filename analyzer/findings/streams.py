"""Findings about streams: copies serialized with compute, streams that never overlap, and a non_blocking
device-to-host copy read back without waiting for it.

As every rule (``registry``), each is a pure function ``rule(evidence) -> list[Finding]`` over what the passes
found: it reads the dependency graph, the window, the critical path and the model, and changes nothing. Times are µs on the trace clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from stallscope.analyzer.core import intervals
from stallscope.analyzer.core.arrays import distinct, group_order
from stallscope.analyzer.core.model import F64, I64, Mask, TraceModel
from stallscope.analyzer.core.names import ApiKind, EventKind, memcpy_is_async
from stallscope.analyzer.core.numbers import ratio
from stallscope.analyzer.core.sites import CallSite, call_site
from stallscope.analyzer.evidence import Evidence
from stallscope.analyzer.findings import advice
from stallscope.analyzer.findings.base import Finding, Severity, severity
from stallscope.analyzer.graph.dependency import Blocking, Graph
from stallscope.analyzer.passes.critical import Kind
from stallscope.analyzer.passes.replay import Costs, replay_ends

#: copies on compute streams must take at least this share of the window
COPY_SHARE = 0.05
#: two streams "overlap" when they ran at the same time for at least this share of the smaller one's busy time
OVERLAP_SHARE = 0.01
#: streams carrying fewer activities than this in the window are not streams "meant to overlap"
MIN_STREAM_ACTIVITIES = 2

_DEVICE = tuple(Kind).index(Kind.DEVICE)


def _by_name(model: TraceModel, test: Callable[[str], bool]) -> Mask:
    """Per interned string, whether ``test`` holds (index it with an event's ``name``)."""
    return np.array([test(s) for s in model.strings], dtype=np.bool_)


def _host_copies(model: TraceModel, g: Graph) -> Mask:
    """Per activity: a copy between host and device memory (``Memcpy HtoD ...`` / ``Memcpy DtoH ...``)."""
    ev = model.events
    names = _by_name(model, lambda s: "HtoD" in s or "DtoH" in s)
    return np.asarray((ev.kind[g.act_event] == EventKind.MEMCPY) & names[ev.name[g.act_event]])


def _clipped(g: Graph, idx: I64, lo: float, hi: float) -> float:
    """Total duration of activities ``idx`` inside [lo, hi]."""
    s, e = np.maximum(g.act_start[idx], lo), np.minimum(g.act_end[idx], hi)
    return float(np.sum(np.maximum(e - s, 0.0)))


def _busy(g: Graph, idx: I64, lo: float, hi: float) -> tuple[F64, F64]:
    s, e = intervals.union(g.act_start[idx], g.act_end[idx])
    return intervals.clip(s, e, lo, hi)


def _site_of_call(model: TraceModel, g: Graph, call: int) -> CallSite | None:
    return call_site(model, int(g.call_event[call])) if call >= 0 else None


def _top_site(model: TraceModel, g: Graph, acts: I64) -> CallSite | None:
    """The call site that launched the most device time among ``acts`` (None without python stacks)."""
    time: dict[CallSite, float] = {}
    for a in acts.tolist():
        site = _site_of_call(model, g, int(g.act_call[a]))
        if site is not None:
            time[site] = time.get(site, 0.0) + float(g.act_end[a] - g.act_start[a])
    return max(time, key=lambda s: time[s]) if time else None


def _plural(word: str, items: list[int]) -> str:
    return word if len(items) == 1 else f"{word}s"


def _streams(model: TraceModel, lanes: list[int]) -> str:
    return ", ".join(str(model.lanes[lane].stream) for lane in lanes)


# ----- copy_compute_serialized -------------------------------------------------------------------------


def copy_compute_serialized(a: Evidence) -> list[Finding]:
    """Host<->device copies from or to pinned memory on the streams that run the compute kernels, none
    of them overlapping a kernel, taking at least 5% of the window. Copies from or to pageable memory are
    left to ``false_sync_pageable_copy`` (they cannot overlap until the memory is pinned).

    Cost: the copies' time on the critical path (their whole time when there is no path). Saving: a
    replay of the dependency graph in which those copies take no time (they are hidden completely, as a
    prefetch one step ahead on a side stream would hide them): an upper bound, never more than the cost.
    """
    g = a.graph
    if g is None or not g.activities:
        return []
    m = a.model
    ev = m.events
    lo, hi, wall = a.window.start_us, a.window.end_us, a.window.dur_us
    kind = ev.kind[g.act_event]
    kernel = kind == EventKind.KERNEL
    inside = (g.act_end > lo) & (g.act_start < hi)
    host_copy = _host_copies(m, g) & inside
    pageable = _by_name(m, lambda s: "Pageable" in s)[ev.name[g.act_event]]
    out: list[Finding] = []
    for device, acts in g.act_by_device.items():  # by device, each device's in activity order
        compute = distinct(g.act_lane[acts[kernel[acts] & inside[acts]]])
        copies = acts[host_copy[acts] & ~pageable[acts] & np.isin(g.act_lane[acts], compute)]
        copy_us = _clipped(g, copies, lo, hi)
        if not len(copies) or copy_us < COPY_SHARE * wall:
            continue
        on = np.zeros(len(g.act_device), dtype=np.bool_)
        on[acts] = True
        if _copies_overlap_kernels(g, on & host_copy, kernel):
            continue
        cost = _on_critical_path(a, g, copies) if a.critical is not None else copy_us
        saving = min(_saving_without(a, g, copies), cost)
        lanes = sorted(distinct(g.act_lane[copies]).tolist())
        site = _top_site(m, g, copies)
        where = f" at {site}" if site else ""
        out.append(
            Finding(
                "copy_compute_serialized",
                severity(cost, wall),
                f"{len(copies)} host<->device copies{where} run on compute {_plural('stream', lanes)} "
                f"{_streams(m, lanes)} of GPU {device}, never overlapping a kernel: "
                f"{ratio(copy_us, wall):.0%} of the window",
                site,
                len(copies),
                cost,
                saving,
                advice.COPY_ON_SIDE_STREAM,
            )
        )
    return out


def _on_critical_path(a: Evidence, g: Graph, acts: I64) -> float:
    """Time of the activities ``acts`` on the critical path: its ``device`` segments on their streams
    (a segment may span several activities of one stream, so the activities' intervals are intersected
    with the segments; activities of one stream never overlap)."""
    cp = a.critical
    if cp is None:
        return 0.0
    total = 0.0
    for lane in distinct(g.act_lane[acts]).tolist():
        seg = (cp.kind == _DEVICE) & (cp.lane == lane)
        s, e = intervals.union(cp.start_us[seg], cp.end_us[seg])
        mine = acts[g.act_lane[acts] == lane]
        total += float(np.sum(intervals.covered_in(s, e, g.act_start[mine], g.act_end[mine])))
    return total


def _copies_overlap_kernels(g: Graph, copy: Mask, kernel: Mask) -> bool:
    """Whether any of the copies ran at the same time as a kernel of another stream (work on one stream
    never overlaps)."""
    idx = np.flatnonzero(copy)
    for lane in distinct(g.act_lane[idx]).tolist():
        mine = idx[g.act_lane[idx] == lane]
        others = np.flatnonzero(kernel & (g.act_device == g.act_device[mine[0]]) & (g.act_lane != lane))
        if not len(others):
            continue
        ks, ke = intervals.union(g.act_start[others], g.act_end[others])
        if bool(np.any(intervals.covered_in(ks, ke, g.act_start[mine], g.act_end[mine]) > 0)):
            return True
    return False


def _saving_without(a: Evidence, g: Graph, acts: I64) -> float:
    """Replay saving when the activities ``acts`` (those issued inside the window) take no time."""
    frame = a.frame
    if frame is None:
        return 0.0
    dur = list(frame.lists["a_dur"])
    for i in acts.tolist():
        if frame.act_in[i]:
            dur[i] = 0.0
    hidden = replace(frame, lists={**frame.lists, "a_dur": dur})
    (base,) = replay_ends(g, frame, [Costs()])
    (without,) = replay_ends(g, hidden, [Costs()])
    return max(base - without, 0.0)


# ----- streams_never_overlapped ------------------------------------------------------------------------


def streams_never_overlapped(a: Evidence) -> list[Finding]:
    """A device with two or more streams carrying work (at least 2 activities each in the window) where
    a stream never ran at the same time as the others: their common busy time is under 1% of the smaller
    side's busy time. One finding per device.

    Cost: the shorter side's busy time (what could have run under the other side); with every stream
    serialized, the total busy time of all but the busiest stream. No saving is estimated (what overlap
    is possible depends on the data dependencies the waits express): 0.
    """
    g = a.graph
    if g is None or not g.activities:
        return []
    m = a.model
    lo, hi, wall = a.window.start_us, a.window.end_us, a.window.dur_us
    inside = (g.act_end > lo) & (g.act_start < hi)
    out: list[Finding] = []
    for device, acts in g.act_by_device.items():
        work: dict[int, I64] = {}
        mine = acts[inside[acts]]
        mine = mine[group_order(g.act_lane[mine])]  # by lane (one sort), each lane's in activity order
        cuts = np.flatnonzero(np.diff(g.act_lane[mine])) + 1
        for idx in np.split(mine, cuts):  # a lane is on one device: its activities are all here
            lane = int(g.act_lane[idx[0]]) if len(idx) else -1
            if len(idx) >= MIN_STREAM_ACTIVITIES and m.lanes[lane].stream >= 0:
                work[lane] = idx
        if len(work) < 2:
            continue
        busy = {lane: intervals.total(*_busy(g, idx, lo, hi)) for lane, idx in work.items()}
        alone: dict[int, float] = {}  # serialized stream -> busy time that could have overlapped
        for lane, idx in work.items():
            rest = np.concatenate([r for other, r in work.items() if other != lane])
            rest_busy = intervals.total(*_busy(g, rest, lo, hi))
            both = intervals.total(*_busy(g, np.concatenate([idx, rest]), lo, hi))
            common = busy[lane] + rest_busy - both
            smaller = min(busy[lane], rest_busy)
            if smaller > 0 and common < OVERLAP_SHARE * smaller:
                alone[lane] = smaller
        if not alone:
            continue
        lanes = sorted(alone, key=lambda lane: m.lanes[lane].stream)
        if len(alone) == len(work):  # all serialized: all but the busiest could have hidden under it
            cost = sum(busy.values()) - max(busy.values())
            hidden = [lane for lane in lanes if lane != max(busy, key=lambda k: busy[k])]
            what = f"streams {_streams(m, lanes)} of GPU {device} never ran at the same time"
        else:
            cost = sum(alone.values())
            hidden = lanes
            others = sorted(set(work) - set(alone), key=lambda lane: m.lanes[lane].stream)
            what = (
                f"{_plural('stream', lanes)} {_streams(m, lanes)} of GPU {device} never ran at the same "
                f"time as {_plural('stream', others)} {_streams(m, others)}"
            )
        site = _top_site(m, g, np.concatenate([work[lane] for lane in hidden]))
        where = f" (work launched at {site})" if site else ""
        out.append(
            Finding(
                "streams_never_overlapped",
                severity(cost, wall),
                f"{what}{where}: {ratio(cost, wall):.1%} of the window could overlap",
                site,
                len(alone),
                cost,
                0.0,
                advice.STREAMS_SERIALIZED,
            )
        )
    return out


# ----- unsynchronized_pinned_readback ------------------------------------------------------------------


def unsynchronized_pinned_readback(a: Evidence) -> list[Finding]:
    """A ``non_blocking`` device-to-host copy into pinned memory (``Memcpy DtoH (Device -> Pinned)`` by a
    ``cudaMemcpyAsync`` that did not block) with no blocking call on the host after it, before its step
    ends (or, without steps, before the trace ends), that waits for the copy: no event, stream or device
    synchronize (nor blocking copy) whose awaited activities are the copy or work that ran after it on
    the device (later on its stream, or waiting on it through events).

    The host may read the buffer before the copy landed: a correctness risk, high severity whatever it
    costs. Cost and saving: 0. One finding per call site (per op and API without python stacks).
    """
    g = a.graph
    if g is None or not g.activities:
        return []
    m = a.model
    ev = m.events
    lo, hi = a.window.start_us, a.window.end_us
    pinned = _by_name(m, lambda s: "DtoH" in s and "Pinned" in s)[ev.name[g.act_event]]
    async_call = _by_name(m, memcpy_is_async)
    candidates: list[int] = []
    for i in np.flatnonzero(pinned & (ev.kind[g.act_event] == EventKind.MEMCPY) & (g.act_call >= 0)).tolist():
        c = int(g.act_call[i])
        e = int(g.call_event[c])
        if (
            ev.api[e] == ApiKind.MEMCPY
            and async_call[ev.name[e]]
            and g.call_blocking[c] == Blocking.NO
            and lo <= g.call_start[c] <= hi
        ):
            candidates.append(i)
    if not candidates:
        return []
    blocking = np.flatnonzero(g.call_blocking != Blocking.NO)
    blocking = blocking[np.argsort(g.call_start[blocking], kind="stable")]
    groups: dict[CallSite | tuple[str, str], list[int]] = {}
    for i in candidates:
        c = int(g.act_call[i])
        if not _waited_for(g, i, c, blocking, _deadline(a, float(g.call_start[c]))):
            site = _site_of_call(m, g, c)
            op_event = int(ev.op[int(g.call_event[c])])
            op = m.name_of(op_event) if op_event >= 0 else ""
            groups.setdefault(site or (op, m.name_of(int(g.call_event[c]))), []).append(i)
    out: list[Finding] = []
    for key, copies in groups.items():
        if isinstance(key, CallSite):
            site, where = key, f" at {key}"
        else:
            site, where = None, f" in {key[0] or key[1]} (no python stack)"
        out.append(
            Finding(
                "unsynchronized_pinned_readback",
                Severity.HIGH,
                f"correctness risk: non_blocking copy to pinned host memory{where} is never waited for "
                f"before its step ends: {len(copies)}x",
                site,
                len(copies),
                0.0,
                0.0,
                advice.UNSYNCHRONIZED_READBACK,
            )
        )
    return out


def _deadline(a: Evidence, t: float) -> float:
    """The end of the step that ``t`` falls in; the end of the trace outside every step."""
    for step in a.model.steps:
        if step.start_us <= t < step.end_us:
            return step.end_us
    return float("inf")


def _waited_for(g: Graph, copy: int, call: int, blocking: I64, deadline: float) -> bool:
    """Whether a blocking call starting after ``call`` and before ``deadline`` waits for ``copy`` or for
    an activity that cannot start before ``copy`` ended (stream order and event waits)."""
    start = float(g.call_start[call])
    copy_start = float(g.act_start[copy])
    k = int(np.searchsorted(g.call_start[blocking], start, side="left"))
    for b in blocking[k:].tolist():
        if g.call_start[b] >= deadline:
            return False
        if b != call and any(_after(g, w, copy, copy_start) for w in g.call_waits[b]):
            return True
    return False


def _after(g: Graph, w: int, copy: int, copy_start: float) -> bool:
    """Whether activity ``w`` is ``copy`` or follows it through stream order and event waits (edges go
    forward in time, so the search stops at activities that started before the copy)."""
    todo, seen = [w], set()
    while todo:
        x = todo.pop()
        if x == copy:
            return True
        if x in seen or g.act_start[x] < copy_start:
            continue
        seen.add(x)
        p = int(g.act_prev[x])
        if p >= 0:
            todo.append(p)
        todo.extend(g.act_waits[x])
    return False
