"""Invariants of the dependency graph (DESIGN.md §4: "All edges go forward in time").

``check_graph`` is pure: it reads a :class:`~stallscope.analyzer.graph.dependency.Graph` and returns one line per violation (an
empty list when the graph is sound). The replay processes nodes in recorded time order, so every edge
must go forward in time for that order to be topological; the edge weights must also reproduce the
recorded times, so that a replay of the unchanged graph gives back the trace:

- shapes: every per-call and per-activity array has one entry per node, indices are in range;
- order: calls sorted by thread then start, activities by stream then start; ``*_prev`` is the previous
  node of the same thread / stream; durations are not negative;
- host program order: a call starts at or after the previous call on its thread ended (``call_gap >= 0``),
  and the thread's anchor is not after its first call;
- launch -> device start: an activity starts at or after its launch call started, and at least its launch
  latency later (``latency >= 0``);
- stream order: an activity starts after its stream predecessor started, and at or after
  ``previous end + queue gap``;
- event record -> stream wait: the awaited activity starts before the waiting one (processing order);
- device end -> sync return: a blocking call waits for activities that were issued before it started
  (their launch call started no later) and that started before it returned, and it returns at or after
  ``awaited completion + ret``; a call that waited (``awaited > start``) returns at or after the awaited
  completion (``ret >= 0``).

Times are compared with an absolute tolerance ``eps_us`` (rounding of the trace's clock).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from stallscope.analyzer.graph.dependency import CLOCK_SKEW_US, Blocking, Graph

_MAX_REPORTED = 20  # per rule: a broken graph breaks the same way many times


def check_graph(g: Graph, eps_us: float = 1e-3) -> list[str]:
    """Every violated invariant of ``g`` as a readable line (at most 20 per rule, then a count)."""
    out: list[str] = []
    shape = _shapes(g)
    if shape:
        return shape  # index checks below would be meaningless
    _order(g, eps_us, out)
    _host(g, eps_us, out)
    _launch(g, eps_us, out)
    _stream(g, eps_us, out)
    _waits(g, out)
    _blocking(g, eps_us, out)
    return out


def _report(out: list[str], rule: str, bad: list[str]) -> None:
    out.extend(f"{rule}: {line}" for line in bad[:_MAX_REPORTED])
    if len(bad) > _MAX_REPORTED:
        out.append(f"{rule}: ... and {len(bad) - _MAX_REPORTED} more")


def _shapes(g: Graph) -> list[str]:
    out: list[str] = []
    n, m = g.calls, g.activities
    call_arrays = {
        "call_lane": g.call_lane,
        "call_start": g.call_start,
        "call_end": g.call_end,
        "call_gap": g.call_gap,
        "call_prev": g.call_prev,
        "call_blocking": g.call_blocking,
        "call_own": g.call_own,
        "call_ret": g.call_ret,
        "call_awaited": g.call_awaited,
    }
    act_arrays = {
        "act_lane": g.act_lane,
        "act_device": g.act_device,
        "act_start": g.act_start,
        "act_end": g.act_end,
        "act_call": g.act_call,
        "act_prev": g.act_prev,
        "act_latency": g.act_latency,
        "act_queue_gap": g.act_queue_gap,
    }
    out.extend(
        f"shape: {k} has {len(v)} entries for {n} calls" for k, v in call_arrays.items() if len(v) != n
    )
    out.extend(
        f"shape: {k} has {len(v)} entries for {m} activities" for k, v in act_arrays.items() if len(v) != m
    )
    if len(g.call_waits) != n:
        out.append(f"shape: call_waits has {len(g.call_waits)} entries for {n} calls")
    if len(g.act_waits) != m:
        out.append(f"shape: act_waits has {len(g.act_waits)} entries for {m} activities")
    if out:
        return out
    for name, idx, size in (
        ("call_prev", g.call_prev, n),
        ("act_prev", g.act_prev, m),
        ("act_call", g.act_call, n),
    ):
        bad = np.flatnonzero((idx < -1) | (idx >= size))
        out.extend(
            f"shape: {name}[{i}] = {int(idx[i])} is out of range" for i in bad[:_MAX_REPORTED].tolist()
        )
    for name, waits, size in (("call_waits", g.call_waits, m), ("act_waits", g.act_waits, m)):
        out.extend(
            f"shape: {name}[{i}] names activity {a}, out of range"
            for i, w in enumerate(waits)
            for a in w
            if not 0 <= a < size
        )
    for name, values in (
        ("call_start", g.call_start),
        ("call_end", g.call_end),
        ("act_start", g.act_start),
        ("act_end", g.act_end),
    ):
        bad = np.flatnonzero(~np.isfinite(values))
        out.extend(f"shape: {name}[{i}] is not finite" for i in bad[:_MAX_REPORTED].tolist())
    return out


def _order(g: Graph, eps: float, out: list[str]) -> None:
    for what, lane, start, end, prev in (
        ("call", g.call_lane, g.call_start, g.call_end, g.call_prev),
        ("activity", g.act_lane, g.act_start, g.act_end, g.act_prev),
    ):
        bad = [
            f"{what} {i} ends {start[i] - end[i]:.3f} us before it starts" for i in _where(end < start - eps)
        ]
        _report(out, f"{what} duration", bad)
        same = np.zeros(len(lane), dtype=np.bool_)
        if len(lane):
            same[1:] = lane[1:] == lane[:-1]
        expected_prev = np.where(same, np.arange(len(lane)) - 1, -1)
        bad = [
            f"{what} {i}: prev {int(prev[i])}, expected {int(expected_prev[i])}"
            for i in _where(prev != expected_prev)
        ]
        _report(out, f"{what} prev", bad)
        unsorted = np.zeros(len(lane), dtype=np.bool_)
        if len(lane):
            unsorted[1:] = (lane[1:] < lane[:-1]) | (same[1:] & (start[1:] < start[:-1] - eps))
        bad = [f"{what} {i} is out of (lane, start) order" for i in _where(unsorted)]
        _report(out, f"{what} order", bad)


def _host(g: Graph, eps: float, out: list[str]) -> None:
    bad = [
        f"call {i} starts {-g.call_gap[i]:.3f} us before the previous call on lane {int(g.call_lane[i])} ended"
        for i in _where(g.call_gap < -eps)
    ]
    _report(out, "host order", bad)
    has_prev = g.call_prev >= 0
    prev_end = np.where(has_prev, g.call_end[np.maximum(g.call_prev, 0)], np.nan)
    dep = g.call_dep >= 0
    exact = np.abs(prev_end + g.call_gap - g.call_start) > eps
    drift = has_prev & np.where(dep, prev_end + g.call_gap > g.call_start + eps, exact)
    bad = [f"call {i}: previous end + gap != start" for i in _where(drift)]
    _report(out, "host gap", bad)
    dep_end = np.where(dep, g.call_end[np.maximum(g.call_dep, 0)], -np.inf)
    back = dep & ((dep_end > g.call_dep_at + eps) | (g.call_dep_at > g.call_start + eps))
    bad = [
        f"call {i} waits for another thread's call {int(g.call_dep[i])} ending after it" for i in _where(back)
    ]
    _report(out, "thread handoff", bad)
    first = ~has_prev
    bad = [
        f"lane {int(g.call_lane[i])} has no anchor"
        if int(g.call_lane[i]) not in g.thread_anchor
        else f"lane {int(g.call_lane[i])}: anchor after its first call {i}"
        for i in _where(first)
        if g.thread_anchor.get(int(g.call_lane[i]), np.inf) > g.call_start[i] + eps
    ]
    _report(out, "host anchor", bad)
    bad = [f"call {i} has negative own time {g.call_own[i]:.3f}" for i in _where(g.call_own < -eps)]
    _report(out, "host own", bad)


def _launch(g: Graph, eps: float, out: list[str]) -> None:
    linked = g.act_call >= 0
    issued = g.issued()
    bad = [
        f"activity {i} starts {issued[i] - g.act_start[i]:.3f} us before its launch call {int(g.act_call[i])}"
        for i in _where(linked & (g.act_start < issued - eps))
    ]
    _report(out, "launch order", bad)
    bad = [
        f"activity {i} has negative launch latency {g.act_latency[i]:.3f}"
        for i in _where(linked & (g.act_latency < -eps))
    ]
    _report(out, "launch latency", bad)
    late = linked & (g.act_start < issued + g.act_latency - eps)
    bad = [f"activity {i} starts before launch + latency" for i in _where(late)]
    _report(out, "launch edge", bad)


def _stream(g: Graph, eps: float, out: list[str]) -> None:
    has_prev = g.act_prev >= 0
    p = np.maximum(g.act_prev, 0)
    bad = [
        f"activity {i} starts before its stream predecessor {int(g.act_prev[i])}"
        for i in _where(has_prev & (g.act_start[p] > g.act_start + eps))
    ]
    _report(out, "stream order", bad)
    early = has_prev & (g.act_start < g.act_end[p] + g.act_queue_gap - eps)
    bad = [f"activity {i} starts before previous end + queue gap" for i in _where(early)]
    _report(out, "stream edge", bad)


def _waits(g: Graph, out: list[str]) -> None:
    bad = [
        f"activity {i} waits for activity {a}, which starts later"
        for i, w in enumerate(g.act_waits)
        for a in w
        if g.act_start[a] > g.act_start[i]
    ]
    _report(out, "event wait", bad)
    early = [
        f"activity {i} starts before awaited activity {a} ended + its edge weight"
        for i, (w, gaps) in enumerate(zip(g.act_waits, g.act_wait_gap, strict=True))
        for a, gap in zip(w, gaps, strict=True)
        if g.act_start[i] < g.act_end[a] + gap - 1e-3
    ]
    _report(out, "event edge", early)


def _blocking(g: Graph, eps: float, out: list[str]) -> None:
    issued = g.issued()
    bad: list[str] = []
    for c in np.flatnonzero(g.call_blocking != Blocking.NO).tolist():
        waits = g.call_waits[c]
        if not waits:
            bad.append(f"blocking call {c} waits for nothing")
            continue
        awaited = max(float(g.act_end[a]) for a in waits)
        if abs(awaited - float(g.call_awaited[c])) > eps:
            bad.append(f"call {c}: call_awaited {g.call_awaited[c]} != latest end {awaited}")
        bad.extend(
            f"call {c} waits for activity {a}, issued after the call started"
            for a in waits
            if issued[a] > g.call_start[c] + eps
        )
        bad.extend(
            f"call {c} waits for activity {a}, which starts after the call returned"
            for a in waits
            if g.act_start[a] > g.call_end[c] + eps
        )
        if g.call_end[c] < awaited + g.call_ret[c] - eps:
            bad.append(f"call {c} returns before awaited completion + ret")
        # host and device clocks differ by a few µs: a call returning that little before is within skew
        if awaited > g.call_start[c] and g.call_ret[c] < -max(eps, CLOCK_SKEW_US):
            bad.append(f"call {c} waited but returned {-g.call_ret[c]:.3f} us before the completion")
    _report(out, "sync edge", bad)
    nonblocking = [c for c in np.flatnonzero(g.call_blocking == Blocking.NO).tolist() if g.call_waits[c]]
    _report(out, "sync edge", [f"non-blocking call {c} has waits" for c in nonblocking])


def _where(mask: npt.NDArray[np.bool_]) -> list[int]:
    return [int(i) for i in np.flatnonzero(mask)]
