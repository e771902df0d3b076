"""What-if replay: re-time the dependency graph in topological order with changed costs.

Each host call starts its recorded gap after the previous call on its thread ended; each activity starts at
the latest of its launch (plus latency), the end of the previous activity on its stream and the events it
waits for; each blocking call returns when what it waits for has finished. Changes apply inside the window
only, so the replay of the unchanged graph reproduces the recorded times (a check the tests run).

Several scenarios are replayed in one pass over the graph (``replay_many``; ``replay_ends`` when only the
predicted ends are wanted, as for the what-if): each does the float operations of its own replay, in the
same order, so its times are the ones it gets alone, bit for bit. Chains of calls that only follow one
another on their thread are re-timed in one go (numpy adds them up in order), and plain activities take a
short path. ``tests/_replay_reference.py`` keeps the replay of one scenario, one step at a time, that the
tests hold this to.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np
import numpy.typing as npt

from stallscope.analyzer.core import intervals
from stallscope.analyzer.core.model import F64, I64
from stallscope.analyzer.graph.dependency import Blocking, Graph
from stallscope.analyzer.graph.edges import has_waits


class Scenario(str, Enum):
    AS_RECORDED = "as_recorded"
    NO_AVOIDABLE_SYNCS = "no_avoidable_syncs"
    NO_SYNCS = "no_syncs"
    DEVICE_2X = "device_2x"  # every device activity, compute and communication alike
    HOST_2X = "host_2x"
    INPUT_OVERLAPPED = "input_overlapped"
    # only for a trace with collective kernels (``Frame.communicates``):
    COMPUTE_2X = "compute_2x"  # compute kernels, copies and memsets 2x faster; collectives as recorded
    COMMUNICATION_2X = "communication_2x"  # collective kernels 2x faster
    COMMUNICATION_OVERLAPPED = "communication_overlapped"  # collectives take no time on their streams


@dataclass(frozen=True)
class Costs:
    """How a scenario changes the graph inside the window."""

    device_scale: float = 1.0  # every device activity's duration (collectives too, unless comm_scale says)
    host_scale: float = 1.0  # every host gap and call's own time
    input_scale: float = 1.0  # host time inside data loading (0: loading moved off the critical thread)
    launch_scale: float = 1.0  # every launch latency (call start to the activity's unqueued start)
    no_wait: frozenset[int] = field(default_factory=frozenset)  # calls that no longer wait (work stays)
    comm_scale: float | None = None  # collective kernels' duration (None: as device_scale)


@dataclass(frozen=True)
class Frame:
    """What every replay of one graph shares: the processing order (with the chains of calls re-timed
    together), the window, what the window's end is measured on, and each gap's time inside data loading.
    Built once, replayed many times."""

    start_us: float
    end_us: float
    agenda_kind: npt.NDArray[np.int8]  # processing order: CALL, END, ACT or PLAIN_ACT (``_agenda``)
    agenda_index: I64  # ... and the call or activity index of each step
    call_in: list[bool]
    act_in: list[bool]
    gap_input: Sequence[float]
    gap_untraced: Sequence[float]  # each gap's time no event of its thread covers (no speed-up shortens it)
    main_lane: int
    tail_call: int  # last call of the main thread ending in the window (-1: none)
    tail_gap: float  # from that call's end to the window end
    tail_input: float
    tail_untraced: float
    tail_dep: int  # the other thread's call the main thread waited for at the window's end (-1: none)
    tail_dep_gap: float  # from that call's end to the window end
    window_acts: np.ndarray  # activities launched inside the window (their end bounds the makespan)
    act_wait_offset: list[tuple[tuple[int, float], ...]]
    chains: dict[int, int]  # call -> end of the chain of calls after it (``_agenda``)
    lists: dict[str, Any]  # the graph's columns for the replay's loop (``_sequence``), made once
    loads_data: bool = False  # any host gap (or the tail) holds data loading (else input_overlapped is moot)
    communicates: bool = False  # collective kernels were issued in the window (the communication scenarios)

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
    host_end_us: float | None = None,
    untraced_by_lane: dict[int, tuple[F64, F64]] | None = None,
) -> Frame:
    """What every replay shares. ``host_end_us``: when the main thread's own work ended (the window's end
    when None): a window timed to its last event can end in device work queued long after the host
    finished issuing, and that wait is not host time a faster host would shorten."""
    kind, index, chains = _agenda(g)
    gap_start = g.call_start - g.call_gap
    gap_input, gap_untraced = np.zeros(g.calls), np.zeros(g.calls)
    for parts, out in ((input_by_lane, gap_input), (untraced_by_lane or {}, gap_untraced)):
        for lane, (s, e) in parts.items():
            on = np.flatnonzero(g.call_lane == lane)
            if len(on) and len(s):
                out[on] = intervals.covered_in(s, e, gap_start[on], g.call_start[on])
    issued = g.issued()
    window_acts = np.flatnonzero((issued >= start_us) & (issued <= end_us))
    host_end = end_us if host_end_us is None else min(host_end_us, end_us)
    tail_call, tail_gap, tail_input = _tail(g, main_lane, end_us, host_end, input_by_lane)
    tail_untraced = _tail(g, main_lane, end_us, host_end, untraced_by_lane or {})[2]
    tail_dep, tail_dep_gap = -1, 0.0
    if tail_call >= 0:
        h = g.threads.waited_for(main_lane, float(g.call_end[tail_call]), host_end)
        if h is not None:
            tail_dep, tail_dep_gap = h.call, host_end - float(g.call_end[h.call])
            tail_gap = g.threads.own(main_lane, float(g.call_end[tail_call]), host_end)
            tail_input = min(tail_input, tail_gap)
            tail_untraced = min(tail_untraced, tail_gap - tail_input)
    offsets: list[tuple[tuple[int, float], ...]] = [()] * g.activities
    for i in np.flatnonzero(has_waits(g.act_waits)).tolist():
        offsets[i] = tuple(zip(g.act_waits[i], g.act_wait_gap[i], strict=True))
    return Frame(
        start_us=start_us,
        end_us=end_us,
        agenda_kind=kind,
        agenda_index=index,
        call_in=(g.call_start >= start_us).tolist(),
        act_in=(issued >= start_us).tolist(),
        gap_input=_sequence(gap_input),
        gap_untraced=_sequence(gap_untraced),
        main_lane=main_lane,
        tail_call=tail_call,
        tail_gap=tail_gap,
        tail_input=tail_input,
        tail_untraced=tail_untraced,
        tail_dep=tail_dep,
        tail_dep_gap=tail_dep_gap,
        window_acts=window_acts,
        act_wait_offset=offsets,
        chains=chains,
        loads_data=bool(tail_input > 0 or (gap_input > 0).any()),
        communicates=bool(g.act_comm[window_acts].any()),
        lists=_columns(
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
                "a_comm": g.act_comm,
            },
        ),
    )


#: agenda steps (``Frame.agenda_kind``): a call's start, a blocking call's end, an activity, and a plain
#: activity, which needs none of the general step's cases: launched by a call (not at the call's return),
#: after another activity on its stream, waiting for no event
CALL, END, ACT, PLAIN_ACT = 0, 1, 2, 3


def _agenda(g: Graph) -> tuple[npt.NDArray[np.int8], I64, dict[int, int]]:
    """The replay's steps in recorded time order (their kinds and call or activity indices), and the
    chains of calls re-timed in one go instead of a step each.

    A chain follows a call on its thread: calls that do not block, whose predecessor does not block, with
    no wait for another thread, so each starts its gap after the one before it ended, whatever the
    scenario. ``chains[h] = stop``: calls ``h + 1`` to ``stop - 1`` are re-timed right after call ``h``.
    A call that something reads before its own step (an activity it launched recorded earlier, or a call
    waiting for it at the same instant) keeps its step, where that read finds it not re-timed yet."""
    blocks = g.call_blocking != Blocking.NO
    blocking = np.flatnonzero(blocks)
    keys = np.concatenate([g.call_start, g.call_end[blocks], g.act_start])
    kind = np.concatenate(
        [
            np.full(g.calls, CALL, np.int8),
            np.full(len(blocking), END, np.int8),
            np.full(g.activities, ACT, np.int8),
        ]
    )
    rank = np.array([0, 2, 1], dtype=np.int8)[kind]  # at one instant: call starts, activities, blocking ends
    index = np.concatenate([np.arange(g.calls), blocking, np.arange(g.activities)]).astype(np.int64)
    order = np.lexsort((rank, keys))
    position = np.empty(len(order), np.int64)
    position[order] = np.arange(len(order))
    call_at, act_at = position[: g.calls], position[g.calls + len(blocking) :]
    prev, dep, launcher = g.call_prev, g.call_dep, g.act_call
    read_early = np.zeros(g.calls, np.bool_)
    launched, waiting = np.flatnonzero(launcher >= 0), np.flatnonzero(dep >= 0)
    read_early[launcher[launched][act_at[launched] < call_at[launcher[launched]]]] = True
    read_early[dep[waiting][call_at[waiting] < call_at[dep[waiting]]]] = True
    chained = (
        (prev >= 0)
        & (prev == np.arange(g.calls) - 1)
        & (dep < 0)
        & ~blocks
        & ~blocks[np.maximum(prev, 0)]
        & ~read_early
    )
    edges = np.diff(np.concatenate([[0], chained.astype(np.int8), [0]]))
    heads, stops = np.flatnonzero(edges == 1) - 1, np.flatnonzero(edges == -1)
    chains = dict(zip(heads.tolist(), stops.tolist(), strict=True))
    plain_act = (launcher >= 0) & ~g.act_from_return & (g.act_prev >= 0) & ~has_waits(g.act_waits)
    kind[g.calls + len(blocking) :][plain_act] = PLAIN_ACT
    steps = order[~np.concatenate([chained, np.zeros(len(order) - g.calls, np.bool_)])[order]]
    return kind[steps], index[steps], chains


def _sequence(values: npt.NDArray[Any]) -> Any:
    """``values`` for the replay's loop, indexed one at a time: numbers as an ``array.array`` (8 bytes a
    value where a list of floats takes 32; with several scenarios in one pass, lists of floats made the
    what-if the analysis's peak, +95 MB at 1M events, and were slower to fill), flags as a list (``True``
    and ``False`` are shared objects)."""
    if values.dtype == np.bool_:
        return values.tolist()
    typecode = "d" if values.dtype.kind == "f" else "q"
    out = array(typecode)
    out.frombytes(np.ascontiguousarray(values, dtype=np.float64 if typecode == "d" else np.int64).tobytes())
    return out


def _filled(value: float, n: int) -> array[float]:
    return array("d", [value]) * n


def _columns(columns: dict[str, npt.NDArray[Any]]) -> dict[str, Any]:
    return {name: _sequence(values) for name, values in columns.items()}


def _tail(
    g: Graph, lane: int, end_us: float, host_end: float, input_by_lane: dict[int, tuple[F64, F64]]
) -> tuple[int, float, float]:
    """The main thread's last call ending in the window, the host's own time from its end to
    ``host_end`` (none when the host had finished by then), and how much of that was data loading."""
    on = np.flatnonzero((g.call_lane == lane) & (g.call_end <= end_us))
    if not len(on):
        return -1, 0.0, 0.0
    last = int(on[-1])
    done = float(g.call_end[last])
    until = max(host_end, done)
    s, e = input_by_lane.get(lane, intervals.NONE)
    inside = float(intervals.covered_in(s, e, np.array([done]), np.array([until]))[0]) if len(s) else 0.0
    return last, until - done, inside


def recorded_end(g: Graph, f: Frame) -> float:
    """The recorded makespan's end: the window end, or later device work launched inside the window."""
    device_end = float(g.act_end[f.window_acts].max()) if len(f.window_acts) else f.end_us
    return max(f.end_us, device_end)


