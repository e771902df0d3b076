"""The dependency graph between host threads and device streams, as flat arrays.

Nodes are the *scheduling* events: outermost host API calls (launches, copies, syncs, event records and
waits) and device activities (kernels, copies, memsets). Edges (DESIGN.md §4), all forward in time:

- host program order: each call starts ``gap`` after the previous call on its thread ended (the gap is the
  host's own work, profiled or not);
- launch -> device start: an activity starts ``latency`` after its launch call started (the unqueued value);
- stream order: an activity starts after the previous activity on its stream ended (``queue_gap`` later);
- event record -> stream wait: an activity starts after the activity its stream waits for ended;
- device end -> sync return: a blocking call returns ``ret`` after the activities it waits for ended
  (device/stream/event synchronize, synchronous copies, copies to or from pageable memory, ``cudaFree``,
  a ``cudaMalloc`` that clearly waited for the device, and the launch calls of a blocking runtime that
  return after the work they launched: MTIA's ``runFunction``).

Other host API calls are host work inside the gaps. ``check`` verifies that every edge goes forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from stallscope.analyzer.core.arrays import distinct, group_order
from stallscope.analyzer.core.model import F64, I64, NO_ID, EventTable, Mask, TraceModel
from stallscope.analyzer.core.names import (
    ACTIVITY_KINDS,
    ApiKind,
    EventKind,
    collective_strings,
    memcpy_is_async,
)
from stallscope.analyzer.graph.edges import (
    MAX_BOUND_US,
    Activities,
    inferred_waits,
    latest_end,
    launch_latency,
    start_edges,
    wait_tolerance,
)
from stallscope.analyzer.graph.threads import Threads, handoffs

SYNC_OWN_US = 5.0  # host cost of a blocking call that waited: not observable, assumed small
_SCHEDULING = (
    ApiKind.LAUNCH,
    ApiKind.GRAPH_LAUNCH,
    ApiKind.MEMCPY,
    ApiKind.MEMSET,
    ApiKind.SYNC_DEVICE,
    ApiKind.SYNC_STREAM,
    ApiKind.SYNC_EVENT,
    ApiKind.EVENT_RECORD,
    ApiKind.STREAM_WAIT,
    ApiKind.MALLOC,  # allocator calls: cudaFree synchronises the device, cudaMalloc may (see _blocking)
    ApiKind.FREE,
)
#: allocator calls that synchronise the whole device (cudaFree: "implicitly synchronizes the device";
#: cudaFreeAsync / cudaFreeHost / cudaMallocAsync do not count)
_DEVICE_FREES = frozenset({"cudaFree", "cuMemFree", "cuMemFree_v2", "hipFree"})
_MALLOC_WAIT_MIN_US = 20.0  # a cudaMalloc shorter than this is not taken to have waited


class Blocking(IntEnum):
    NO = 0
    DEVICE = 1  # device-wide synchronize
    STREAM = 2
    EVENT = 3
    COPY = 4  # synchronous copy, or an async copy made synchronous by pageable memory
    ALLOCATOR = 5  # cudaFree (device-wide, as CUDA documents), or a cudaMalloc that clearly waited
    RUNTIME = 6  # a launch call of a blocking runtime that returned after the work it launched


@dataclass(frozen=True)
class Graph:
    """Host calls (``call_*``, sorted by thread then start) and device activities (``act_*``, sorted by
    stream then start). Indices in ``*_event`` point into the model's event table."""

    call_event: I64
    call_lane: I64
    call_start: F64
    call_end: F64
    call_gap: F64  # host time since the previous call on the thread ended (or the thread's first event)
    call_prev: I64  # previous call on the same thread, -1 for the first
    call_blocking: I64  # Blocking
    call_own: F64  # the call's own host time (its duration, or SYNC_OWN_US when it waited)
    call_ret: F64  # time from the awaited completion to the return (blocking calls)
    call_waits: tuple[tuple[int, ...], ...]  # activities a blocking call waits for
    call_awaited: F64  # observed completion of what it waits for (-inf when nothing)
    act_event: I64
    act_lane: I64
    act_device: I64
    act_start: F64
    act_end: F64
    act_call: I64  # launching call (-1: launched before the profile or not linked)
    act_from_return: npt.NDArray[
        np.bool_
    ]  # issued when its call returned (pageable HtoD copy: after staging)
    act_prev: I64  # previous activity on the same stream
    act_latency: F64  # unqueued launch latency
    act_queue_gap: F64  # start minus previous end on the stream (the stream-order edge's weight)
    act_waits: tuple[tuple[int, ...], ...]  # activities this one waits for (event record -> stream wait)
    act_wait_gap: tuple[
        tuple[float, ...], ...
    ]  # weight of each of those edges (start - their end if binding)
    thread_anchor: dict[int, float]  # first event start per host thread (gap of its first call)
    call_dep: I64  # the other thread's call whose work this call's preceding stretch waited for (-1: none)
    call_dep_at: F64  # when that thread's work ended (the handoff; NaN: none)
    call_after_wait: npt.NDArray[np.bool_]  # a stream wait call precedes it closely on its thread
    act_comm: npt.NDArray[np.bool_]  # a collective (communication) kernel, not compute
    act_typical: F64  # typical launch latency of the activity's device
    act_bound: F64  # the longest launch delay plausible on the activity's device
    wait_tolerance_us: float  # how soon after awaited work a held activity starts on this trace
    threads: Threads  # each thread's own work, to find handoffs (the critical path's tail uses it)

    @property
    def calls(self) -> int:
        return len(self.call_event)

    @property
    def activities(self) -> int:
        return len(self.act_event)

    @cached_property
    def act_by_device(self) -> dict[int, I64]:
        """Each device's activities (indices, in activity order), grouped with one sort: a pass that
        looks at each device in turn indexes this instead of scanning every activity per device."""
        order = np.argsort(self.act_device, kind="stable")
        device = self.act_device[order]
        keys, first = np.unique(device, return_index=True)
        bounds = np.append(first, len(order))
        return {int(k): order[bounds[i] : bounds[i + 1]] for i, k in enumerate(keys.tolist())}

    def device_acts(self, device: int) -> I64:
        """The activities of one device (indices, in activity order)."""
        return self.act_by_device.get(device, np.zeros(0, dtype=np.int64))

    @cached_property
    def memo(self) -> dict[str, Any]:
        """What a pass derives once from this graph (and its model) and reuses for each device, by the
        pass's key; filled on first use, never part of the graph's answers."""
        return {}

    def issued(self) -> F64:
        """When each activity was issued: its call's start (its return for a pageable HtoD copy), or its
        own start when no call is known."""
        at_call = np.where(
            self.act_from_return,
            per_call(self.call_end, self.act_call),
            per_call(self.call_start, self.act_call),
        )
        return np.asarray(np.where(self.act_call >= 0, at_call, self.act_start))

    def waited(self) -> F64:
        """Observed time each call spent waiting (0 for calls that did not block)."""
        return np.maximum(0.0, np.minimum(self.call_awaited, self.call_end) - self.call_start)


