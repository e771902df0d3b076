"""Device idle gaps and their causes (DESIGN.md §4), and the bubble each blocking call leaves.

A gap is a maximal idle interval of a device inside the window, at least ``min_gap_us`` long. Its cause is
judged from the activity that ends it and the host thread that launched that activity; the first rule that
applies wins:

- ``sync``: a blocking call left the queue empty. After a call that blocked the host for ``wait``, the
  following gaps on that device, up to ``wait`` of idle in total, are charged to it (its ``bubble``). A
  newer blocking call takes over the lead;
- ``input``: the launching thread was inside data loading for most of the gap;
- ``launch``: the launch call had started before the gap began and nothing else held the activity back
  (no stream predecessor, no event wait): submission latency;
- ``dependency``: the activity waited for another stream's event that completed as the gap ended (or it is
  a collective launched before the gap);
- ``host``: the launching thread started the launch only after the gap began (busy with other work);
- ``unknown``: no launch call is known for the activity (or no activity ends the gap).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from analyzer import intervals
from analyzer.graph import Graph
from analyzer.model import F64, TraceModel
from analyzer.names import EventKind
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
        k = int(np.searchsorted(starts, g1 - 1e-6, side="left"))
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
        self.calls = [
            c
            for c in np.argsort(g.call_awaited, kind="stable").tolist()
            if waited[c] > 0 and any(g.act_device[a] == device for a in g.call_waits[c])
        ]
        self.done = [float(g.call_awaited[c]) for c in self.calls]
        self.budget = {c: float(waited[c]) for c in self.calls}

    def current(self, gap_start: float) -> int:
        """The latest call whose awaited completion came at or before the gap's start (-1: none)."""
        k = int(np.searchsorted(self.done, gap_start + 1e-6, side="right")) - 1
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
    lead = leads.current(g0)
    if lead >= 0 and leads.budget[lead] > 0:
        charge = min(g1 - g0, leads.budget[lead])
        leads.budget[lead] -= charge
        e = int(g.call_event[lead])
        detail = f"{model.name_of(e)} blocked the host {float(g.waited()[lead]):.0f} us{_op(model, e)}"
        return Gap(device, g0, g1, Cause.SYNC, detail, call_site(model, e), lead, charge)
    call = int(g.act_call[ending]) if ending >= 0 else -1
    if call < 0:
        what = (
            f"{model.name_of(int(g.act_event[ending]))} has no launch call in the trace"
            if ending >= 0
            else "no work followed"
        )
        return Gap(device, g0, g1, Cause.UNKNOWN, what, None, -1, 0.0)
    lane = int(g.call_lane[call])
    launch_event = int(g.call_event[call])
    in_s, in_e = input_by_lane.get(lane, (np.zeros(0), np.zeros(0)))
    if len(in_s) and float(intervals.covered_in(in_s, in_e, np.array([g0]), np.array([g1]))[0]) >= 0.5 * (
        g1 - g0
    ):
        loader = work.busiest(lane, g0, g1, loaders_only=True) or "data loading"
        return Gap(
            device,
            g0,
            g1,
            Cause.INPUT,
            f"host loading data ({loader})",
            call_site(model, launch_event),
            -1,
            0.0,
        )
    # held back by an event: one of the events it waited for completed just as the gap ended
    held = any(float(g.act_end[w]) >= g1 - _BOUND_US for w in g.act_waits[ending])
    call_start = float(g.call_end[call] if g.act_from_return[ending] else g.call_start[call])
    if call_start <= g0 and not held:
        is_collective = "nccl" in model.name_of(int(g.act_event[ending])).lower()
        if not is_collective:
            detail = f"{model.name_of(launch_event)} started {g1 - call_start:.0f} us before its work ran"
            return Gap(device, g0, g1, Cause.LAUNCH, detail, call_site(model, launch_event), -1, 0.0)
        held = True
    if held:
        detail = f"{model.name_of(int(g.act_event[ending]))[:80]} waited for another stream"
        return Gap(device, g0, g1, Cause.DEPENDENCY, detail, None, -1, 0.0)
    busy_with = work.busiest(lane, g0, g1) or model.name_of(launch_event)
    return Gap(
        device, g0, g1, Cause.HOST, f"host busy in {busy_with}", call_site(model, launch_event), -1, 0.0
    )


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
        self.by_lane = {int(lane): idx[ev.lane[idx] == lane] for lane in np.unique(ev.lane[idx])}

    def busiest(self, lane: int, g0: float, g1: float, loaders_only: bool = False) -> str:
        ev = self.model.events
        idx = self.by_lane.get(lane)
        if idx is None:
            return ""
        k = int(np.searchsorted(ev.ts[idx], g1, side="left"))
        near = idx[max(0, k - self._SCAN) : k]
        overlap = np.minimum(ev.end[near], g1) - np.maximum(ev.ts[near], g0)
        if loaders_only:
            overlap = np.where(ev.kind[near] == EventKind.ANNOTATION, overlap, 0.0)
        if not len(near) or overlap.max() <= 0:
            return ""
        return self.model.name_of(int(near[int(np.argmax(overlap))]))
