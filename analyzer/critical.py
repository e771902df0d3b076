"""Critical path: walk back from the window's end, at each node taking the predecessor that finished last.

Segments are typed ``host`` (host work, API calls included), ``input`` (host time inside data loading),
``device`` (an activity), ``launch`` (from a launch call's start to its activity's start), ``sync`` (from the
awaited completion to the blocking call's return) and ``idle`` (a stream waiting on another stream, or
nothing known). The segments tile the window, so the path's length equals the window.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from analyzer.graph import Graph
from analyzer.model import F64, I64


class Kind(str, Enum):
    HOST = "host"
    INPUT = "input"
    DEVICE = "device"
    LAUNCH = "launch"
    SYNC = "sync"
    IDLE = "idle"


#: What each bottleneck means, in the words every view (terminal, report, dashboard) opens its verdict with.
VERDICT: dict[str, str] = {
    Kind.DEVICE.value: "device-bound: the GPU is the critical resource",
    Kind.HOST.value: "host-bound: the host did not feed the GPU fast enough",
    Kind.INPUT.value: "input-bound: data loading held the loop back",
    Kind.SYNC.value: "sync-bound: the host kept waiting for the GPU",
    Kind.LAUNCH.value: "launch-bound: launch latency dominates",
    Kind.IDLE.value: "stalled: the critical path is mostly idle waiting",
    "balanced": "balanced: host and device are both near saturation",
}


class Segment(NamedTuple):
    kind: Kind
    lane: int
    event: int  # the event the segment belongs to (-1: host work between calls)
    start_us: float
    end_us: float


_KINDS = tuple(Kind)
_INDEX = {k: i for i, k in enumerate(_KINDS)}


@dataclass(frozen=True)
class CriticalPath:
    """The path as columns (one row per merged segment; no object per node on large traces)."""

    length_us: float
    breakdown_us: dict[Kind, float]
    kind: npt.NDArray[np.int8]  # index into Kind
    lane: I64
    event: I64  # the event a segment belongs to (-1: host work between calls)
    start_us: F64
    end_us: F64
    stopped: str = ""  # why the walk stopped before the window's start ("": it did not)

    @property
    def bottleneck(self) -> Kind:
        return max(self.breakdown_us, key=lambda k: self.breakdown_us[k])

    @property
    def segments(self) -> tuple[Segment, ...]:
        """The segments as named tuples, in time order (made on demand: a view for reports and tests)."""
        kinds = [_KINDS[k] for k in self.kind.tolist()]
        return tuple(
            map(
                Segment,
                kinds,
                self.lane.tolist(),
                self.event.tolist(),
                self.start_us.tolist(),
                self.end_us.tolist(),
            )
        )


def critical_path(
    g: Graph,
    start_us: float,
    end_us: float,
    main_lane: int,
    input_by_lane: dict[int, tuple[F64, F64]],
) -> CriticalPath:
    """Walk back from ``end_us``. The window's end waits for its host thread and for the device work
    still running then: when an activity is running at the end, the walk starts there, else on the main
    thread (``inputs.main_thread``)."""
    walk = _Walk(g, start_us, input_by_lane)
    running = (
        np.flatnonzero((g.act_start < end_us) & (g.act_end >= end_us)) if g.activities else np.zeros(0, int)
    )
    if len(running):
        a = int(running[np.argmax(g.act_start[running])])
        walk.run(("device", a, end_us, -1))
    else:
        walk.run(("host", main_lane, end_us, -1))
    kind, lane_of, event, lo, hi = _merged(walk)
    totals = np.bincount(kind, weights=hi - lo, minlength=len(_KINDS))
    breakdown = {k: float(totals[i]) for i, k in enumerate(_KINDS)}
    return CriticalPath(float(totals.sum()), breakdown, kind, lane_of, event, lo, hi, walk.stopped)


class _Walk:
    """The backward walk, over plain Python lists (numpy scalar access would dominate on long paths)."""

    def __init__(self, g: Graph, start_us: float, input_by_lane: dict[int, tuple[F64, F64]]) -> None:
        self.start = start_us
        self.inputs = input_by_lane
        self.threads = g.threads
        self.anchor = g.thread_anchor  # a thread's first event of any kind: it exists from then on
        self.kind: list[int] = []  # the segments, appended backwards in time, one list per column
        self.lane: list[int] = []
        self.event: list[int] = []
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.calls_by_lane: dict[int, tuple[F64, I64]] = {}
        position = np.zeros(g.calls, dtype=np.int64)
        for lane in np.unique(g.call_lane).tolist():
            idx = np.flatnonzero(g.call_lane == lane)
            self.calls_by_lane[lane] = (np.maximum.accumulate(g.call_end[idx]), idx)
            position[idx] = np.arange(len(idx))
        self.position = position.tolist()  # a call's place among its thread's calls
        self.c_start, self.c_end = g.call_start.tolist(), g.call_end.tolist()
        self.c_lane, self.c_event = g.call_lane.tolist(), g.call_event.tolist()
        self.c_awaited, self.c_waits = g.call_awaited.tolist(), g.call_waits
        self.c_dep, self.c_dep_at = g.call_dep.tolist(), g.call_dep_at.tolist()
        self.a_start, self.a_end = g.act_start.tolist(), g.act_end.tolist()
        self.a_lane, self.a_event = g.act_lane.tolist(), g.act_event.tolist()
        self.a_call, self.a_prev, self.a_waits = g.act_call.tolist(), g.act_prev.tolist(), g.act_waits
        self.a_wait_gap = g.act_wait_gap
        self.a_from_return = g.act_from_return.tolist()
        self.a_latency, self.a_queue_gap = g.act_latency.tolist(), g.act_queue_gap.tolist()
        self.a_typical, self.a_bound = g.act_typical.tolist(), g.act_bound.tolist()
        self.budget = 4 * (g.calls + g.activities) + 1000  # steps: each consumes a call or goes back
        self.stopped = ""

    def add(self, kind: Kind, lane: int, event: int, lo: float, hi: float) -> bool:
        """Record [lo, hi] clipped to the window; False once the window's start is reached."""
        lo_c = lo if lo > self.start else self.start
        if hi > lo_c:
            self.kind.append(_INDEX[kind])
            self.lane.append(lane)
            self.event.append(event)
            self.lo.append(lo_c)
            self.hi.append(hi)
        return lo > self.start

    def host_work(self, lane: int, lo: float, hi: float) -> bool:
        """Host time between calls, split into ``input`` where the thread was loading data."""
        s, e = self.inputs.get(lane, (np.zeros(0), np.zeros(0)))
        cut = hi
        if len(s):
            k = int(np.searchsorted(s, hi, side="left")) - 1
            while k >= 0 and e[k] > lo and cut > lo:
                in_lo, in_hi = max(float(s[k]), lo), min(float(e[k]), cut)
                if in_hi < cut:
                    self.add(Kind.HOST, lane, -1, in_hi, cut)
                if in_hi > in_lo:
                    self.add(Kind.INPUT, lane, -1, in_lo, in_hi)
                cut = in_lo
                k -= 1
        return self.add(Kind.HOST, lane, -1, lo, cut) if cut > lo else lo > self.start

    def run(self, state: State) -> None:
        """Alternate between host threads and streams until the window's start is reached (iterative:
        paths can cross between host and device hundreds of thousands of times). Time never increases
        (``device_step`` clamps to the time it arrived at); a state seen again at the same time would
        repeat forever, and a walk that outlives its budget or steps forward in time has met a cycle in
        the recorded order: the walk ends there and the rest of the window is idle."""
        at, seen = np.inf, set[State]()
        while state is not None:
            kind, node, t, below = state
            self.budget -= 1
            if t < at:
                at, seen = t, set()
            elif state in seen or self.budget < 0 or t > at + 1e-6:
                self.stopped = "the recorded order has a cycle (an edge back in time): the rest is idle"
                self.add(Kind.IDLE, node if kind == "host" else self.a_lane[node], -1, self.start, min(t, at))
                return
            seen.add(state)
            state = self.host_step(node, t, below) if kind == "host" else self.device_step(node, t)

    def host_step(self, lane: int, t: float, below: int) -> State:
        """At time ``t`` on a host thread: the host work since the last call that ended by then (only
        calls before position ``below`` of the thread, so zero-length calls cannot loop). When the thread
        sat waiting for another thread there, the walk goes on in that thread."""
        ends, idx = self.calls_by_lane.get(lane, (np.zeros(0), np.zeros(0, np.int64)))
        k = int(np.searchsorted(ends, t, side="right")) - 1
        if below >= 0:
            k = min(k, below - 1)
        end = self.c_end[int(idx[k])] if k >= 0 else self.threads.first(lane)
        handoff = self._handoff(lane, idx, below, max(end, self.start), t)
        if handoff is not None:
            other, at = handoff
            if k >= 0:  # the thread resumed after the other finished
                return ("host", other, at, -1) if self.add(Kind.HOST, lane, -1, at, t) else None
            begun = min(max(self.anchor.get(lane, at), at), t)  # its own work since it began, then idle
            if not self.host_work(lane, begun, t) or not self.add(Kind.IDLE, lane, -1, at, begun):
                return None
            return ("host", other, at, -1)
        if k < 0 or end <= self.start:
            return self._thread_start(lane, t)
        c = int(idx[k])
        end = min(end, t)
        if not self.host_work(lane, end, t):
            return None
        waits = self.c_waits[c]
        if waits and self.c_awaited[c] > self.c_start[c]:
            a = max(waits, key=self.a_end.__getitem__)
            done = min(self.a_end[a], end)
            return ("device", a, done, -1) if self.add(Kind.SYNC, lane, self.c_event[c], done, end) else None
        start = self.c_start[c]
        return ("host", lane, start, k) if self.add(Kind.HOST, lane, self.c_event[c], start, end) else None

    def _handoff(self, lane: int, idx: I64, below: int, lo: float, t: float) -> tuple[int, float] | None:
        """The thread this one waited for in ``[lo, t]`` and when its work ended: recorded on the call at
        position ``below`` (the walk is at its start), or looked for when the walk is not at a call."""
        if 0 <= below < len(idx):
            c = int(idx[below])
            dep = self.c_dep[c]
            if dep >= 0 and t >= self.c_start[c] - 1e-9:
                return self.c_lane[dep], min(self.c_dep_at[c], t)
            return None
        h = self.threads.waited_for(lane, lo, t)
        return (h.lane, h.at) if h is not None else None

    def _thread_start(self, lane: int, t: float) -> State:
        """Before the thread's first call: its own work since its first event; before that event the
        thread did not exist yet, and the walk goes on in the thread that was working then (or is idle)."""
        first = min(max(self.anchor.get(lane, self.start), self.start), t)
        if not self.host_work(lane, first, t):
            return None
        h = self.threads.waited_for(lane, self.start, first)
        if h is not None and h.lane != lane:  # the thread that was working when this one began
            return ("host", h.lane, h.at, -1) if self.add(Kind.IDLE, lane, -1, h.at, first) else None
        self.add(Kind.IDLE, lane, -1, self.start, first)
        return None

    def device_step(self, a: int, t: float) -> State:
        # clamped: a trace whose launch times disagree with stream order can make a sync await an
        # activity that starts after the sync returned; going forward in time there loops forever
        lane, start = self.a_lane[a], min(self.a_start[a], t)
        if not self.add(Kind.DEVICE, lane, self.a_event[a], start, min(self.a_end[a], t)):
            return None
        best, how, who = -np.inf, "", -1  # the predecessor that finished last; stream order wins ties
        c = self.a_call[a]
        if c >= 0:
            issued = self.c_end[c] if self.a_from_return[a] else self.c_start[c]
            best, how, who = issued + self.a_latency[a], "launch", c
        p = self.a_prev[a]
        if p >= 0 and self.a_end[p] + self.a_queue_gap[a] >= best:
            best, how, who = self.a_end[p] + self.a_queue_gap[a], "stream", p
        for w, gap in zip(self.a_waits[a], self.a_wait_gap[a], strict=True):
            if self.a_end[w] + gap >= best:
                best, how, who = self.a_end[w] + gap, "event", w
        if who < 0:
            self.add(Kind.IDLE, lane, -1, self.start, start)
            return None
        if how == "launch":
            return self._launch(a, who, start)
        prev_end = min(self.a_end[who], start)
        return ("device", who, prev_end, -1) if self.add(Kind.IDLE, lane, -1, prev_end, start) else None

    def _launch(self, a: int, c: int, start: float) -> State:
        """From an activity's start back to its launch call: launch latency up to the device's plausible
        bound; a longer delay is the activity being held by something the trace does not show (idle)."""
        from_return = self.a_from_return[a]
        issued = min(self.c_end[c] if from_return else self.c_start[c], start)
        host_lane = self.c_lane[c]
        if start - issued > self.a_bound[a]:
            held = min(issued + self.a_typical[a], start)
            if not self.add(Kind.IDLE, self.a_lane[a], -1, held, start):
                return None
            start = held
        if not self.add(Kind.LAUNCH, host_lane, self.c_event[c], issued, start):
            return None
        pos = self.position[c]
        return ("host", host_lane, issued, pos + 1 if from_return else pos)