def per_call(values: npt.NDArray[np.generic], call: I64) -> npt.NDArray[np.generic]:
    """``values[call]`` where ``call >= 0``; elsewhere an arbitrary value (callers mask it with
    ``call >= 0``). Safe when there are no calls at all (a trace of device events only)."""
    if not len(values):
        return np.zeros(len(call), dtype=values.dtype)
    return np.asarray(values[np.maximum(call, 0)])


def build_graph(model: TraceModel) -> Graph:
    """Extract the scheduling graph from the model: vectorised, with Python loops only over blocking
    calls and stream waits."""
    ev = model.events
    acts = _activities(model)
    calls, call_of_event = _calls(model)
    act_call = _launching_call(model, acts, call_of_event)
    act_lane = ev.lane[acts].astype(np.int64)
    act_start, act_end = ev.ts[acts], ev.end[acts]
    act_prev = _previous_in_group(act_lane)
    call_lane = ev.lane[calls].astype(np.int64)
    call_start, call_end = ev.ts[calls], ev.end[calls]
    call_prev = _previous_in_group(call_lane)
    anchors = _thread_anchors(model)
    anchor_of = np.full(len(model.lanes), np.nan)
    anchor_of[list(anchors)] = list(anchors.values())
    call_gap = call_start - np.where(call_prev >= 0, call_end[np.maximum(call_prev, 0)], anchor_of[call_lane])
    act_device = _lane_devices(model)[act_lane]
    from_return = _issued_at_return(model, acts, act_call, calls)
    issued = np.where(
        act_call >= 0,
        np.where(from_return, per_call(call_end, act_call), per_call(call_start, act_call)),
        act_start,
    )
    issue = _IssueOrder(model, act_lane, issued)
    after_wait = _after_stream_wait(ev.api[calls], call_lane)
    graph_launch = (act_call >= 0) & (ev.api[per_call(calls, act_call)] == ApiKind.GRAPH_LAUNCH)
    info = Activities(
        act_lane, act_device, act_start, act_end, act_prev, issued, act_call,
        per_call(after_wait, act_call).astype(np.bool_) & (act_call >= 0), graph_launch,
    )  # fmt: skip
    recorded = _stream_waits(model, len(acts), issue)
    prev_end = info.prev_end()
    lat = launch_latency(act_start - issued, _free(info, recorded) & ~graph_launch, act_device)
    tol = wait_tolerance(act_start, prev_end, issued)
    has_records = any(recorded)
    streams = not has_records and bool(np.any(ev.api[calls] == ApiKind.STREAM_WAIT))
    act_waits, tol = inferred_waits(info, recorded, lat.typical, tol, streams)
    edges = start_edges(info, act_waits, lat)
    threads = Threads(model, call_lane, call_end)
    hand = handoffs(threads, call_lane, call_start, call_gap, call_prev)
    blocking, waits = _blocking(model, calls, acts, act_call, act_lane, issue)
    awaited = np.full(len(calls), -np.inf)
    for c in np.flatnonzero(blocking != Blocking.NO).tolist():
        awaited[c] = max(float(act_end[a]) for a in waits[c])
    waited = awaited > call_start
    duration = call_end - call_start
    call_own = np.where(waited, np.minimum(duration, SYNC_OWN_US), duration)
    with np.errstate(invalid="ignore"):
        ret = np.where(waited, call_end - awaited, np.minimum(call_end - awaited, 0.0))
    ret = np.where(np.isfinite(ret), ret, 0.0)
    return Graph(
        call_event=calls,
        call_lane=call_lane,
        call_start=call_start,
        call_end=call_end,
        call_gap=hand.own,
        call_prev=call_prev,
        call_blocking=blocking,
        call_own=call_own,
        call_ret=ret,
        call_waits=waits,
        call_awaited=awaited,
        act_event=acts,
        act_lane=act_lane,
        act_device=act_device,
        act_start=act_start,
        act_end=act_end,
        act_call=act_call,
        act_from_return=from_return,
        act_prev=act_prev,
        act_latency=edges.latency,
        act_queue_gap=edges.queue_gap,
        act_waits=act_waits,
        act_wait_gap=edges.wait_gap,
        thread_anchor=anchors,
        call_dep=hand.dep,
        call_dep_at=hand.at,
        call_after_wait=after_wait,
        act_comm=collective_strings(model.strings, ev.name[acts]) & (ev.kind[acts] == EventKind.KERNEL),
        act_typical=edges.typical,
        act_bound=edges.bound,
        wait_tolerance_us=tol,
        threads=threads,
    )


