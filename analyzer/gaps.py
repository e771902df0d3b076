"""Device idle gaps and their causes (DESIGN.md §4), and the bubble each blocking call leaves.

A gap is a maximal idle interval of a device inside the window, at least ``min_gap_us`` long. Its cause is
judged from the activity that ends it and the host thread that launched that activity:

- ``sync``: a blocking call left the queue empty. After a call that blocked the host for ``wait``, the
  following gaps on that device, up to ``wait`` of idle in total, are charged to it (its ``bubble``). A
  newer blocking call takes over the lead. The lead explains only the first ``charge`` µs of a gap: the
  rest is judged by the rules below, and the cause explaining more of the gap is reported;
- ``input``: the launching thread was inside data loading for most of the (rest of the) gap;
- ``dependency``: the activity waited for another stream's work that completed as the gap ended, is a
  collective (it waits for the other ranks), or was held longer than a plausible launch latency after a
  stream wait or by its CUDA graph's own order;
- ``launch``: the launch call had started before the gap began and the delay is a plausible launch
  latency for this device (derived from the trace, ``analyzer.edges``);
- ``host``: the launching thread started the launch only after the gap began (busy with other work);
- ``unknown``: no launch call is known for the activity, no activity ends the gap, or the activity was
  held past a plausible launch latency by something the trace does not show (the detail says so).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from enum import Enum

import numpy as np
import numpy.typing as npt

from analyzer import intervals
from analyzer.arrays import group_order
from analyzer.graph import Graph
from analyzer.model import F64, I64, TraceModel
from analyzer.names import ApiKind, EventKind
from analyzer.sites import CallSite, call_site

MIN_GAP_US = 20.0
_BOUND_US = 2.0  # an event that completed this close to a gap's end is what the gap waited for


class Cause(str, Enum):
    SYNC = "sync"
    INPUT = "input"
    LAUNCH = "launch"
    DEPENDENCY = "dependency"
    HOST = "host"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Gap:
    device: int
    start_us: float
    end_us: float
    cause: Cause
    detail: str
    call_site: CallSite | None
    blocking_call: int  # graph call index of the sync charged (-1 otherwise)
    charged_us: float  # part of the gap charged to that sync

    @property
    def dur_us(self) -> float:
        return self.end_us - self.start_us


@dataclass(frozen=True)
class GapReport:
    gaps: tuple[Gap, ...]
    bubble_us: dict[int, float]  # graph call index -> device idle charged to it
    idle_by_cause: dict[Cause, float]


def find_gaps(
    model: TraceModel,
    g: Graph,
    device: int,
    busy: tuple[F64, F64],
    start_us: float,
    end_us: float,
    input_by_lane: dict[int, tuple[F64, F64]],
    min_gap_us: float = MIN_GAP_US,
) -> GapReport:
    """Gaps of ``device`` (busy: its disjoint busy intervals inside the window) with causes and bubbles."""
    bs, be = busy
    lo = np.concatenate([[start_us], be])
    hi = np.concatenate([bs, [end_us]])
    keep = (hi - lo) >= min_gap_us
    lo, hi = lo[keep], hi[keep]
    mine = np.flatnonzero(g.act_device == device)
    order = mine[np.argsort(g.act_start[mine], kind="stable")]
    starts = g.act_start[order]
    leads = _Leads(g, device)
    work = _HostWork(model)
    gaps: list[Gap] = []
    bubbles: dict[int, float] = {}
    for g0, g1 in zip(lo.tolist(), hi.tolist(), strict=True):
        k = int(starts.searchsorted(g1 - 1e-6, side="left"))
        ending = int(order[k]) if k < len(order) and starts[k] <= g1 + 1e-6 else -1
        gap = _judge(model, g, device, g0, g1, ending, leads, input_by_lane, work)
        if gap.blocking_call >= 0:
            bubbles[gap.blocking_call] = bubbles.get(gap.blocking_call, 0.0) + gap.charged_us
        gaps.append(gap)
    idle: dict[Cause, float] = {c: 0.0 for c in Cause}
    for gap in gaps:
        idle[gap.cause] += gap.dur_us
    return GapReport(tuple(gaps), bubbles, idle)


class _Leads:
    """Blocking calls that waited for this device's work, in order of the completion they waited for."""

    def __init__(self, g: Graph, device: int) -> None:
        waited = g.waited()
        order = np.argsort(g.call_awaited, kind="stable")
        self.calls = [
            c
            for c in order[waited[order] > 0].tolist()
            if any(g.act_device[a] == device for a in g.call_waits[c])
        ]
        self.done = [float(g.call_awaited[c]) for c in self.calls]
        self.waited = {c: float(waited[c]) for c in self.calls}
        self.budget = dict(self.waited)

    def current(self, gap_start: float) -> int:
        """The latest call whose awaited completion came at or before the gap's start (-1: none)."""
        k = bisect.bisect_right(self.done, gap_start + 1e-6) - 1
        return self.calls[k] if k >= 0 else -1


