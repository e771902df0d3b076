"""Critical path: walk back from the window's end, at each node taking the predecessor that finished last.

Segments are typed ``host`` (host work, API calls included), ``input`` (host time inside data loading),
``device`` (an activity), ``launch`` (from a launch call's start to its activity's start), ``sync`` (from the
awaited completion to the blocking call's return) and ``idle`` (a stream waiting on another stream, or
nothing known). The segments tile the window, so the path's length equals the window.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

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


@dataclass(frozen=True)
class Segment:
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
    def __init__(self, g: Graph, start_us: float, input_by_lane: dict[int, tuple[F64, F64]]) -> None:
        self.g = g
        self.start = start_us
        self.inputs = input_by_lane
        self.segments: list[Segment] = []
        self.calls_by_lane: dict[int, tuple[F64, I64]] = {}
        for lane in np.unique(g.call_lane).tolist():
            idx = np.flatnonzero(g.call_lane == lane)
            self.calls_by_lane[lane] = (np.maximum.accumulate(g.call_end[idx]), idx)

    def add(self, kind: Kind, lane: int, event: int, lo: float, hi: float) -> bool:
        """Record [lo, hi] clipped to the window; False once the window's start is reached."""
        lo_c = max(lo, self.start)
        if hi > lo_c:
            self.segments.append(Segment(kind, lane, event, lo_c, hi))
        return lo > self.start

    def host_work(self, lane: int, lo: float, hi: float) -> bool:
        """Host time between calls, split into ``input`` where the thread was loading data."""
        s, e = self.inputs.get(lane, (np.zeros(0), np.zeros(0)))
        cut = hi
        if len(s):
            k = int(np.searchsorted(s, hi, side="left")) - 1
            while k >= 0 and e[k] > lo and cut > lo:
                in_lo, in_hi = max(s[k], lo), min(e[k], cut)
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
        g = self.g
        ends, idx = self.calls_by_lane.get(lane, (np.zeros(0), np.zeros(0, np.int64)))
        k = int(np.searchsorted(ends, t, side="right")) - 1
        if below >= 0:
            k = min(k, below - 1)
        if k < 0 or g.call_end[idx[k]] <= self.start:
            self.host_work(lane, self.start, t)
            return None
        c = int(idx[k])
        end = min(float(g.call_end[c]), t)
        if not self.host_work(lane, end, t):
            return None
        if g.call_waits[c] and float(g.call_awaited[c]) > g.call_start[c]:
            a = max(g.call_waits[c], key=lambda x: float(g.act_end[x]))
            done = min(float(g.act_end[a]), end)
            return (
                ("device", a, done, -1)
                if self.add(Kind.SYNC, lane, int(g.call_event[c]), done, end)
                else None
            )
        start = float(g.call_start[c])
        return (
            ("host", lane, start, k) if self.add(Kind.HOST, lane, int(g.call_event[c]), start, end) else None
        )

    def device_step(self, a: int, t: float) -> State:
        g = self.g
        lane, start = int(g.act_lane[a]), float(g.act_start[a])
        if not self.add(Kind.DEVICE, lane, int(g.act_event[a]), start, min(float(g.act_end[a]), t)):
            return None
        ready: list[tuple[float, bool, str, int]] = []  # (ready time, not a launch, how, who)
        c = int(g.act_call[a])
        if c >= 0:
            ready.append((float(g.call_start[c] + g.act_latency[a]), False, "launch", c))
        p = int(g.act_prev[a])
        if p >= 0:
            ready.append((float(g.act_end[p] + g.act_queue_gap[a]), True, "stream", p))
        ready.extend((float(g.act_end[w]), True, "event", w) for w in g.act_waits[a])
        if not ready:
            self.add(Kind.IDLE, lane, -1, self.start, start)
            return None
        _, _, how, who = max(ready)
        if how == "launch":
            call_start, host_lane = float(g.call_start[who]), int(g.call_lane[who])
            if not self.add(Kind.LAUNCH, host_lane, int(g.call_event[who]), call_start, start):
                return None
            return ("host", host_lane, call_start, -1)
        prev_end = min(float(g.act_end[who]), start)
        return ("device", who, prev_end, -1) if self.add(Kind.IDLE, lane, -1, prev_end, start) else None


State = tuple[str, int, float, int] | None  # (host | device, lane or activity, time, call bound)


def _merged(segments: list[Segment]) -> list[Segment]:
    """Join touching segments of one kind on one lane (host work and the calls inside it, for example)."""
    out: list[Segment] = []
    for s in segments:
        if (
            out
            and out[-1].kind == s.kind
            and out[-1].lane == s.lane
            and abs(out[-1].end_us - s.start_us) < 1e-9
        ):
            last = out[-1]
            out[-1] = Segment(
                s.kind, s.lane, last.event if last.event >= 0 else s.event, last.start_us, s.end_us
            )
        else:
            out.append(s)
    return out