def _by_lane(model: TraceModel, mask: Mask) -> I64:
    """Indices of the events in ``mask``, sorted by lane, then time (the table is sorted by time)."""
    idx = np.flatnonzero(mask)
    return idx[group_order(model.events.lane[idx])].astype(np.int64)


def _activities(model: TraceModel) -> I64:
    ev = model.events
    on_device = np.array([lane.on_device for lane in model.lanes], dtype=np.bool_)
    return _by_lane(model, ev.is_kind(*ACTIVITY_KINDS) & on_device[ev.lane])


def _calls(model: TraceModel) -> tuple[I64, I64]:
    """Outermost scheduling API calls on host threads, and an event -> call index map (-1 elsewhere)."""
    ev = model.events
    host = np.array([not lane.on_device for lane in model.lanes], dtype=np.bool_)[ev.lane]
    is_api = ev.is_kind(EventKind.RUNTIME, EventKind.DRIVER) & host
    launched = np.zeros(len(ev), dtype=np.bool_)
    launched[ev.launch[ev.launch >= 0]] = True
    wanted = np.flatnonzero(is_api & (np.isin(ev.api, [int(k) for k in _SCHEDULING]) | launched))
    inner = np.zeros(len(wanted), dtype=np.bool_)
    up = ev.parent[wanted]
    for _ in range(64):  # an API call nested in another (a driver call inside a runtime call) is not a node
        live = np.flatnonzero(up >= 0)
        if not len(live):
            break
        inner[live] |= is_api[up[live]]
        up[live] = ev.parent[up[live]]
    node = np.zeros(len(ev), dtype=np.bool_)
    node[wanted[~inner]] = True
    calls = _by_lane(model, node)
    call_of_event = np.full(len(ev), NO_ID, dtype=np.int64)
    call_of_event[calls] = np.arange(len(calls))
    return calls, call_of_event