def replay(g: Graph, f: Frame, costs: Costs) -> Replay:
    """Re-time the graph with ``costs``. One pass over the agenda in recorded time order (a topological
    order: every edge goes forward in time)."""
    return replay_many(g, f, [costs])[0]


def replay_many(g: Graph, f: Frame, costs: Sequence[Costs]) -> list[Replay]:
    """``replay`` for each of ``costs``, in one pass over the agenda: each result is the one ``replay``
    gives (every scenario does the same float operations in the same order)."""
    out = []
    for run in _walk(g, f, costs):
        ce = np.array(run.call_end)
        for i in np.flatnonzero(np.isnan(ce)).tolist():
            ce[i] = run.end_of(i)
        end = _predicted_end(f, ce, run.act_end, run.costs)
        out.append(
            Replay(
                run.costs, np.array(run.call_start), ce, np.array(run.act_start), np.array(run.act_end), end
            )
        )
    return out


def replay_ends(g: Graph, f: Frame, costs: Sequence[Costs]) -> list[float]:
    """The predicted end (``Replay.end_us``) of each of ``costs``: ``replay_many`` without the per-node
    results. The graph is replayed several scenarios at a time (``_group``), so that the times held at once
    stay within a few single replays' worth."""
    ends = []
    group = _group(g, len(costs))
    for lo in range(0, len(costs), group):
        for run in _walk(g, f, costs[lo : lo + group]):
            ce = run.call_end
            for i in (f.tail_call, f.tail_dep):  # the only call ends the prediction reads
                if i >= 0 and ce[i] != ce[i]:
                    ce[i] = run.end_of(i)
            ends.append(_predicted_end(f, ce, run.act_end, run.costs))
    return ends


