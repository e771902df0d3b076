"""Where an arrow of the annotated trace can end: a time inside one of the trace's own slices on a lane.

Perfetto UI and chrome://tracing bind a flow event to the slice open at its time on its thread (``s``, and
``f`` with ``bp: "e"``). A critical-path segment does not always lie inside an event of its lane: a
stream's idle time waiting for other work has none, a thread's time between calls neither, and a
hand-off segment can begin before the call it belongs to. ``Anchors`` picks a time inside a slice for
each end from the trace model's events, so every arrow binds to a slice the viewer draws.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from stallscope.analyzer.core.model import F64, EventTable

_SCAN = 256  # slices looked at backwards from a time before searching the whole lane


class Anchors:
    """The slices (events with a duration) of the lanes asked for, by start time."""

    def __init__(self, events: EventTable, lanes: Iterable[int]) -> None:
        timed = events.dur > 0
        self._slices: dict[int, tuple[F64, F64]] = {}  # lane -> (starts, ends), by start
        for lane in set(lanes):
            rows = np.flatnonzero((events.lane == lane) & timed)  # the table is in time order
            self._slices[lane] = (events.ts[rows], events.end[rows])

    def awaited(self, lane: int, start: float, end: float) -> float | None:
        """A time inside ``[start, end)`` and inside a slice of ``lane``; else inside the last slice that
        began before ``end`` (the work that was waited for); None when the lane has no slice there."""
        found = self._inside(lane, start, end)
        if found is not None or lane not in self._slices:
            return found
        ts, ends = self._slices[lane]
        hi = int(np.searchsorted(ts, end, side="left"))
        return _middle(float(ts[hi - 1]), float(ends[hi - 1])) if hi > 0 else None

    def waiter(self, lane: int, start: float, end: float) -> float | None:
        """A time inside ``[start, end)`` and inside a slice of ``lane`` (the waiting call); else inside
        the first slice that begins from ``start`` on (the work that went on once the wait was over);
        None when the lane has no slice there."""
        found = self._inside(lane, start, end)
        if found is not None or lane not in self._slices:
            return found
        ts, ends = self._slices[lane]
        lo = int(np.searchsorted(ts, start, side="left"))
        return _middle(float(ts[lo]), float(ends[lo])) if lo < len(ts) else None

    def _inside(self, lane: int, start: float, end: float) -> float | None:
        """The middle of the overlap of ``[start, end)`` with the latest-starting slice of ``lane`` that
        overlaps it (the innermost call there), when that overlap has a time strictly inside it."""
        if lane not in self._slices or end <= start:
            return None
        ts, ends = self._slices[lane]
        hi = int(np.searchsorted(ts, end, side="left"))
        for j in range(hi - 1, max(hi - _SCAN, 0) - 1, -1):
            if ends[j] > start:
                return _overlap_middle(float(ts[j]), float(ends[j]), start, end)
        if hi > _SCAN:  # only long slices that began earlier may still be open: look at all of them
            open_ = np.flatnonzero(ends[: hi - _SCAN] > start)
            if len(open_):
                j = int(open_[-1])
                return _overlap_middle(float(ts[j]), float(ends[j]), start, end)
        return None


def _overlap_middle(a0: float, a1: float, b0: float, b1: float) -> float | None:
    lo, hi = max(a0, b0), min(a1, b1)
    mid = lo + (hi - lo) / 2
    return mid if a0 < mid < a1 else None


def _middle(start: float, end: float) -> float:
    """A time inside ``[start, end)``: its middle (its start when too short to have one)."""
    mid = start + (end - start) / 2
    return mid if start <= mid < end else start