def _launching_call(model: TraceModel, acts: I64, call_of_event: I64) -> I64:
    """The call node that launched each activity: the launch event, or its outermost API ancestor."""
    ev = model.events
    at = ev.launch[acts].copy()
    out = np.where(at >= 0, call_of_event[np.maximum(at, 0)], NO_ID)
    for _ in range(64):
        todo = (out < 0) & (at >= 0)
        if not todo.any():
            break
        at[todo] = ev.parent[at[todo]]
        out[todo] = np.where(at[todo] >= 0, call_of_event[np.maximum(at[todo], 0)], NO_ID)
    return out


def _free(info: Activities, waits: tuple[tuple[int, ...], ...]) -> npt.NDArray[np.bool_]:
    """Activities launched onto an idle stream with nothing to wait for: their delay is launch latency."""
    wait_end = latest_end(info.end, waits)
    observed = info.start - info.issued
    return np.asarray(
        (info.call >= 0) & (info.prev_end() < info.issued) & (wait_end < info.issued) & (observed >= 0)
    )


_AFTER_WAIT_CALLS = 4  # a stream wait this many calls back on the thread still gates the next launch


def _after_stream_wait(api: npt.NDArray[np.int8], lane: I64) -> npt.NDArray[np.bool_]:
    """Per call: one of the few calls before it on its thread (or itself) is a stream wait."""
    n = len(api)
    pos = np.arange(n)
    last = np.where(api == ApiKind.STREAM_WAIT, pos, -(10**9))
    first_of_lane = np.concatenate([[True], lane[1:] != lane[:-1]]) if n else np.zeros(0, np.bool_)
    lane_start = np.maximum.accumulate(np.where(first_of_lane, pos, 0)) if n else pos
    last = np.maximum.accumulate(last) if n else last
    return np.asarray((last >= lane_start) & (pos - last <= _AFTER_WAIT_CALLS))


def _previous_in_group(group: I64) -> I64:
    prev = np.arange(len(group), dtype=np.int64) - 1
    if len(group):
        prev[0] = NO_ID
        prev[1:][group[1:] != group[:-1]] = NO_ID
    return prev


def _thread_anchors(model: TraceModel) -> dict[int, float]:
    ev = model.events
    out: dict[int, float] = {}
    for lane in model.lanes:
        if not lane.on_device:
            on = np.flatnonzero(ev.lane == lane.id)
            if len(on):
                out[lane.id] = float(ev.ts[on[0]])
    return out


class _IssueOrder:
    """Activities of each stream in issue order (their launch call's start), for 'the last activity issued
    on stream S before time t' - what a synchronize or an event record refers to."""

    def __init__(self, model: TraceModel, act_lane: I64, issued: F64) -> None:
        self._lane_of = {(lane.device, lane.stream): lane.id for lane in model.lanes if lane.on_device}
        self._streams: dict[int, tuple[F64, I64]] = {}
        for lane in distinct(act_lane).tolist():
            idx = np.flatnonzero(act_lane == lane)
            order = np.argsort(issued[idx], kind="stable")
            self._streams[lane] = (issued[idx][order], idx[order].astype(np.int64))
        self.device_lanes: dict[int, list[int]] = {}
        for lane in self._streams:
            self.device_lanes.setdefault(model.lanes[lane].device, []).append(lane)

    def lane(self, device: int, stream: int) -> int | None:
        return self._lane_of.get((device, stream))

    def last_before(self, lane: int | None, t: float) -> int:
        if lane is None or lane not in self._streams:
            return NO_ID
        times, idx = self._streams[lane]
        k = int(np.searchsorted(times, t, side="left")) - 1
        return int(idx[k]) if k >= 0 else NO_ID

    def first_after(self, lane: int | None, t: float) -> int:
        if lane is None or lane not in self._streams:
            return NO_ID
        times, idx = self._streams[lane]
        k = int(np.searchsorted(times, t, side="right"))
        return int(idx[k]) if k < len(idx) else NO_ID


