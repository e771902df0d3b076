"""What-if replay: re-time the dependency graph in topological order with changed costs.

Each host call starts its recorded gap after the previous call on its thread ended; each activity starts at
the latest of its launch (plus latency), the end of the previous activity on its stream and the events it
waits for; each blocking call returns when what it waits for has finished. Changes apply inside the window
only, so the replay of the unchanged graph reproduces the recorded times (a check the tests run).
"""

from __future__ import annotations

from array import array
from collections.abc import MutableSequence, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np
import numpy.typing as npt

from analyzer import intervals
from analyzer.edges import has_waits
from analyzer.graph import Blocking, Graph
from analyzer.model import F64, I64


class Scenario(str, Enum):
    AS_RECORDED = "as_recorded"
    NO_AVOIDABLE_SYNCS = "no_avoidable_syncs"
    NO_SYNCS = "no_syncs"
    DEVICE_2X = "device_2x"
    HOST_2X = "host_2x"
    INPUT_OVERLAPPED = "input_overlapped"


@dataclass(frozen=True)
class Costs:
    """How a scenario changes the graph inside the window."""

    device_scale: float = 1.0  # every device activity's duration
    host_scale: float = 1.0  # every host gap and call's own time
    input_scale: float = 1.0  # host time inside data loading (0: loading moved off the critical thread)
    launch_scale: float = 1.0  # every launch latency (call start to the activity's unqueued start)
    no_wait: frozenset[int] = field(default_factory=frozenset)  # calls that no longer wait (work stays)


@dataclass(frozen=True)
class Frame:
    """What every replay of one graph shares: the processing order, the window, what the window's end is
    measured on, and each gap's time inside data loading. Built once, replayed many times."""

    start_us: float
    end_us: float
    agenda_kind: npt.NDArray[np.int8]  # processing order: 0 call start | 1 blocking call end | 2 activity
    agenda_index: I64  # ... and the call or activity index of each step
    call_in: list[bool]
    act_in: list[bool]
    gap_input: Sequence[float]
    main_lane: int
    tail_call: int  # last call of the main thread ending in the window (-1: none)
    tail_gap: float  # from that call's end to the window end
    tail_input: float
    tail_dep: int  # the other thread's call the main thread waited for at the window's end (-1: none)
    tail_dep_gap: float  # from that call's end to the window end
    window_acts: np.ndarray  # activities launched inside the window (their end bounds the makespan)
    act_wait_offset: list[tuple[tuple[int, float], ...]]
    lists: dict[
        str, Any
    ]  # the graph's columns as Python sequences (``_sequence``), made once for every replay
    loads_data: bool = False  # whether any host gap (or the tail) holds data loading

    @property
    def recorded_end(self) -> float:
        return self.end_us


@dataclass(frozen=True)
class Replay:
    costs: Costs
    call_start: F64
    call_end: F64
    act_start: F64
    act_end: F64
    end_us: float  # predicted end of the window's work (host anchor or device work launched in it)


