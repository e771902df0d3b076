"""The edges into each device activity's start: launch latency, stream order and waits on other work.

An activity starts at the latest of: its launch plus the device's launch latency, the end of the previous
activity on its stream, and the end of the work it waits for on other streams. The weights are chosen so
that the recorded trace satisfies that equation exactly (the replay then reproduces it). Two quantities
are derived from the trace itself rather than fixed:

- the *launch latency* of each device: typical (the median delay of launches onto an idle stream) and
  plausible (up to four times their 90th percentile, at least 50 µs and at most 2 ms). A longer delay is
  not launch latency: something held the activity (another stream, a collective, a graph's own order, or
  something the trace does not show);
- the *wait tolerance*: how soon after the work it waited for a held activity starts (four times the
  median delay of activities queued behind their stream predecessor, within 3-50 µs; ROCm needs 10-20).

Waits on other streams come from the trace's ``Stream Wait Event`` records. Without them they are
inferred for activities that started late: from another stream's work that ended just before (within the
tolerance), from the graph launch's own earlier work (CUDA graphs), or - after a ``cudaStreamWaitEvent`` /
``hipStreamWaitEvent`` on the launching thread - from the work last issued on the device's other streams.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from stallscope.analyzer.core.arrays import distinct, group_order
from stallscope.analyzer.core.model import F64, I64

DEFAULT_LATENCY_US = 5.0  # launch latency when none can be measured
_MIN_BOUND_US = 50.0
MAX_BOUND_US = 2000.0
_BOUND_FACTOR = 4.0
_TOL_MIN_US, _TOL_MAX_US = 3.0, 50.0
_INFER_SLACK_US = 10.0  # unexplained start delay beyond which a wait on other work is looked for
_SCAN = 512  # activities looked at backwards from a late start


@dataclass(frozen=True)
class Latency:
    typical: F64  # per activity: its device's typical launch latency
    bound: F64  # per activity: the longest launch delay plausible on its device


def launch_latency(observed: F64, free: npt.NDArray[np.bool_], device: I64) -> Latency:
    """Typical and plausible launch latency per device, from launches onto an idle stream (``free``).
    Every device at once (a trace can have thousands): the devices with as many launches to measure are
    measured together, one row each (a row's percentile and median are those of its launches alone)."""
    order = group_order(device)  # each device's activities with one sort, not a scan per device
    on = device[order]
    new = np.ones(len(on), dtype=np.bool_)
    new[1:] = on[1:] != on[:-1]
    starts = np.flatnonzero(new)  # where each device's activities start in ``order``
    sizes = np.diff(np.append(starts, len(on)))
    measured = order[free[order]]  # each device's launches onto an idle stream, in activity order
    first = np.searchsorted(device[measured], on[starts], side="left")
    count = np.searchsorted(device[measured], on[starts], side="right") - first
    p90, median = np.zeros(len(starts)), np.zeros(len(starts))
    for n in distinct(count[count > 0]).tolist():
        rows = np.flatnonzero(count == n)
        sample = observed[measured[first[rows, None] + np.arange(n)]]
        p90[rows] = np.percentile(sample, 90, axis=1)
        median[rows] = np.median(sample, axis=1)
    bounds, typicals = [], []
    for n, p, m in zip(count.tolist(), p90.tolist(), median.tolist(), strict=True):
        b = min(max(_MIN_BOUND_US, _BOUND_FACTOR * p), MAX_BOUND_US) if n else _MIN_BOUND_US
        bounds.append(b)
        typicals.append(min(m, b) if n else DEFAULT_LATENCY_US)  # one bound for every use
    typical, bound = np.empty(len(observed)), np.empty(len(observed))
    typical[order] = np.repeat(np.array(typicals, dtype=np.float64), sizes)
    bound[order] = np.repeat(np.array(bounds, dtype=np.float64), sizes)
    return Latency(typical, bound)


def wait_tolerance(start: F64, prev_end: F64, issued: F64) -> float:
    """How soon after the work it waited for a held activity starts, on this trace (see the module doc)."""
    queued = np.isfinite(prev_end) & (prev_end > issued) & (start >= prev_end)
    if not queued.any():
        return _TOL_MIN_US
    return float(np.clip(4.0 * np.median(start[queued] - prev_end[queued]), _TOL_MIN_US, _TOL_MAX_US))


@dataclass(frozen=True)
class Activities:
    """The activity columns inference needs (indices into the graph's activity arrays)."""

    lane: I64
    device: I64
    start: F64
    end: F64
    prev: I64
    issued: F64
    call: I64
    after_wait: npt.NDArray[np.bool_]  # launched right after a stream wait call on its thread
    graph: npt.NDArray[np.bool_]  # launched by a graph launch call

    def prev_end(self) -> F64:
        return np.where(self.prev >= 0, self.end[np.maximum(self.prev, 0)], -np.inf)


def inferred_waits(
    acts: Activities, recorded: tuple[tuple[int, ...], ...], typical: F64, tol: float, streams: bool
) -> tuple[tuple[tuple[int, ...], ...], float]:
    """``recorded`` waits, plus inferred ones for late activities without any (see the module doc), and
    the wait tolerance used. ``streams``: infer waits on other streams too (the trace calls stream waits
    but has no records of them)."""
    n = len(acts.start)
    waits: list[tuple[int, ...]] = list(recorded) if recorded else [()] * n
    prev_end = acts.prev_end()
    linked = acts.call >= 0
    ready = np.maximum(np.where(linked, acts.issued + typical, -np.inf), prev_end)
    late = (linked | (acts.prev >= 0)) & (acts.start > ready + max(_INFER_SLACK_US, tol))
    late &= ~has_waits(waits)
    if not streams:
        late &= acts.graph
    if not late.any():
        return tuple(waits), tol
    by_end = np.argsort(acts.end, kind="stable")
    ends = acts.end[by_end]
    siblings = _graph_siblings(acts)
    if streams:
        tol = _cross_stream_tolerance(acts, by_end, ends, late & acts.after_wait, tol)
    for i in np.flatnonzero(late).tolist():
        k = int(np.searchsorted(ends, acts.start[i], side="right")) - 1
        found = -1
        if streams:
            found = _ended_just_before(acts, by_end, ends, k, i, tol)
        if found < 0 and acts.graph[i]:
            found = _latest(acts, siblings.get(int(acts.call[i]), []), i, float(ready[i]))
        if found < 0 and streams and acts.after_wait[i]:
            found = _issued_before(acts, by_end, k, i, float(ready[i]))
        if found >= 0:
            waits[i] = (found,)
    return tuple(waits), tol


def _cross_stream_tolerance(
    acts: Activities, by_end: I64, ends: F64, waited: npt.NDArray[np.bool_], tol: float
) -> float:
    """How soon, on this trace, an activity launched after a stream wait starts once the other stream's
    work it waited for ends: twice the median delay from the last end on another stream of the device
    (delays over the tolerance's ceiling are other holds), at least ``tol``."""
    delays = []
    for i in np.flatnonzero(waited).tolist():
        k = int(np.searchsorted(ends, acts.start[i], side="right")) - 1
        for j in range(k, max(-1, k - _SCAN), -1):
            other = int(by_end[j])
            if acts.lane[other] != acts.lane[i] and acts.device[other] == acts.device[i]:
                delays.append(float(acts.start[i] - ends[j]))
                break
    close = [d for d in delays if d <= _TOL_MAX_US]
    if not close:
        return tol
    return float(np.clip(2.0 * np.median(close), tol, _TOL_MAX_US))


def _ended_just_before(acts: Activities, by_end: I64, ends: F64, k: int, i: int, tol: float) -> int:
    """Work on another stream of the device that ended within ``tol`` before activity ``i`` started."""
    for j in range(k, max(-1, k - _SCAN), -1):
        if ends[j] < acts.start[i] - tol:
            break
        other = int(by_end[j])
        if acts.lane[other] != acts.lane[i] and acts.device[other] == acts.device[i]:
            return other
    return -1


def _issued_before(acts: Activities, by_end: I64, k: int, i: int, ready: float) -> int:
    """The latest-ending work on another stream of the device, issued before activity ``i`` and ended by
    its start, when it ended after ``i`` was otherwise ready (it explains part of the delay)."""
    for j in range(k, max(-1, k - _SCAN), -1):
        other = int(by_end[j])
        if acts.end[other] <= ready:
            break
        if (
            acts.lane[other] != acts.lane[i]
            and acts.device[other] == acts.device[i]
            and acts.issued[other] <= acts.issued[i]
        ):
            return other
    return -1


def _graph_siblings(acts: Activities) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for a in np.flatnonzero(acts.graph).tolist():
        out.setdefault(int(acts.call[a]), []).append(a)
    return out


def _latest(acts: Activities, candidates: list[int], i: int, ready: float) -> int:
    best, best_end = -1, ready
    for a in candidates:
        if a != i and best_end < acts.end[a] <= acts.start[i]:
            best, best_end = a, float(acts.end[a])
    return best


def has_waits(waits: tuple[tuple[int, ...], ...] | list[tuple[int, ...]]) -> npt.NDArray[np.bool_]:
    """Per activity, whether it waits for any other."""
    return np.fromiter(map(bool, waits), dtype=np.bool_, count=len(waits))


def latest_end(end: F64, waits: tuple[tuple[int, ...], ...]) -> F64:
    """Per activity, the latest end among the activities it waits for (-inf: none)."""
    out = np.full(len(waits), -np.inf)
    for i in np.flatnonzero(has_waits(waits)).tolist():
        out[i] = max(float(end[w]) for w in waits[i])
    return out


@dataclass(frozen=True)
class StartEdges:
    latency: F64  # launch -> start
    queue_gap: F64  # previous end on the stream -> start
    wait_gap: tuple[tuple[float, ...], ...]  # each awaited activity's end -> start
    typical: F64
    bound: F64


def start_edges(acts: Activities, waits: tuple[tuple[int, ...], ...], lat: Latency) -> StartEdges:
    """Weights of the edges into each activity's start, chosen so that ``start == max(issued + latency,
    prev end + queue gap, wait end + gap)`` holds exactly for the recorded trace. An activity held back by
    its stream or by other work gets the device's typical latency; the edge that held it carries the rest."""
    start, end, issued = acts.start, acts.end, acts.issued
    linked = acts.call >= 0
    has_prev = acts.prev >= 0
    prev_end = acts.prev_end()
    wait_end = latest_end(end, waits)
    observed = start - issued
    ready = np.where(linked, issued + lat.typical, -np.inf)  # unlinked: launched before the profile
    by_prev = has_prev & (prev_end > ready) & (prev_end >= wait_end)
    by_wait = (wait_end > ready) & ~by_prev
    held = by_prev | by_wait
    latency = np.where(held, np.minimum(lat.typical, observed), observed)
    with np.errstate(invalid="ignore"):
        queue_gap = np.where(by_prev, start - prev_end, np.minimum(0.0, start - prev_end))
    wait_gap: list[tuple[float, ...]] = [()] * len(waits)
    for i in np.flatnonzero(has_waits(waits)).tolist():
        wait_gap[i] = tuple(
            float(start[i] - end[w])
            if by_wait[i] and end[w] >= wait_end[i]
            else min(0.0, float(start[i] - end[w]))
            for w in waits[i]
        )
    return StartEdges(
        np.where(linked, latency, 0.0),
        np.where(has_prev, queue_gap, 0.0),
        tuple(wait_gap),
        lat.typical,
        lat.bound,
    )