class CallActivities:
    """Call index -> the activities it launched (indices into the activity arrays, ascending): one sort,
    then a slice per lookup (no Python object per activity)."""

    def __init__(self, act_call: I64, calls: int) -> None:
        linked = np.flatnonzero(act_call >= 0)
        self._acts = linked[np.argsort(act_call[linked], kind="stable")]
        self._offsets = np.searchsorted(act_call[self._acts], np.arange(calls + 1), side="left")

    def of(self, call: int) -> list[int]:
        if not 0 <= call < len(self._offsets) - 1:
            return []
        out: list[int] = self._acts[self._offsets[call] : self._offsets[call + 1]].tolist()
        return out

    def last(self, call: int) -> int:
        """The last activity the call launched (-1: none)."""
        if not 0 <= call < len(self._offsets) - 1:
            return NO_ID
        hi = int(self._offsets[call + 1])
        return int(self._acts[hi - 1]) if hi > int(self._offsets[call]) else NO_ID


def _sync_records(model: TraceModel) -> dict[int, int]:
    """Host call event -> its ``cuda_sync`` device record (which names the stream/event waited on)."""
    ev = model.events
    rec = np.flatnonzero((ev.kind == EventKind.SYNC) & (ev.launch >= 0))
    return dict(zip(ev.launch[rec].tolist(), rec.tolist(), strict=True))


def _blocking(
    model: TraceModel, calls: I64, acts: I64, act_call: I64, act_lane: I64, issue: _IssueOrder
) -> tuple[I64, tuple[tuple[int, ...], ...]]:
    """Which calls block, and on which activities (the last issued on the stream/device/event before)."""
    ev = model.events
    kinds = np.full(len(calls), Blocking.NO, dtype=np.int64)
    waits: list[tuple[int, ...]] = [()] * len(calls)
    records = _sync_records(model)
    recording = calls[ev.api[calls] == ApiKind.EVENT_RECORD]
    record_calls = dict(zip(ev.correlation[recording].tolist(), recording.tolist(), strict=True))
    acts_of_call = CallActivities(act_call, len(calls))
    main_device = _main_device(model, act_lane)
    pageable = np.array(["Pageable" in name for name in model.strings], dtype=np.bool_)[ev.name[acts]]
    touches_pageable = np.zeros(len(calls), dtype=np.bool_)
    touches_pageable[act_call[pageable & (act_call >= 0)]] = True
    sync_name = ~np.array([memcpy_is_async(name) for name in model.strings], dtype=np.bool_)[ev.name[calls]]
    api = ev.api[calls]
    device_free = np.array([name in _DEVICE_FREES for name in model.strings], dtype=np.bool_)[ev.name[calls]]
    candidates = np.flatnonzero(
        np.isin(api, [ApiKind.SYNC_DEVICE, ApiKind.SYNC_STREAM, ApiKind.SYNC_EVENT])
        | ((api == ApiKind.MEMCPY) & (touches_pageable | sync_name))
        | ((api == ApiKind.FREE) & device_free)
        | (api == ApiKind.MALLOC)
    )
    for c in candidates.tolist():
        e = int(calls[c])
        call_api = ApiKind(int(ev.api[e]))
        start = float(ev.ts[e])
        record = records.get(e)
        device = int(ev.device[record]) if record is not None and ev.device[record] >= 0 else main_device
        kind: Blocking = Blocking.NO
        on: tuple[int, ...] = ()
        if call_api == ApiKind.MEMCPY:  # synchronous, or to/from pageable memory (filtered above)
            on = _copy_waits(model, acts, acts_of_call.of(c), act_lane, issue, start)
            # CUDA only *may* synchronise a pageable copy: trust the trace when the call returned first
            returned = float(ev.end[e]) + _COPY_SKEW_US
            on = tuple(a for a in on if a >= 0 and float(ev.end[acts[a]]) <= returned)
            kind = Blocking.COPY
        elif call_api == ApiKind.SYNC_STREAM:
            if record is not None:
                lane = issue.lane(device, int(ev.stream[record]))
            else:
                lane = _last_launched_lane(c, calls, ev.lane, acts_of_call, act_lane)
            kind, on = Blocking.STREAM, (issue.last_before(lane, start),)
        elif call_api == ApiKind.SYNC_EVENT and record is not None:
            recorded = record_calls.get(int(ev.wait_corr[record]))
            if recorded is not None and ev.wait_stream[record] >= 0:
                lane = issue.lane(device, int(ev.wait_stream[record]))
                kind, on = Blocking.EVENT, (issue.last_before(lane, float(ev.ts[recorded])),)
        if call_api == ApiKind.SYNC_DEVICE or (call_api == ApiKind.SYNC_EVENT and record is None):
            kind = Blocking.DEVICE
            on = tuple(issue.last_before(lane, start) for lane in issue.device_lanes.get(device, []))
        elif call_api in (ApiKind.FREE, ApiKind.MALLOC):
            kind = Blocking.ALLOCATOR
            on = tuple(issue.last_before(lane, start) for lane in issue.device_lanes.get(device, []))
            if call_api == ApiKind.MALLOC and not _malloc_waited(ev, e, [int(acts[a]) for a in on if a >= 0]):
                on = ()
        on = tuple(a for a in on if a >= 0)
        if on:
            kinds[c], waits[c] = kind, on
    for c, on in _runtime_waits(model, calls, acts, act_call, kinds).items():
        kinds[c], waits[c] = Blocking.RUNTIME, on
    return kinds, tuple(waits)