def make_frame(
    g: Graph,
    start_us: float,
    end_us: float,
    main_lane: int,
    input_by_lane: dict[int, tuple[F64, F64]],
) -> Frame:
    keys = np.concatenate([g.call_start, g.call_end[g.call_blocking != Blocking.NO], g.act_start])
    blocking = np.flatnonzero(g.call_blocking != Blocking.NO)
    kind = np.concatenate(
        [np.zeros(g.calls, np.int8), np.ones(len(blocking), np.int8), np.full(g.activities, 2, np.int8)]
    )
    rank = np.array([0, 2, 1], dtype=np.int8)[kind]  # at one instant: call starts, activities, blocking ends
    index = np.concatenate([np.arange(g.calls), blocking, np.arange(g.activities)]).astype(np.int64)
    order = np.lexsort((rank, keys))
    gap_start = g.call_start - g.call_gap
    gap_input = np.zeros(g.calls)
    for lane, (s, e) in input_by_lane.items():
        on = np.flatnonzero(g.call_lane == lane)
        if len(on) and len(s):
            gap_input[on] = intervals.covered_in(s, e, gap_start[on], g.call_start[on])
    issued = g.issued()
    window_acts = np.flatnonzero((issued >= start_us) & (issued <= end_us))
    tail_call, tail_gap, tail_input = _tail(g, main_lane, end_us, input_by_lane)
    tail_dep, tail_dep_gap = -1, 0.0
    if tail_call >= 0:
        h = g.threads.waited_for(main_lane, float(g.call_end[tail_call]), end_us)
        if h is not None:
            tail_dep, tail_dep_gap = h.call, end_us - float(g.call_end[h.call])
            tail_gap = g.threads.own(main_lane, float(g.call_end[tail_call]), end_us)
            tail_input = min(tail_input, tail_gap)
    offsets: list[tuple[tuple[int, float], ...]] = [()] * g.activities
    for i in np.flatnonzero(has_waits(g.act_waits)).tolist():
        offsets[i] = tuple(zip(g.act_waits[i], g.act_wait_gap[i], strict=True))
    return Frame(
        start_us=start_us,
        end_us=end_us,
        agenda_kind=kind[order],
        agenda_index=index[order],
        call_in=(g.call_start >= start_us).tolist(),
        act_in=(issued >= start_us).tolist(),
        gap_input=_sequence(gap_input, g.calls + g.activities),
        main_lane=main_lane,
        tail_call=tail_call,
        tail_gap=tail_gap,
        tail_input=tail_input,
        tail_dep=tail_dep,
        tail_dep_gap=tail_dep_gap,
        window_acts=window_acts,
        act_wait_offset=offsets,
        loads_data=bool(tail_input > 0 or (gap_input > 0).any()),
        lists=_columns(
            g,
            {
                "prev": g.call_prev,
                "gap": g.call_gap,
                "own": g.call_own,
                "ret": g.call_ret,
                "blocking": g.call_blocking != Blocking.NO,
                "lanes": g.call_lane,
                "c_start": g.call_start,
                "dep": g.call_dep,
                "dep_gap": np.where(
                    g.call_dep >= 0, g.call_start - g.call_end[np.maximum(g.call_dep, 0)], 0.0
                ),
                "a_call": g.act_call,
                "from_return": g.act_from_return,
                "a_prev": g.act_prev,
                "a_lat": g.act_latency,
                # a launch delay past the plausible latency is a hold, not latency: no speed-up shortens it
                "a_hold": np.where(
                    g.act_latency > g.act_bound, np.maximum(g.act_latency - g.act_typical, 0.0), 0.0
                ),
                "a_gap": g.act_queue_gap,
                "a_start": g.act_start,
                "a_end": g.act_end,
                "a_dur": g.act_end - g.act_start,
            },
        ),
    )


_ARRAYS_FROM = 1_000_000  # graph nodes from which the replay's numbers are kept as C arrays


def _sequence(values: npt.NDArray[Any], nodes: int) -> Any:
    """``values`` for the replay's loop, indexed one at a time: a Python list (fastest to index), or for
    graphs of ``_ARRAYS_FROM`` nodes and more, numbers as an ``array.array`` (8 bytes a value where a list
    of floats takes 32: about 0.5 GB less at 10M events, for a replay about 20% slower). Flags stay lists
    (``True`` and ``False`` are shared objects)."""
    if nodes < _ARRAYS_FROM or values.dtype == np.bool_:
        return values.tolist()
    typecode = "d" if values.dtype.kind == "f" else "q"
    out = array(typecode)
    out.frombytes(np.ascontiguousarray(values, dtype=np.float64 if typecode == "d" else np.int64).tobytes())
    return out


def _filled(value: float, n: int, big: bool) -> MutableSequence[float]:
    return array("d", [value]) * n if big else [value] * n


def _columns(g: Graph, columns: dict[str, npt.NDArray[Any]]) -> dict[str, Any]:
    nodes = g.calls + g.activities
    return {name: _sequence(values, nodes) for name, values in columns.items()}


def _tail(
    g: Graph, lane: int, end_us: float, input_by_lane: dict[int, tuple[F64, F64]]
) -> tuple[int, float, float]:
    on = np.flatnonzero((g.call_lane == lane) & (g.call_end <= end_us))
    if not len(on):
        return -1, 0.0, 0.0
    last = int(on[-1])
    s, e = input_by_lane.get(lane, intervals.NONE)
    inside = (
        float(intervals.covered_in(s, e, np.array([g.call_end[last]]), np.array([end_us]))[0])
        if len(s)
        else 0.0
    )
    return last, end_us - float(g.call_end[last]), inside


def recorded_end(g: Graph, f: Frame) -> float:
    """The recorded makespan's end: the window end, or later device work launched inside the window."""
    device_end = float(g.act_end[f.window_acts].max()) if len(f.window_acts) else f.end_us
    return max(f.end_us, device_end)