def _judge(
    model: TraceModel,
    g: Graph,
    device: int,
    g0: float,
    g1: float,
    ending: int,
    leads: _Leads,
    input_by_lane: dict[int, tuple[F64, F64]],
    work: _HostWork,
) -> Gap:
    """A sync's lead explains the gap's first ``charge`` µs; the rest is judged by the other rules, and
    the cause that explains more of the gap is the one reported (the sync keeps its charge either way)."""
    lead, charge = leads.current(g0), 0.0
    if lead >= 0 and leads.budget[lead] > 0:
        charge = min(g1 - g0, leads.budget[lead])
        leads.budget[lead] -= charge
    else:
        lead = -1
    rest = _judge_rest(model, g, g0 + charge, g1, ending, input_by_lane, work)
    if lead >= 0 and charge >= rest.share:
        e = int(g.call_event[lead])
        detail = f"{model.name_of(e)} blocked the host {leads.waited[lead]:.0f} us{_op(model, e)}"
        if charge < g1 - g0 - 1e-6:
            detail += f" (explains {charge:.0f} us of the gap; the rest: {rest.cause.value})"
        return Gap(device, g0, g1, Cause.SYNC, detail, call_site(model, e), lead, charge)
    detail = rest.detail
    if lead >= 0:
        detail += f" (a sync's lead explains the first {charge:.0f} us)"
    return Gap(device, g0, g1, rest.cause, detail, rest.site, lead, charge)


@dataclass(frozen=True)
class _Verdict:
    cause: Cause
    detail: str
    site: CallSite | None
    share: float  # µs of the gap this cause explains


def _judge_rest(
    model: TraceModel,
    g: Graph,
    r0: float,
    g1: float,
    ending: int,
    input_by_lane: dict[int, tuple[F64, F64]],
    work: _HostWork,
) -> _Verdict:
    """The cause of the gap's part ``[r0, g1]`` not explained by a sync (DESIGN.md §4's rules after sync)."""
    share = max(g1 - r0, 0.0)
    call = int(g.act_call[ending]) if ending >= 0 else -1
    if call < 0:
        what = (
            f"{model.name_of(int(g.act_event[ending]))[:80]} has no launch call in the trace"
            if ending >= 0
            else "no work followed"
        )
        return _Verdict(Cause.UNKNOWN, what, None, share)
    lane = int(g.call_lane[call])
    launch_event = int(g.call_event[call])
    site = call_site(model, launch_event)
    in_s, in_e = input_by_lane.get(lane, intervals.NONE)
    if len(in_s) and share > 0:
        covered = float(intervals.covered_in(in_s, in_e, np.array([r0]), np.array([g1]))[0])
        if covered >= 0.5 * share:
            loader = work.busiest(lane, r0, g1, loaders_only=True) or "data loading"
            return _Verdict(Cause.INPUT, f"host loading data ({loader})", site, share)
    name = model.name_of(int(g.act_event[ending]))[:80]
    tol = max(_BOUND_US, g.wait_tolerance_us)
    waited = [w for w in g.act_waits[ending] if float(g.act_end[w]) >= g1 - tol]
    if waited:
        other = model.lanes[int(g.act_lane[waited[0]])].label
        return _Verdict(Cause.DEPENDENCY, f"{name} waited for work on {other}", None, share)
    issued = float(g.call_end[call] if g.act_from_return[ending] else g.call_start[call])
    delay = g1 - issued
    if issued <= r0 or (delay > float(g.act_bound[ending]) and delay > issued - r0):
        # launched before the gap (or early in it, then held far longer than the host took to launch)
        return _held(model, g, ending, call, delay, name, site, share)
    busy_with = work.busiest(lane, r0, g1) or model.name_of(launch_event)
    return _Verdict(Cause.HOST, f"host busy in {busy_with}", site, share)