_RUNTIME_MIN_US = 50.0  # a launch call shorter than this is not taken to have waited for its work
_RUNTIME_COVER = 0.5  # share of the call its own device work must fill


def _runtime_waits(
    model: TraceModel, calls: I64, acts: I64, act_call: I64, kinds: I64
) -> dict[int, tuple[int, ...]]:
    """Launch calls of a blocking runtime (MTIA's ``runFunction``, a synchronous launch): the call ran at
    least ``_RUNTIME_MIN_US``, the work it launched started and ended inside it, and that work fills at
    least half of it. The host sat in the call waiting for the device: it waits for that work."""
    ev = model.events
    linked = np.flatnonzero(act_call >= 0)
    if not len(linked):
        return {}
    c = act_call[linked]
    api = ev.api[calls[c]]
    start, end = ev.ts[calls[c]], ev.end[calls[c]]
    a_start, a_end = ev.ts[acts[linked]], ev.end[acts[linked]]
    inside = (
        np.isin(api, [ApiKind.LAUNCH, ApiKind.GRAPH_LAUNCH])
        & (kinds[c] == Blocking.NO)
        & (end - start >= _RUNTIME_MIN_US)
        & (a_start >= start - CLOCK_SKEW_US)
        & (a_end <= end + CLOCK_SKEW_US)
    )
    if not inside.any():
        return {}
    filled = np.bincount(c[inside], weights=(a_end - a_start)[inside], minlength=len(calls))
    dur = ev.end[calls] - ev.ts[calls]
    out: dict[int, list[int]] = {}
    for a, call in zip(linked[inside].tolist(), c[inside].tolist(), strict=True):
        if filled[call] >= _RUNTIME_COVER * dur[call]:
            out.setdefault(call, []).append(a)
    return {call: tuple(on) for call, on in out.items()}


CLOCK_SKEW_US = 5.0  # host and device clocks may disagree by this much
_COPY_SKEW_US = CLOCK_SKEW_US  # a copy call that returned more than this before its work ended did not wait


def _malloc_waited(ev: EventTable, call: int, awaited: list[int]) -> bool:
    """A cudaMalloc does not synchronise by itself, but one that follows a cache flush (the caching
    allocator freeing its blocks when memory runs out) waits with its cudaFree calls. Taken to have waited
    only when it is clearly so: it ran long, the device was busy when it started, and it returned right
    after the device work issued before it ended."""
    if not awaited:
        return False
    start, end = float(ev.ts[call]), float(ev.end[call])
    done = max(float(ev.end[a]) for a in awaited)
    dur = end - start
    return (
        dur >= _MALLOC_WAIT_MIN_US
        and done > start + 0.5 * dur
        and -_COPY_SKEW_US <= end - done <= max(_COPY_SKEW_US, 0.05 * dur)
    )


#: a launch call longer than this (the longest plausible launch latency) did host work of its own
LONG_LAUNCH_CALL_US = MAX_BOUND_US


