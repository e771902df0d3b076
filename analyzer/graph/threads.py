"""Waits between host threads: which thread a thread was waiting for while it sat idle.

A trace records what each thread did, not what it waited for. When the main thread calls ``backward()``
the autograd engine's thread issues the backward pass while the main thread blocks; when a worker thread
finishes, the thread that joined it goes on. Both look the same in a trace: one thread has (almost) no
events of its own for a while, another thread works through that time and finishes just before the first
one resumes. Such a stretch is a *handoff*: the waiting thread's time there is not host work of its own,
and the critical path goes through the other thread.

A stretch ``[lo, hi]`` of thread T (between two of its calls, or before the window's end) is a handoff
to thread M when all of these hold:

- it is at least ``MIN_GAP_US`` long;
- T's own events starting in it (shorter than half of it: a frame or op that spans the whole wait, such
  as Python's ``backward`` frame, is the wait itself) cover less than half of it;
- M, a thread that issues device calls, has events in it spanning at least half of it, and its last event
  there ends within a quarter of the stretch before ``hi`` (T resumed soon after M finished).

The thread M that finished last wins.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stallscope.analyzer.core.arrays import group_order
from stallscope.analyzer.core.model import F64, I64, LaneKind, Mask, TraceModel
from stallscope.analyzer.core.names import STEP_PREFIX, EventKind

MIN_GAP_US = 50.0
_OWN_SHARE = 0.5
_SPAN_SHARE = 0.5
_RESUME_SHARE = 0.25
#: event kinds that are a host thread's own work (the profiler's spans and instants are not)
_WORK = (
    EventKind.OTHER,
    EventKind.CPU_OP,
    EventKind.ANNOTATION,
    EventKind.PYTHON,
    EventKind.RUNTIME,
    EventKind.DRIVER,
)


@dataclass(frozen=True)
class Handoff:
    lane: int  # the thread waited for
    call: int  # its last call (graph call index) ending by ``at``
    at: float  # when its last work before the waiting thread resumed ended


class _Lane:
    __slots__ = ("call_ends", "calls", "ends", "ends_sorted", "first", "last", "starts")

    def __init__(self, starts: F64, ends: F64, calls: I64, call_ends: F64) -> None:
        self.starts, self.ends = starts, ends  # this thread's work events, by start
        self.ends_sorted = np.sort(ends)
        self.calls, self.call_ends = calls, call_ends  # its calls, ends non-decreasing (running max)
        self.first = float(starts[0]) if len(starts) else np.inf
        self.last = float(ends.max()) if len(ends) else -np.inf


class Threads:
    """Each host thread's own work and calls, to find handoffs between threads (see the module doc)."""

    def __init__(self, model: TraceModel, call_lane: I64, call_end: F64) -> None:
        ev = model.events
        host = np.array([lane.kind == LaneKind.HOST for lane in model.lanes], dtype=np.bool_)
        step = np.array([s.startswith(STEP_PREFIX) for s in model.strings], dtype=np.bool_)
        work = ev.is_kind(*_WORK) & host[ev.lane] & ~step[ev.name]
        idx = np.flatnonzero(work)
        lanes_of_work = ev.lane[idx]
        order = group_order(lanes_of_work)  # stable: each lane's events stay by start
        idx, lanes_of_work = idx[order], lanes_of_work[order]
        bounds = np.flatnonzero(np.diff(lanes_of_work)) + 1
        self.lanes: dict[int, _Lane] = {}
        call_order = group_order(call_lane)
        call_bounds = np.flatnonzero(np.diff(call_lane[call_order])) + 1
        calls_of: dict[int, I64] = {
            int(call_lane[chunk[0]]): chunk for chunk in np.split(call_order, call_bounds) if len(chunk)
        }
        for chunk in np.split(idx, bounds):
            if not len(chunk):
                continue
            lane = int(ev.lane[chunk[0]])
            mine = calls_of.get(lane, np.zeros(0, dtype=np.int64))
            ends = np.maximum.accumulate(call_end[mine]) if len(mine) else np.zeros(0)
            self.lanes[lane] = _Lane(ev.ts[chunk], ev.end[chunk], mine, ends)
        self.scheduling = [lane for lane, t in self.lanes.items() if len(t.calls)]
        # the calling threads' work in one table, by start and by end: a question about a stretch of time
        # looks only at the threads with work in it, not at every thread (traces can have thousands)
        calling = [self.lanes[lane] for lane in self.scheduling]
        counts = [len(t.starts) for t in calling]
        starts = np.concatenate([t.starts for t in calling]) if calling else np.zeros(0)
        ends = np.concatenate([t.ends for t in calling]) if calling else np.zeros(0)
        by_start, by_end = np.argsort(starts, kind="stable"), np.argsort(ends, kind="stable")
        self._starts = starts[by_start]
        rank = np.repeat(np.arange(len(calling), dtype=np.int64), counts)
        self._ends, self._end_rank = ends[by_end], rank[by_end]
        self._first = np.array([t.first for t in calling], dtype=np.float64)

    def first(self, lane: int) -> float:
        """When the thread's first event started (+inf for a thread without events)."""
        t = self.lanes.get(lane)
        return t.first if t else np.inf

    def last(self, lane: int) -> float:
        t = self.lanes.get(lane)
        return t.last if t else -np.inf

    def last_lane(self, end_us: float, default: int) -> int:
        """The host thread whose work ended last by ``end_us`` (``default`` on ties or without any): among
        the threads that issue device calls, or among all threads when none does."""
        best, best_end = default, self._last_end(default, -np.inf, end_us)
        for lane in self.scheduling or list(self.lanes):
            at = self._last_end(lane, -np.inf, end_us)
            if at > best_end + 1e-9:
                best, best_end = lane, at
        return best

    def waited_for(self, lane: int, lo: float, hi: float) -> Handoff | None:
        """The thread ``lane`` waited for during ``[lo, hi]``, or None when it was doing its own work."""
        dur = hi - lo
        if dur < MIN_GAP_US or len(self.scheduling) < 2 or self.own(lane, lo, hi) >= _OWN_SHARE * dur:
            return None
        for other in self._resumable(hi - _RESUME_SHARE * dur, hi, _SPAN_SHARE * dur):
            if other == lane:
                continue
            t = self.lanes[other]
            k = int(t.starts.searchsorted(lo, side="left"))
            if k >= len(t.starts) or t.starts[k] >= hi:
                continue
            at = self._last_end(other, lo, hi)
            if at - float(t.starts[k]) < _SPAN_SHARE * dur or hi - at > _RESUME_SHARE * dur:
                continue
            j = int(t.call_ends.searchsorted(at, side="right")) - 1
            if j < 0:
                continue
            return Handoff(other, int(t.calls[j]), at)  # the latest end (the first thread on a tie)
        return None

    def _resumable(self, lo: float, hi: float, span: float) -> list[int]:
        """The calling threads with work ending in ``[lo, hi]`` that ran for at least ``span`` from their
        first event to their last end there (both bounds widened by a rounding's worth): the only ones
        whose last work before ``hi`` can end after ``lo`` having started ``span`` before. Latest last
        end first, then in the order of ``scheduling``."""
        slack = 1e-9 * (abs(lo) + abs(hi) + abs(span) + 1.0)
        a = int(self._ends.searchsorted(lo - slack, side="left"))
        b = int(self._ends.searchsorted(hi, side="right"))
        ends, rank = self._ends[a:b][::-1], self._end_rank[a:b][::-1]
        # a thread whose last end there is not ``span`` after its first event has no end that is: the
        # ends are tested first (one pass), and only those that pass are sorted (a stretch as long as the
        # trace, a thread's first call, can hold the ends of thousands of short-lived threads)
        long = ends - self._first[rank] >= span - slack
        ends, rank = ends[long], rank[long]
        threads, latest = np.unique(rank, return_index=True)  # each thread's last end by hi (ends ascend)
        at = ends[latest]
        order = np.lexsort((threads, -at))
        return [self.scheduling[r] for r in threads[order].tolist()]

    def busy_elsewhere(self, call_lane: I64, lo: F64, hi: F64) -> Mask:
        """Per stretch ``(lo, hi)`` of a thread ``call_lane``: another calling thread started work inside
        it."""
        starts = self._starts
        count = starts.searchsorted(hi, side="left") - starts.searchsorted(lo, side="right")
        order = group_order(call_lane)
        cuts = np.flatnonzero(np.diff(call_lane[order])) + 1
        for chunk in np.split(order, cuts):  # minus each thread's own starts inside its stretches
            t = self.lanes.get(int(call_lane[chunk[0]])) if len(chunk) else None
            if t is not None and len(t.calls):
                own = np.sort(t.starts)
                count[chunk] -= own.searchsorted(hi[chunk], side="left") - own.searchsorted(
                    lo[chunk], side="right"
                )
        return np.asarray(count > 0, dtype=np.bool_)

    def _last_end(self, lane: int, lo: float, hi: float) -> float:
        t = self.lanes.get(lane)
        if t is None:
            return -np.inf
        k = int(t.ends_sorted.searchsorted(hi, side="right")) - 1
        return float(t.ends_sorted[k]) if k >= 0 and t.ends_sorted[k] > lo else -np.inf

    def own(self, lane: int, lo: float, hi: float) -> float:
        """Time in ``[lo, hi]`` covered by the thread's events that start there and are shorter than half
        of it."""
        t = self.lanes.get(lane)
        if t is None:
            return 0.0
        a, b = np.searchsorted(t.starts, [lo, hi], side="left")
        s, e = t.starts[a:b], np.minimum(t.ends[a:b], hi)
        short = (e - s) < 0.5 * (hi - lo)
        s, e = s[short], e[short]
        if not len(s):
            return 0.0
        run = np.maximum.accumulate(e)
        new = np.ones(len(s), dtype=np.bool_)
        new[1:] = s[1:] > run[:-1]
        first = np.flatnonzero(new)
        last = np.append(first[1:] - 1, len(s) - 1)
        return float(np.sum(run[last] - s[first]))


