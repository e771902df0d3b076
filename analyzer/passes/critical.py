"""Critical path: walk back from the window's end, at each node taking the predecessor that finished last.

Segments are typed ``host`` (host work, API calls included), ``input`` (host time inside data loading),
``device`` (a compute activity: kernel, copy, memset), ``communication`` (a collective kernel), ``launch`` (from a launch call's start to its activity's start), ``sync`` (from the
awaited completion to the blocking call's return), ``untraced`` (host time no event of the thread covers,
longer than Python's overhead between ops: a sampled or filtered trace) and ``idle`` (a stream waiting on
another stream, or nothing known). The segments tile the window, so the path's length equals the window.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from stallscope.analyzer.core import intervals
from stallscope.analyzer.core.arrays import distinct
from stallscope.analyzer.core.model import F64, I64
from stallscope.analyzer.graph.dependency import Graph, per_call
from stallscope.analyzer.graph.edges import has_waits


class Kind(str, Enum):
    HOST = "host"
    INPUT = "input"
    DEVICE = "device"
    LAUNCH = "launch"
    SYNC = "sync"
    IDLE = "idle"
    COMMUNICATION = "communication"  # a collective kernel (NCCL/RCCL): transfer, or waiting for other ranks
    UNTRACED = "untraced"  # host time on a thread that no event of the trace covers (sampled/filtered)


#: What each bottleneck means, in the words every view (terminal, report, dashboard) opens its verdict with.
class Segment(NamedTuple):
    kind: Kind
    lane: int
    event: int  # the event the segment belongs to (-1: host work between calls)
    start_us: float
    end_us: float


_KINDS = tuple(Kind)
# segments as columns: kind (index into Kind), lane, event, lo, hi
_Columns = tuple[npt.NDArray[np.int8], I64, I64, F64, F64]
_NO_SEGMENTS: _Columns = (
    np.zeros(0, np.int8),
    np.zeros(0, np.int64),
    np.zeros(0, np.int64),
    np.zeros(0),
    np.zeros(0),
)
_NO_CALLS: tuple[F64, I64] = (np.zeros(0), np.zeros(0, np.int64))  # a thread without calls
_NO_MARKS: tuple[F64, F64, npt.NDArray[np.int8]] = (np.zeros(0), np.zeros(0), np.zeros(0, np.int8))
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
    untraced_by_lane: dict[int, tuple[F64, F64]] | None = None,
) -> CriticalPath:
    """Walk back from ``end_us``. The window's end waits for its host thread and for the device work
    still running then: when an activity is running at the end, the walk starts there, else on the main
    thread (``inputs.main_thread``). A thread's time between calls is ``input`` inside data loading
    (``input_by_lane``), ``untraced`` where none of its events covers it (``untraced_by_lane``), else
    ``host``."""
    walk = _Walk(g, start_us, _marked(input_by_lane, untraced_by_lane or {}))
    walk.run(_first_state(g, end_us, main_lane))
    kind, lane_of, event, lo, hi = _merged(walk)
    totals = np.bincount(kind, weights=hi - lo, minlength=len(_KINDS))
    breakdown = {k: float(totals[i]) for i, k in enumerate(_KINDS)}
    return CriticalPath(float(totals.sum()), breakdown, kind, lane_of, event, lo, hi, walk.stopped)


#: per thread, disjoint intervals of its time between calls that are not host work, as (starts, ends, kinds)
_Marked = dict[int, tuple[F64, F64, npt.NDArray[np.int8]]]


def _marked(inputs: dict[int, tuple[F64, F64]], untraced: dict[int, tuple[F64, F64]]) -> _Marked:
    """Data loading and untraced stretches of each thread, in one sorted list (they never overlap: data
    loading is covered by events, untraced time by none)."""
    out: _Marked = {}
    for lane in set(inputs) | set(untraced):
        parts = [
            (s, e, np.full(len(s), _INDEX[kind], np.int8))
            for (s, e), kind in (
                (inputs.get(lane, intervals.NONE), Kind.INPUT),
                (untraced.get(lane, intervals.NONE), Kind.UNTRACED),
            )
            if len(s)
        ]
        s, e, k = (np.concatenate(c) for c in zip(*parts, strict=True))
        order = np.argsort(s, kind="stable")
        out[lane] = (s[order], e[order], k[order])
    return out


def _first_state(g: Graph, end_us: float, main_lane: int) -> State:
    """Where the walk starts: the activity still running at the window's end that started last, else the
    main thread at the end."""
    running = (
        np.flatnonzero((g.act_start < end_us) & (g.act_end >= end_us)) if g.activities else np.zeros(0, int)
    )
    if len(running):
        return ("device", int(running[np.argmax(g.act_start[running])]), end_us, -1)
    return ("host", main_lane, end_us, -1)


class _Walk:
    """The backward walk: single steps over plain Python values (numpy scalar access would dominate on long
    paths), runs of like steps as arrays."""

    def __init__(self, g: Graph, start_us: float, marked: _Marked) -> None:
        self.start = start_us
        self.marked = marked
        self.threads = g.threads
        self.anchor = g.thread_anchor  # a thread's first event of any kind: it exists from then on
        # the segments, appended backwards in time: single steps' in a list per column, then moved to blocks
        self.kind: list[int] = []
        self.lane: list[int] = []
        self.event: list[int] = []
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.blocks: list[_Columns] = []  # the segments before those in the lists, as arrays (runs' too)
        self.calls_by_lane: dict[int, tuple[F64, I64]] = {}
        position = np.zeros(g.calls, dtype=np.int64)
        for lane in distinct(g.call_lane).tolist():
            idx = np.flatnonzero(g.call_lane == lane)
            self.calls_by_lane[lane] = (np.maximum.accumulate(g.call_end[idx]), idx)
            position[idx] = np.arange(len(idx))
        # the columns stay arrays, read one value at a time with ``.item`` (a Python number): the walk
        # touches a few nodes per crossing between host and device, converting whole columns costs more
        self.position = position  # a call's place among its thread's calls
        self.c_start, self.c_end = g.call_start, g.call_end
        self.c_lane, self.c_event = g.call_lane, g.call_event
        self.c_awaited, self.c_waits = g.call_awaited, g.call_waits
        self.c_dep, self.c_dep_at = g.call_dep, g.call_dep_at
        self.a_start, self.a_end = g.act_start, g.act_end
        self.a_lane, self.a_event = g.act_lane, g.act_event
        self.a_from_return = g.act_from_return
        self.a_comm = g.act_comm
        self.a_typical, self.a_bound = g.act_typical, g.act_bound
        self.budget = 4 * (g.calls + g.activities) + 1000  # steps: each consumes a call or goes back
        self.stopped = ""
        how, who = _predecessors(g)
        self.pred_how, self.pred_who = how, who
        # stream-order steps in a row: from activity a, the walk goes to a - 1, a - 2, ... on its stream
        # while each one's latest predecessor is the previous activity there (done with arrays, see _run_stream)
        idx = np.arange(g.activities)
        by_stream = (how == _STREAM) & (who == idx - 1)
        self.chain = idx - np.maximum.accumulate(np.where(by_stream, -1, idx)) if len(idx) else idx
        self.plain: dict[int, I64] = {}  # per thread, the host steps in a row from each call (_plain_steps)
        self.came_from: tuple[int, float] | None = None  # the thread and time of the last handoff taken

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
        """Host time between calls, split into ``input`` where the thread was loading data and
        ``untraced`` where none of its events covers it."""
        s, e, kinds = self.marked.get(lane, _NO_MARKS)
        cut = hi
        if len(s):
            k = int(s.searchsorted(hi, side="left")) - 1
            while k >= 0 and e[k] > lo and cut > lo:
                in_lo, in_hi = max(float(s[k]), lo), min(float(e[k]), cut)
                if in_hi < cut:
                    self.add(Kind.HOST, lane, -1, in_hi, cut)
                if in_hi > in_lo:
                    self.add(_KINDS[kinds.item(k)], lane, -1, in_lo, in_hi)
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
                self.add(
                    Kind.IDLE, node if kind == "host" else self.a_lane.item(node), -1, self.start, min(t, at)
                )
                return
            seen.add(state)
            if kind == "host":
                steps = self._plain_run(node, t, below)
                if steps > 1 and self.budget >= steps:
                    state, at, seen = self._run_host(node, below, steps, at, seen)
                else:
                    state = self.host_step(node, t, below)
            elif self.chain.item(node) > 1 and self.budget >= self.chain.item(node):
                state, at, seen = self._run_stream(node, t, at, seen)
            else:
                state = self.device_step(node, t)

    def _run_stream(self, a: int, t: float, at: float, seen: set[State]) -> tuple[State, float, set[State]]:
        """``device_step`` repeated down a run of stream-order predecessors (a, a - 1, ...), as arrays:
        the same segments, states, cycle checks and budget as the steps one by one. Returns the next
        state and the walk's ``at`` and ``seen`` after the run."""
        m = self.chain.item(a)
        nodes = np.arange(a, a - m, -1)
        a_start = self.a_start[nodes]
        x = np.minimum(a_start, self.a_end[nodes - 1])
        times = np.minimum.accumulate(np.concatenate(([t], x)))  # times[j]: the walk's time at nodes[j]
        if not np.isfinite(times).all():
            return self.device_step(a, t), at, seen

        def state_at(j: int) -> State:
            return ("device", a - j, float(times[j]), -1)

        visit = self._visits(state_at, times, m, at, seen)
        starts = np.minimum(a_start[:visit], times[:visit])
        los = np.stack([starts, times[1 : visit + 1]], axis=1).ravel()
        his = np.stack([np.minimum(self.a_end[nodes[:visit]], times[:visit]), starts], axis=1).ravel()
        events = np.stack([self.a_event[nodes[:visit]], np.full(visit, -1)], axis=1).ravel()
        kinds = np.stack(
            [
                np.where(self.a_comm[nodes[:visit]], _INDEX[Kind.COMMUNICATION], _INDEX[Kind.DEVICE]),
                np.full(visit, _INDEX[Kind.IDLE]),
            ],
            axis=1,
        ).ravel()
        if not self._record(kinds, self.a_lane.item(a), events, los, his):
            return None, at, seen
        at, seen = self._after_run(state_at, times, visit, at, seen)
        return state_at(visit), at, seen

    def _plain_run(self, lane: int, t: float, below: int) -> int:
        """How many plain host steps in a row (``_plain_steps``) start at ("host", lane, t, below): none
        unless the walk is at the start of the call at position ``below``, where such a step leaves it."""
        if below < 0:
            return 0
        steps = self.plain.get(lane)
        if steps is None:
            steps = self.plain[lane] = self._plain_steps(lane)
        if below >= len(steps) or t != self.c_start.item(self.calls_by_lane[lane][1].item(below)):
            return 0
        return steps.item(below)

    def _plain_steps(self, lane: int) -> I64:
        """Per call position p of the thread, how many plain ``host_step`` calls in a row the walk takes
        from the start of call p. A plain step goes to the call just before (position p - 1, as the
        search by end time finds it), with no handoff recorded on call p, that call ending after the
        window's start, not waiting on the device, starting no later than call p, and no data loading
        between the two: it records the host work between the calls and the call, and leaves the walk at
        the start of call p - 1."""
        ends, idx = self.calls_by_lane.get(lane, _NO_CALLS)
        pos = np.arange(len(idx))
        if not len(idx):
            return pos
        t = self.c_start[idx]
        k = np.minimum(ends.searchsorted(t, side="right") - 1, pos - 1)
        prev = idx[np.maximum(pos - 1, 0)]
        end = np.minimum(self.c_end[prev], t)
        blocking = self.c_awaited[idx] > t  # and waits on something (looked up only where this holds)
        late = np.flatnonzero(blocking)
        blocking[late] = has_waits([self.c_waits[c] for c in idx[late].tolist()])
        s, e, _kinds = self.marked.get(lane, _NO_MARKS)
        if len(s):  # host_work's first check: a marked interval overlaps (end, t)
            i = s.searchsorted(t, side="left") - 1
            loading = (i >= 0) & (e[np.maximum(i, 0)] > end) & (t > end)
        else:
            loading = np.zeros(len(idx), dtype=np.bool_)
        plain = (
            (k == pos - 1)
            & (pos >= 1)
            & (self.c_dep[idx] < 0)
            & (self.c_end[prev] > self.start)
            & ~blocking[np.maximum(pos - 1, 0)]
            & ~loading
            & (self.c_start[prev] <= t)
        )
        return pos - np.maximum.accumulate(np.where(plain, -1, pos))

    def _run_host(
        self, lane: int, below: int, m: int, at: float, seen: set[State]
    ) -> tuple[State, float, set[State]]:
        """``host_step`` repeated down ``m`` plain steps from the start of the call at position ``below``
        (see ``_plain_steps``), as arrays: the same segments, states, cycle checks and budget as the steps
        one by one. Returns the next state and the walk's ``at`` and ``seen`` after the run."""
        calls = self.calls_by_lane[lane][1][below - m : below + 1][::-1]  # the walk at its start: j steps in
        times = self.c_start[calls]  # times[j]: the walk's time after j steps

        def state_at(j: int) -> State:
            return ("host", lane, float(times[j]), below - j)

        visit = self._visits(state_at, times, m, at, seen)
        ends = np.minimum(self.c_end[calls[1 : visit + 1]], times[:visit])
        los = np.stack([ends, times[1 : visit + 1]], axis=1).ravel()  # the host work, then the call
        his = np.stack([times[:visit], ends], axis=1).ravel()
        events = np.stack([np.full(visit, -1), self.c_event[calls[1 : visit + 1]]], axis=1).ravel()
        if not self._record(np.full(len(los), _INDEX[Kind.HOST]), lane, events, los, his):
            return None, at, seen
        at, seen = self._after_run(state_at, times, visit, at, seen)
        return state_at(visit), at, seen

    def _visits(
        self, state_at: Callable[[int], State], times: F64, m: int, at: float, seen: set[State]
    ) -> int:
        """How many of a run's ``m`` states the walk takes one by one: a state after the first that it
        finds seen already (at the walk's lowest time) is a cycle, which the walk's loop reports."""
        for j in range(1, m):
            if float(times[j]) < at:
                break
            if state_at(j) in seen:
                return j
        return m

    def _record(self, kinds: I64, lane: int, events: I64, los: F64, his: F64) -> bool:
        """Record a run's segments (in the walk's order, back in time) as ``add`` would one by one: clipped
        to the window, empty ones left out, none after the first that reaches the window's start; False
        once it is reached."""
        done = np.flatnonzero(los <= self.start)
        end = int(done[0]) + 1 if len(done) else len(los)
        lo_c = np.maximum(los[:end], self.start)
        keep = his[:end] > lo_c
        self._flush()
        lanes = np.full(int(np.count_nonzero(keep)), lane, dtype=np.int64)
        self.blocks.append(
            (kinds[:end][keep].astype(np.int8), lanes, events[:end][keep], lo_c[keep], his[:end][keep])
        )
        return not len(done)

    def _flush(self) -> None:
        """Move the segments in the lists to a block of arrays (runs are recorded as arrays, kept so)."""
        if self.kind:
            self.blocks.append(
                (
                    np.array(self.kind, dtype=np.int8),
                    np.array(self.lane, dtype=np.int64),
                    np.array(self.event, dtype=np.int64),
                    np.array(self.lo, dtype=np.float64),
                    np.array(self.hi, dtype=np.float64),
                )
            )
            for column in (self.kind, self.lane, self.event, self.lo, self.hi):
                column.clear()

    def columns(self) -> _Columns:
        """Every segment recorded, in the walk's order (back in time)."""
        self._flush()
        if not self.blocks:
            return _NO_SEGMENTS
        kind, lane, event, lo, hi = zip(*self.blocks, strict=True)
        return (
            np.concatenate(kind),
            np.concatenate(lane),
            np.concatenate(event),
            np.concatenate(lo),
            np.concatenate(hi),
        )

    def _after_run(
        self, state_at: Callable[[int], State], times: F64, visit: int, at: float, seen: set[State]
    ) -> tuple[float, set[State]]:
        """The walk's budget, ``at`` and ``seen`` after taking a run's first ``visit`` states (``times[j]``
        the time of state j) as its loop would have: the loop counts the first and the next one."""
        self.budget -= visit - 1
        last = float(times[visit - 1])
        if last < at:  # the time went down in the run: seen holds the states since it last did
            at, seen = last, set()
            since = np.flatnonzero(times[1:visit] == last) + 1
        else:
            since = np.arange(1, visit)
        seen.update(state_at(j) for j in since.tolist())
        return at, seen

    def host_step(self, lane: int, t: float, below: int) -> State:
        """At time ``t`` on a host thread: the host work since the last call that ended by then (only
        calls before position ``below`` of the thread, so zero-length calls cannot loop). When the thread
        sat waiting for another thread there, the walk goes on in that thread."""
        ends, idx = self.calls_by_lane.get(lane, _NO_CALLS)
        k = int(ends.searchsorted(t, side="right")) - 1
        if below >= 0:
            k = min(k, below - 1)
        end = self.c_end.item(int(idx[k])) if k >= 0 else self.threads.first(lane)
        handoff = self._handoff(lane, idx, below, max(end, self.start), t)
        if handoff is not None and handoff[1] >= t - 1e-9 and self.came_from == (handoff[0], t):
            handoff = None  # two threads each waiting for the other at one instant: go on in this one
        self.came_from = (lane, handoff[1]) if handoff is not None else None
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
        if waits and self.c_awaited.item(c) > self.c_start.item(c):
            a = max(waits, key=self.a_end.item)
            done = min(self.a_end.item(a), end)
            return (
                ("device", a, done, -1)
                if self.add(Kind.SYNC, lane, self.c_event.item(c), done, end)
                else None
            )
        start = self.c_start.item(c)
        return (
            ("host", lane, start, k) if self.add(Kind.HOST, lane, self.c_event.item(c), start, end) else None
        )

    def _handoff(self, lane: int, idx: I64, below: int, lo: float, t: float) -> tuple[int, float] | None:
        """The thread this one waited for in ``[lo, t]`` and when its work ended: recorded on the call at
        position ``below`` (the walk is at its start), or looked for when the walk is not at a call."""
        if 0 <= below < len(idx):
            c = int(idx[below])
            dep = self.c_dep.item(c)
            if dep >= 0 and t >= self.c_start.item(c) - 1e-9:
                return self.c_lane.item(dep), min(self.c_dep_at.item(c), t)
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
        lane, start = self.a_lane.item(a), min(self.a_start.item(a), t)
        kind = Kind.COMMUNICATION if self.a_comm.item(a) else Kind.DEVICE
        if not self.add(kind, lane, self.a_event.item(a), start, min(self.a_end.item(a), t)):
            return None
        how, who = self.pred_how.item(a), self.pred_who.item(a)
        if who < 0:
            self.add(Kind.IDLE, lane, -1, self.start, start)
            return None
        if how == _LAUNCH:
            return self._launch(a, who, start)
        prev_end = min(self.a_end.item(who), start)
        return ("device", who, prev_end, -1) if self.add(Kind.IDLE, lane, -1, prev_end, start) else None

    def _launch(self, a: int, c: int, start: float) -> State:
        """From an activity's start back to its launch call: launch latency up to the device's plausible
        bound; a longer delay is the activity being held by something the trace does not show (idle)."""
        from_return = self.a_from_return.item(a)
        issued = min(self.c_end.item(c) if from_return else self.c_start.item(c), start)
        host_lane = self.c_lane.item(c)
        if start - issued > self.a_bound.item(a):
            held = min(issued + self.a_typical.item(a), start)
            if not self.add(Kind.IDLE, self.a_lane.item(a), -1, held, start):
                return None
            start = held
        if not self.add(Kind.LAUNCH, host_lane, self.c_event.item(c), issued, start):
            return None
        pos = self.position.item(c)
        return ("host", host_lane, issued, pos + 1 if from_return else pos)