def _held(
    model: TraceModel,
    g: Graph,
    ending: int,
    call: int,
    delay: float,
    name: str,
    site: CallSite | None,
    share: float,
) -> _Verdict:
    """The activity was launched before the gap began: launch latency when the delay is plausible for
    this device, else whatever held it (a collective's other ranks, a stream wait, a graph's order)."""
    launch = model.name_of(int(g.call_event[call]))
    if any(word in name.lower() for word in _COLLECTIVE_WORDS):
        return _Verdict(Cause.DEPENDENCY, f"{name} (a collective) waited for the other ranks", None, share)
    if delay <= float(g.act_bound[ending]):
        return _Verdict(Cause.LAUNCH, f"{launch} started {delay:.0f} us before its work ran", site, share)
    if bool(g.call_after_wait[call]):
        detail = f"{name} launched after a stream wait: held {delay:.0f} us waiting for another stream"
        return _Verdict(Cause.DEPENDENCY, detail, None, share)
    if int(model.events.api[int(g.call_event[call])]) == ApiKind.GRAPH_LAUNCH:
        return _Verdict(Cause.DEPENDENCY, f"{name} held {delay:.0f} us by its graph's own order", None, share)
    detail = f"{name} was held {delay:.0f} us after its launch ({launch}) by something not in the trace"
    return _Verdict(Cause.UNKNOWN, detail, site, share)


_COLLECTIVE_WORDS = ("nccl", "rccl", "allreduce", "all_reduce", "allgather", "reducescatter", "c10d::")


def _op(model: TraceModel, event: int) -> str:
    op = int(model.events.op[event])
    return f" in {model.name_of(op)}" if op >= 0 else ""


class _HostWork:
    """Host ops and annotations per thread, sorted by start, to name what a thread was doing in a gap."""

    _SCAN = 256  # ops starting before the gap's end that are looked at

    def __init__(self, model: TraceModel) -> None:
        self.model = model
        ev = model.events
        step = np.array([s.startswith("ProfilerStep#") for s in model.strings], dtype=np.bool_)
        mask = ev.is_kind(EventKind.CPU_OP, EventKind.ANNOTATION) & ~step[ev.name]
        idx = np.flatnonzero(mask)
        idx = idx[group_order(ev.lane[idx])]  # by lane, then start (the table's order)
        lanes = ev.lane[idx]
        # each lane's ops with their starts, split once: a lookup per gap must not touch every op
        self.by_lane: dict[int, tuple[I64, F64, F64, npt.NDArray[np.bool_]]] = {}
        for chunk in np.split(idx, np.flatnonzero(lanes[1:] != lanes[:-1]) + 1):
            if len(chunk):  # the lane's ops with their starts, ends and kinds, as contiguous columns
                annotation = ev.kind[chunk] == EventKind.ANNOTATION
                self.by_lane[int(ev.lane[chunk[0]])] = (chunk, ev.ts[chunk], ev.end[chunk], annotation)

    def busiest(self, lane: int, g0: float, g1: float, loaders_only: bool = False) -> str:
        """The op (or, with ``loaders_only``, the annotation) of the thread that overlaps ``[g0, g1]`` the
        most, among the ``_SCAN`` that start last before ``g1`` ("" when none overlaps it). Once per gap:
        slices of the lane's columns, no gather."""
        found = self.by_lane.get(lane)
        if found is None:
            return ""
        idx, ts, end, annotation = found
        k = int(ts.searchsorted(g1, side="left"))
        lo = max(0, k - self._SCAN)
        if lo == k:
            return ""
        overlap = np.minimum(end[lo:k], g1) - np.maximum(ts[lo:k], g0)
        if loaders_only:
            overlap[~annotation[lo:k]] = 0.0
        best = int(overlap.argmax())
        if overlap[best] <= 0:
            return ""
        return self.model.name_of(int(idx[lo + best]))