_NODE_RUNS = 16_000_000  # nodes times scenarios replayed in one pass, at most (``_group``)


def _group(g: Graph, scenarios: int) -> int:
    """Scenarios per pass of ``replay_ends``: all of them while the graph is small enough that their
    times (about 64 bytes a node per scenario) stay within ``_NODE_RUNS`` nodes' worth, else two at a time.
    Each pass reads the agenda once, shared by its scenarios: on a 1M-event trace (210k nodes) one pass of
    six took 0.17 s where three of two took 0.21-0.25 s; on a 10M-event trace (2.1M nodes) 1.4-1.5 s
    against 1.8-2.6 s, and the process's peak stayed the one the load and the graph's passes reach (2.4 and
    2.1 GB there, the same with one pass or three). Past ~15M events, two at a time."""
    return max(2, min(scenarios, _NODE_RUNS // max(g.calls + g.activities, 1)))


_CHUNK = 1 << 16  # agenda steps converted to Python numbers at a time
_LONG_CHAIN = 16  # calls from which a chain is summed by numpy rather than one at a time


def _store(out: array[float], lo: int, values: F64) -> None:
    """``out[lo : lo + len(values)] = values`` (``_filled``)."""
    out[lo : lo + len(values)] = array("d", values.tobytes())


def _predicted_end(
    f: Frame, call_end: Sequence[float] | F64, act_end: Sequence[float], costs: Costs
) -> float:
    host = f.end_us
    if f.tail_call >= 0:
        dark = f.tail_untraced  # time the trace does not show: no speed-up shortens it
        tail = (
            (f.tail_gap - f.tail_input - dark) * costs.host_scale
            + f.tail_input * costs.host_scale * costs.input_scale
            + dark
        )
        host = float(call_end[f.tail_call]) + tail
        if f.tail_dep >= 0:
            host = max(host, float(call_end[f.tail_dep]) + f.tail_dep_gap * costs.host_scale)
    device = float(np.max(np.asarray(act_end)[f.window_acts])) if len(f.window_acts) else host
    return float(max(host, device))


class _Run:
    """One scenario's times during a pass, and its cost of each node: the frame's columns with the
    scenario's scales applied (scenarios that scale a column alike share it)."""

    def __init__(self, g: Graph, f: Frame, costs: Costs, columns: _Scaled) -> None:
        nan = float("nan")
        self.costs = costs
        self.call_start, self.call_end = _filled(nan, g.calls), _filled(nan, g.calls)
        self.act_start, self.act_end = _filled(0.0, g.activities), _filled(nan, g.activities)
        self.gap, self._gap_values = columns.gap(costs.host_scale, costs.input_scale)  # before each call
        self.own, self._own_values = columns.own(costs.host_scale)  # each call's own time
        self.latency = columns.latency(costs.launch_scale)[0]
        self.duration = columns.duration(costs.device_scale, costs.comm_scale)[0]
        self._lists, self._anchor = f.lists, g.thread_anchor
        self._call_in, self._offsets = f.call_in, f.act_wait_offset
        self._waits, self._a_end, self._ret = g.call_waits, f.lists["a_end"], f.lists["ret"]

    def end_of(self, i: int) -> float:
        """Call ``i``'s end, computed the first time it is asked for (a blocking call's end is asked for
        before its own step when a later call or activity at the same instant needs it)."""
        value = self.call_end[i]
        if value == value:  # computed already
            return value
        ae, a_end = self.act_end, self._a_end
        done: float = max((ae[a] if ae[a] == ae[a] else a_end[a] for a in self._waits[i]), default=-1e300)
        value = float(max(self.call_start[i] + self.own[i], done + self._ret[i]))
        self.call_end[i] = value
        return value

    def chain(self, lo: int, hi: int) -> None:
        """Calls ``lo`` to ``hi - 1``, a chain after call ``lo - 1`` (``_agenda``): each starts its gap
        after the one before it ended. A long chain is summed by numpy, whose ``add.accumulate`` adds
        in order, one after the other, as the loop does."""
        cs, ce = self.call_start, self.call_end
        if hi - lo < _LONG_CHAIN:
            gap, own, end = self.gap, self.own, ce[lo - 1]
            for j in range(lo, hi):
                s = end + gap[j]
                cs[j] = s
                end = s + own[j]
                ce[j] = end
            return
        steps = np.empty(2 * (hi - lo) + 1)
        steps[0] = ce[lo - 1]
        steps[1::2] = self._gap_values[lo:hi]
        steps[2::2] = self._own_values[lo:hi]
        times = np.add.accumulate(steps)
        _store(cs, lo, times[1::2])
        _store(ce, lo, times[2::2])

    def call(self, i: int) -> None:
        """Call ``i``'s start, and its end unless it blocks (a blocking call that no longer waits ends
        after its own time)."""
        L, ce = self._lists, self.call_end
        p = L["prev"][i]
        if p >= 0:
            base = ce[p]
            if base != base:  # a blocking call whose end was not processed yet
                base = self.end_of(p)
        else:
            base = self._anchor.get(L["lanes"][i], L["c_start"][i] - L["gap"][i])
        s = base + self.gap[i]
        d = L["dep"][i]
        if d >= 0:  # the stretch before this call waited for another thread (or the thread began)
            done = ce[d]
            if done != done:
                done = self.end_of(d)
            dep_gap = L["dep_gap"][i]
            after = done + (dep_gap * self.costs.host_scale if self._call_in[i] else dep_gap)
            if p < 0 or after > s:
                s = after
        self.call_start[i] = s
        if not L["blocking"][i] or i in self.costs.no_wait:
            ce[i] = s + self.own[i]

    def activity(self, i: int) -> None:
        """Activity ``i``'s start and end."""
        L, ae = self._lists, self.act_end
        c = L["a_call"][i]
        if c < 0:
            s = L["a_start"][i]
        else:
            s = (self.end_of(c) if L["from_return"][i] else self.call_start[c]) + self.latency[i]
            if s != s:  # launch recorded after its activity started (clock skew): the recorded start
                s = L["a_start"][i]
        p = L["a_prev"][i]
        if p >= 0:
            after = ae[p] + L["a_gap"][i]
            if after > s:
                s = after
        for a, off in self._offsets[i]:
            after = ae[a] + off
            if after > s:
                s = after
        self.act_start[i] = s
        ae[i] = s + self.duration[i]


class _Scaled:
    """The frame's cost columns scaled for scenarios, per node inside the window: each distinct scaling
    computed once with numpy (the float operations of the per-node formula, in its order), and a result
    equal bit for bit to the frame's column shared with the frame instead of copied."""

    def __init__(self, f: Frame) -> None:
        self._f = f
        self._done: dict[tuple[str, float, float], tuple[Sequence[float], F64]] = {}
        self._arrays: dict[str, npt.NDArray[Any]] = {}

    def gap(self, host: float, loading: float) -> tuple[Sequence[float], F64]:
        part = self._array("gap_input")  # the part of each gap inside data loading
        dark = self._array("gap_untraced")  # ... and the part no event covers: kept as it is

        def scale(gap: F64) -> F64:
            plain = (gap - part) * host + part * host * loading
            return np.asarray(
                np.where(dark > 0, (gap - part - dark) * host + part * host * loading + dark, plain)
            )

        return self._get(("gap", host, loading), "call_in", scale)

    def own(self, host: float) -> tuple[Sequence[float], F64]:
        return self._get(("own", host, 1.0), "call_in", lambda own: own * host)

    def latency(self, launch: float) -> tuple[Sequence[float], F64]:
        hold = self._array("a_hold")  # launch delay no speed-up shortens
        return self._get(("a_lat", launch, 1.0), "act_in", lambda lat: (lat - hold) * launch + hold)

    def duration(self, device: float, comm: float | None) -> tuple[Sequence[float], F64]:
        if comm is None or comm == device:
            return self._get(("a_dur", device, device), "act_in", lambda dur: dur * device)
        collective = self._array("a_comm")
        return self._get(
            ("a_dur", device, comm), "act_in", lambda dur: np.where(collective, dur * comm, dur * device)
        )

    def _get(
        self, key: tuple[str, float, float], inside: str, scale: Callable[[F64], F64]
    ) -> tuple[Sequence[float], F64]:
        """The column scaled by ``scale`` inside the window, for the loop and as numpy values."""
        if key not in self._done:
            raw = self._array(key[0])
            values = np.where(self._array(inside), scale(raw), raw)
            same = np.array_equal(values.view(np.int64), raw.view(np.int64))
            self._done[key] = (self._f.lists[key[0]], raw) if same else (_sequence(values), values)
        return self._done[key]

    def _array(self, name: str) -> npt.NDArray[Any]:
        """A frame column as numpy (a view of a C array, a copy of a list), converted once."""
        if name not in self._arrays:
            f = self._f
            column = {
                "gap_input": f.gap_input,
                "gap_untraced": f.gap_untraced,
                "call_in": f.call_in,
                "act_in": f.act_in,
            }.get(name)
            self._arrays[name] = np.asarray(f.lists[name] if column is None else column)
        return self._arrays[name]


def _walk(g: Graph, f: Frame, costs: Sequence[Costs]) -> list[_Run]:
    """Re-time the graph under each of ``costs`` in one pass over the agenda in recorded time order (a
    topological order: every edge goes forward in time). What the scenarios share (which node, its
    predecessors, its kind) is read once per step; each scenario then does the float operations its own
    pass would, in the same order. Plain steps, most of a trace, take a short path inline."""
    scaled = _Scaled(f)
    runs = [_Run(g, f, c, scaled) for c in costs]
    L = f.lists
    a_call, a_prev, a_gap, a_start = L["a_call"], L["a_prev"], L["a_gap"], L["a_start"]
    chains = f.chains
    acts = [(r.call_start, r.act_start, r.act_end, r.latency, r.duration) for r in runs]
    for lo in range(0, len(f.agenda_kind), _CHUNK):  # converted a chunk at a time: no tuple per step kept
        kinds, index = f.agenda_kind[lo : lo + _CHUNK].tolist(), f.agenda_index[lo : lo + _CHUNK].tolist()
        for kind, i in zip(kinds, index, strict=True):
            # one loop per scenario with no calls: this runs once per call and activity of the trace
            if kind == PLAIN_ACT:
                c, p, queued = a_call[i], a_prev[i], a_gap[i]
                for cs, as_, ae, lat, dur in acts:
                    s = cs[c] + lat[i]
                    if s != s:  # the launch not re-timed (yet): the recorded start
                        s = a_start[i]
                    after = ae[p] + queued
                    if after > s:
                        s = after
                    as_[i] = s
                    ae[i] = s + dur[i]
            elif kind == CALL:
                stop = chains.get(i, 0)
                for run in runs:
                    run.call(i)
                    if stop:
                        run.chain(i + 1, stop)
            elif kind == ACT:
                for run in runs:
                    run.activity(i)
            else:
                for run in runs:
                    run.end_of(i)
    return runs