def replay(g: Graph, f: Frame, costs: Costs) -> Replay:
    """Re-time the graph with ``costs``. One pass over the agenda in recorded time order (a topological
    order: every edge goes forward in time)."""
    n_calls, n_acts = g.calls, g.activities
    L = f.lists
    prev, gap, own, ret, blocking = L["prev"], L["gap"], L["own"], L["ret"], L["blocking"]
    lanes, c_start, dep, dep_gap = L["lanes"], L["c_start"], L["dep"], L["dep_gap"]
    a_call, a_prev, a_lat, a_gap, a_hold = L["a_call"], L["a_prev"], L["a_lat"], L["a_gap"], L["a_hold"]
    a_start, a_end, a_dur = L["a_start"], L["a_end"], L["a_dur"]
    waits = g.call_waits
    anchor = g.thread_anchor
    from_return = L["from_return"]
    hs, ds, ins, ls = costs.host_scale, costs.device_scale, costs.input_scale, costs.launch_scale
    no_wait = costs.no_wait
    call_in, act_in, gap_input, offsets = f.call_in, f.act_in, f.gap_input, f.act_wait_offset
    big = n_calls + n_acts >= _ARRAYS_FROM  # the same choice as the frame's columns (``_sequence``)
    nan = float("nan")
    new_cs, new_ce = _filled(nan, n_calls, big), _filled(nan, n_calls, big)
    new_as, new_ae = _filled(0.0, n_acts, big), _filled(nan, n_acts, big)

    def end_of(i: int) -> float:
        value = new_ce[i]
        if value == value:  # computed already
            return value
        mine = own[i] * hs if call_in[i] else own[i]
        done: float = max(
            (new_ae[a] if new_ae[a] == new_ae[a] else a_end[a] for a in waits[i]), default=-1e300
        )
        value = float(max(new_cs[i] + mine, done + ret[i]))
        new_ce[i] = value
        return value

    for lo in range(0, len(f.agenda_kind), _CHUNK):  # converted a chunk at a time: no tuple per step kept
        kinds, index = f.agenda_kind[lo : lo + _CHUNK].tolist(), f.agenda_index[lo : lo + _CHUNK].tolist()
        for kind, i in zip(kinds, index, strict=True):
            # comparisons rather than max(): this loop runs once per call and activity of the trace
            if kind == 0:
                inside = call_in[i]
                p = prev[i]
                if p >= 0:
                    base = new_ce[p]
                    if base != base:  # a blocking call whose end was not processed yet
                        base = end_of(p)
                else:
                    base = anchor.get(lanes[i], c_start[i] - gap[i])
                gi = gap[i]
                if inside:
                    gi = (gi - gap_input[i]) * hs + gap_input[i] * hs * ins
                s = base + gi
                d = dep[i]
                if d >= 0:  # the stretch before this call waited for another thread (or the thread began)
                    done = new_ce[d]
                    if done != done:
                        done = end_of(d)
                    after = done + (dep_gap[i] * hs if inside else dep_gap[i])
                    if p < 0 or after > s:
                        s = after
                new_cs[i] = s
                if not blocking[i] or i in no_wait:
                    new_ce[i] = s + (own[i] * hs if inside else own[i])
            elif kind == 1:
                end_of(i)
            else:
                inside = act_in[i]
                c = a_call[i]
                if c < 0:
                    s = a_start[i]
                else:
                    hold = a_hold[i]
                    lat = (a_lat[i] - hold) * ls + hold if inside else a_lat[i]
                    s = (end_of(c) if from_return[i] else new_cs[c]) + lat
                    if s != s:  # launch recorded after its activity started (clock skew): the recorded start
                        s = a_start[i]
                p = a_prev[i]
                if p >= 0:
                    after = new_ae[p] + a_gap[i]
                    if after > s:
                        s = after
                waited = offsets[i]
                if waited:
                    for a, off in waited:
                        after = new_ae[a] + off
                        if after > s:
                            s = after
                new_as[i] = s
                new_ae[i] = s + (a_dur[i] * ds if inside else a_dur[i])
    ce = np.array(new_ce)
    for i in np.flatnonzero(np.isnan(ce)).tolist():
        ce[i] = end_of(i)
    return Replay(
        costs, np.array(new_cs), ce, np.array(new_as), np.array(new_ae), _predicted_end(f, ce, new_ae, costs)
    )


_CHUNK = 1 << 16  # agenda steps converted to Python numbers at a time


def _predicted_end(f: Frame, call_end: F64, act_end: Sequence[float], costs: Costs) -> float:
    host = f.end_us
    if f.tail_call >= 0:
        tail = (
            f.tail_gap - f.tail_input
        ) * costs.host_scale + f.tail_input * costs.host_scale * costs.input_scale
        host = float(call_end[f.tail_call]) + tail
        if f.tail_dep >= 0:
            host = max(host, float(call_end[f.tail_dep]) + f.tail_dep_gap * costs.host_scale)
    device = float(np.max(np.asarray(act_end)[f.window_acts])) if len(f.window_acts) else host
    return float(max(host, device))
