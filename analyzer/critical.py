"""Critical path: walk back from the window's end, at each node taking the predecessor that finished last.

Segments are typed ``host`` (host work, API calls included), ``input`` (host time inside data loading),
``device`` (an activity), ``launch`` (from a launch call's start to its activity's start), ``sync`` (from the
awaited completion to the blocking call's return) and ``idle`` (a stream waiting on another stream, or
nothing known). The segments tile the window, so the path's length equals the window.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple

import numpy as np

from analyzer.graph import Graph
from analyzer.model import F64, I64


class Kind(str, Enum):
    HOST = "host"
    INPUT = "input"
    DEVICE = "device"
    LAUNCH = "launch"
    SYNC = "sync"
    IDLE = "idle"


class Segment(NamedTuple):
    kind: Kind
    lane: int
    event: int  # the event the segment belongs to (-1: host work between calls)
    start_us: float
    end_us: float


@dataclass(frozen=True)
class CriticalPath:
    length_us: float
    breakdown_us: dict[Kind, float]
    segments: tuple[Segment, ...]

    @property
    def bottleneck(self) -> Kind:
        return max(self.breakdown_us, key=lambda k: self.breakdown_us[k])


def critical_path(
    g: Graph, start_us: float, end_us: float, main_lane: int, input_by_lane: dict[int, tuple[F64, F64]]
) -> CriticalPath:
    """Walk back from ``end_us``. The window's end waits for its host thread and for the device work
    still running then: when an activity is running at the end, the walk starts there, else on the main
    thread."""
    walk = _Walk(g, start_us, input_by_lane)
    running = (
        np.flatnonzero((g.act_start < end_us) & (g.act_end >= end_us)) if g.activities else np.zeros(0, int)
    )
    if len(running):
        a = int(running[np.argmax(g.act_start[running])])
        walk.run(("device", a, end_us, -1))
    else:
        walk.run(("host", main_lane, end_us, -1))
    segments = _merged(walk.segments[::-1])
    breakdown = {k: 0.0 for k in Kind}
    for s in segments:
        breakdown[s.kind] += s.end_us - s.start_us
    return CriticalPath(sum(breakdown.values()), breakdown, tuple(segments))


class _Walk:
    """The backward walk, over plain Python lists (numpy scalar access would dominate on long paths)."""

    def __init__(self, g: Graph, start_us: float, input_by_lane: dict[int, tuple[F64, F64]]) -> None:
        self.start = start_us
        self.inputs = input_by_lane
        self.segments: list[tuple[Kind, int, int, float, float]] = []
        self.calls_by_lane: dict[int, tuple[F64, I64]] = {}
        for lane in np.unique(g.call_lane).tolist():
            idx = np.flatnonzero(g.call_lane == lane)
            self.calls_by_lane[lane] = (np.maximum.accumulate(g.call_end[idx]), idx)
        self.c_start, self.c_end = g.call_start.tolist(), g.call_end.tolist()
        self.c_lane, self.c_event = g.call_lane.tolist(), g.call_event.tolist()
        self.c_awaited, self.c_waits = g.call_awaited.tolist(), g.call_waits
        self.a_start, self.a_end = g.act_start.tolist(), g.act_end.tolist()
        self.a_lane, self.a_event = g.act_lane.tolist(), g.act_event.tolist()
        self.a_call, self.a_prev, self.a_waits = g.act_call.tolist(), g.act_prev.tolist(), g.act_waits
        self.a_wait_gap = g.act_wait_gap
        self.a_from_return = g.act_from_return.tolist()
        self.a_latency, self.a_queue_gap = g.act_latency.tolist(), g.act_queue_gap.tolist()

    def add(self, kind: Kind, lane: int, event: int, lo: float, hi: float) -> bool:
        """Record [lo, hi] clipped to the window; False once the window's start is reached."""
        lo_c = lo if lo > self.start else self.start
        if hi > lo_c:
            self.segments.append((kind, lane, event, lo_c, hi))
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
        paths can cross between host and device hundreds of thousands of times)."""
        while state is not None:
            kind, node, t, below = state
            state = self.host_step(node, t, below) if kind == "host" else self.device_step(node, t)

    def host_step(self, lane: int, t: float, below: int) -> State:
        """At time ``t`` on a host thread: the host work since the last call that ended by then (only
        calls before position ``below`` of the thread, so zero-length calls cannot loop)."""
        ends, idx = self.calls_by_lane.get(lane, (np.zeros(0), np.zeros(0, np.int64)))
        k = int(np.searchsorted(ends, t, side="right")) - 1
        if below >= 0:
            k = min(k, below - 1)
        if k < 0 or self.c_end[int(idx[k])] <= self.start:
            self.host_work(lane, self.start, t)
            return None
        c = int(idx[k])
        end = min(self.c_end[c], t)
        if not self.host_work(lane, end, t):
            return None
        waits = self.c_waits[c]
        if waits and self.c_awaited[c] > self.c_start[c]:
            a = max(waits, key=self.a_end.__getitem__)
            done = min(self.a_end[a], end)
            return ("device", a, done, -1) if self.add(Kind.SYNC, lane, self.c_event[c], done, end) else None
        start = self.c_start[c]
        return ("host", lane, start, k) if self.add(Kind.HOST, lane, self.c_event[c], start, end) else None

    def device_step(self, a: int, t: float) -> State:
        lane, start = self.a_lane[a], self.a_start[a]
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
            issued = min(self.c_end[who] if self.a_from_return[a] else self.c_start[who], start)
            host_lane = self.c_lane[who]
            if not self.add(Kind.LAUNCH, host_lane, self.c_event[who], issued, start):
                return None
            return ("host", host_lane, issued, -1)
        prev_end = min(self.a_end[who], start)
        return ("device", who, prev_end, -1) if self.add(Kind.IDLE, lane, -1, prev_end, start) else None


State = tuple[str, int, float, int] | None  # (host | device, lane or activity, time, call bound)


def _merged(segments: list[tuple[Kind, int, int, float, float]]) -> list[Segment]:
    """Join touching segments of one kind on one lane (host work and the calls inside it, for example)."""
    out: list[list[Any]] = []
    for kind, lane, event, lo, hi in segments:
        if out and out[-1][0] == kind and out[-1][1] == lane and abs(out[-1][4] - lo) < 1e-9:
            last = out[-1]
            last[2] = last[2] if last[2] >= 0 else event
            last[4] = hi
        else:
            out.append([kind, lane, event, lo, hi])
    return [Segment(*s) for s in out]