def _issued_at_return(model: TraceModel, acts: I64, act_call: I64, calls: I64) -> npt.NDArray[np.bool_]:
    """Copies from pageable host memory to the device start after their call returns: the call waits for
    the stream, stages the data, returns, and only then is the DMA issued. So does the work of a launch
    call that ran longer than any launch latency and returned before its work started."""
    ev = model.events
    pageable_htod = np.array([("HtoD" in n and "Pageable" in n) for n in model.strings], dtype=np.bool_)
    linked = act_call >= 0
    call_event = per_call(calls, act_call)
    by_copy_call = linked & (ev.api[call_event] == ApiKind.MEMCPY)
    after = ev.ts[acts] >= ev.end[call_event]  # as recorded: otherwise it is an ordinary launch edge
    # a launch call that itself ran longer than any launch latency (first use: a module load) issued its
    # work when it returned: the time in it is the host's, not a delay of the device
    long_launch = (
        linked
        & np.isin(ev.api[call_event], [ApiKind.LAUNCH, ApiKind.GRAPH_LAUNCH])
        & (ev.end[call_event] - ev.ts[call_event] > LONG_LAUNCH_CALL_US)
    )
    return np.asarray((by_copy_call & pageable_htod[ev.name[acts]] | long_launch) & after)


def _copy_waits(
    model: TraceModel, acts: I64, mine: list[int], act_lane: I64, issue: _IssueOrder, start: float
) -> tuple[int, ...]:
    """What a blocking copy waits for (CUDA's rules): a copy from pageable host memory to the device
    synchronises its stream, stages the data and returns (the DMA may finish later); a copy to the host, or
    a synchronous device copy, returns once the copy itself is done."""
    out: list[int] = []
    for a in mine:
        name = model.name_of(int(acts[a]))
        if "HtoD" in name and "Pageable" in name:
            out.append(issue.last_before(int(act_lane[a]), start))
        else:
            out.append(a)
    return tuple(out)


def _last_launched_lane(
    c: int,
    calls: I64,
    lane_of_event: npt.NDArray[np.int32],
    acts_of_call: CallActivities,
    act_lane: I64,
) -> int | None:
    """Stream of the most recent activity this thread launched before call ``c`` (a stream sync without
    a ``cuda_sync`` record does not say which stream it waits for)."""
    thread = lane_of_event[calls[c]]
    for back in range(c - 1, max(-1, c - 10_000), -1):
        if lane_of_event[calls[back]] != thread:
            return None
        mine = acts_of_call.last(back)
        if mine >= 0:
            return int(act_lane[mine])
    return None


def _lane_devices(model: TraceModel) -> I64:
    """Per lane, its device (-1 on the host)."""
    return np.array([lane.device for lane in model.lanes], dtype=np.int64)


def _main_device(model: TraceModel, act_lane: I64) -> int:
    if not len(act_lane):
        return 0
    devices = _lane_devices(model)[act_lane]
    values, counts = np.unique(devices, return_counts=True)
    return int(values[np.argmax(counts)])


def _stream_waits(model: TraceModel, n_acts: int, issue: _IssueOrder) -> tuple[tuple[int, ...], ...]:
    """``Stream Wait Event`` records: the next activity issued on the waiting stream after the
    ``cudaStreamWaitEvent`` call waits for the activity the event was recorded after."""
    ev = model.events
    waits: dict[int, list[int]] = {}
    records = np.flatnonzero((ev.kind == EventKind.SYNC) & (ev.wait_corr >= 0) & (ev.wait_stream >= 0))
    if not len(records):
        return ((),) * n_acts
    recording = np.flatnonzero(ev.api == ApiKind.EVENT_RECORD)
    record_call_start = dict(zip(ev.correlation[recording].tolist(), ev.ts[recording].tolist(), strict=True))
    for r in records.tolist():
        if model.name_of(r) != "Stream Wait Event" or ev.launch[r] < 0:
            continue
        recorded_at = record_call_start.get(int(ev.wait_corr[r]))
        if recorded_at is None:
            continue
        device = int(ev.device[r]) if ev.device[r] >= 0 else model.lanes[int(ev.lane[r])].device
        event_act = issue.last_before(issue.lane(device, int(ev.wait_stream[r])), recorded_at)
        target = issue.first_after(issue.lane(device, int(ev.stream[r])), float(ev.ts[ev.launch[r]]))
        if event_act >= 0 and target >= 0:
            waits.setdefault(target, []).append(event_act)
    out: list[tuple[int, ...]] = [()] * n_acts
    for target, on in waits.items():
        out[target] = tuple(on)
    return tuple(out)