@dataclass(frozen=True)
class CallHandoffs:
    dep: I64  # per call: the other thread's call its preceding stretch waited for (-1: none)
    at: F64  # when that thread's work ended (NaN: none)
    own: F64  # the waiting thread's own work inside the stretch (its program-order gap from then on)


def handoffs(
    threads: Threads, call_lane: I64, call_start: F64, call_gap: F64, call_prev: I64
) -> CallHandoffs:
    """For each call, whether the stretch before it (``call_gap`` long) was a wait for another thread.
    Only stretches long enough, on traces with two or more calling threads, are looked at, and only where
    another thread had events inside them. A thread's first call depends on the thread that was working
    when the thread began (its first event), if one was: a thread that starts late was started, or
    handed work, by another."""
    n = len(call_lane)
    dep = np.full(n, -1, dtype=np.int64)
    at = np.full(n, np.nan)
    own = call_gap.copy()
    if len(threads.scheduling) < 2:
        return CallHandoffs(dep, at, own)
    lo = call_start - call_gap
    candidates = call_gap >= MIN_GAP_US
    busy_elsewhere = threads.busy_elsewhere(call_lane, lo, call_start)
    for c in np.flatnonzero(candidates & busy_elsewhere).tolist():
        lane, a, b = int(call_lane[c]), float(lo[c]), float(call_start[c])
        h = threads.waited_for(lane, a, b)
        if h is not None:
            dep[c], at[c], own[c] = h.call, h.at, threads.own(lane, a, b)
    begin = min((t.first for t in threads.lanes.values()), default=0.0)
    for c in np.flatnonzero(call_prev < 0).tolist():  # each thread's first call
        lane = int(call_lane[c])
        h = threads.waited_for(lane, begin, min(threads.first(lane), float(call_start[c])))
        if h is not None and h.call != c:
            dep[c], at[c] = h.call, h.at
    return CallHandoffs(dep, at, own)