State = tuple[str, int, float, int] | None  # (host | device, lane or activity, time, call bound)


def _merged(walk: _Walk) -> tuple[npt.NDArray[np.int8], I64, I64, F64, F64]:
    """The walk's segments in time order, touching segments of one kind on one lane joined (host work and
    the calls inside it, for example); a joined segment keeps the first event it names."""
    kind = np.array(walk.kind[::-1], dtype=np.int8)
    lane = np.array(walk.lane[::-1], dtype=np.int64)
    event = np.array(walk.event[::-1], dtype=np.int64)
    lo = np.array(walk.lo[::-1], dtype=np.float64)
    hi = np.array(walk.hi[::-1], dtype=np.float64)
    if not len(kind):
        return kind, lane, event, lo, hi
    new = np.ones(len(kind), dtype=np.bool_)
    new[1:] = (kind[1:] != kind[:-1]) | (lane[1:] != lane[:-1]) | (np.abs(lo[1:] - hi[:-1]) >= 1e-9)
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(kind) - 1)
    named = np.where(event >= 0, np.arange(len(event)), len(event))  # first segment naming an event
    group = np.cumsum(new) - 1
    first_named = np.full(len(first), len(event))
    np.minimum.at(first_named, group, named)
    merged_event = np.where(first_named < len(event), event[np.minimum(first_named, len(event) - 1)], -1)
    return kind[first], lane[first], merged_event, lo[first], hi[last]