State = tuple[str, int, float, int] | None  # (host | device, lane or activity, time, call bound)

_NONE, _LAUNCH, _STREAM, _EVENT = 0, 1, 2, 3  # an activity's latest predecessor: none, launch, stream, event


def _predecessors(g: Graph) -> tuple[npt.NDArray[np.int8], I64]:
    """Per activity, the predecessor that finished last (stream order wins a tie with the launch, a
    wait on another stream's work wins a tie with both) and which it is: a call index for ``_LAUNCH``,
    an activity index otherwise (-1 for ``_NONE``)."""
    n = g.activities
    how = np.full(n, _NONE, dtype=np.int8)
    who = np.full(n, -1, dtype=np.int64)
    if not n:
        return how, who
    linked = g.act_call >= 0
    issued = np.where(g.act_from_return, per_call(g.call_end, g.act_call), per_call(g.call_start, g.act_call))
    best = np.where(linked, issued + g.act_latency, -np.inf)
    how[linked], who[linked] = _LAUNCH, g.act_call[linked]
    has_prev = g.act_prev >= 0
    by_stream = np.where(has_prev, g.act_end[np.maximum(g.act_prev, 0)] + g.act_queue_gap, -np.inf)
    take = has_prev & (by_stream >= best)
    best = np.where(take, by_stream, best)
    how[take], who[take] = _STREAM, g.act_prev[take]
    for a in np.flatnonzero(has_waits(g.act_waits)).tolist():
        top = float(best[a])
        for w, gap in zip(g.act_waits[a], g.act_wait_gap[a], strict=True):
            if float(g.act_end[w]) + gap >= top:
                top, how[a], who[a] = float(g.act_end[w]) + gap, _EVENT, w
    return how, who


def _merged(walk: _Walk) -> tuple[npt.NDArray[np.int8], I64, I64, F64, F64]:
    """The walk's segments in time order, touching segments of one kind on one lane joined (host work and
    the calls inside it, for example); a joined segment keeps the first event it names."""
    kind, lane, event, lo, hi = walk.columns()
    kind, lane, event, lo, hi = kind[::-1], lane[::-1], event[::-1], lo[::-1], hi[::-1]
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
