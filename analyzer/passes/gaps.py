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
  stream wait or by its CUDA graph's own order (a graph's first node waits for the launch itself: unknown
  when that took longer than a plausible launch latency);
- ``launch``: the launch call had started before the gap began and the delay is a plausible launch
  latency for this device (derived from the trace, ``stallscope.analyzer.graph.edges``);
- ``host``: the launching thread started the launch only after the gap began (busy with other work); for
  an activity whose launch call is not in the trace, the device's driving thread was busy with its own
  events for at least half of the gap;
- ``untraced``: as ``host``, but none of the launching thread's events covers at least half of the gap
  (longer stretches than Python's overhead between ops: a sampled or filtered trace);
- ``unknown``: no launch call is known for the activity and its driving thread was not busy, no activity
  ends the gap, or the activity was held past a plausible launch latency by something the trace does not
  show (the detail says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from stallscope.analyzer.core import intervals
from stallscope.analyzer.core.arrays import distinct, group_order, window_max
from stallscope.analyzer.core.model import F64, I64, Mask, TraceModel
from stallscope.analyzer.core.names import ApiKind, EventKind, is_collective
from stallscope.analyzer.core.numbers import duration_text
from stallscope.analyzer.core.sites import CallSite, call_sites
from stallscope.analyzer.graph.dependency import Graph, per_call
from stallscope.analyzer.passes import grouped

MIN_GAP_US = 20.0
_BOUND_US = 2.0  # an event that completed this close to a gap's end is what the gap waited for


class Cause(str, Enum):
    SYNC = "sync"
    INPUT = "input"
    LAUNCH = "launch"
    DEPENDENCY = "dependency"
    HOST = "host"
    UNTRACED = "untraced"  # the launching thread ran nothing the trace shows (a sampled or filtered trace)
    UNKNOWN = "unknown"


class Gap(NamedTuple):
    """One idle interval of a device and why (a trace can have tens of thousands: a tuple is made five
    times faster than a frozen dataclass)."""

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
    untraced_by_lane: dict[int, tuple[F64, F64]] | None = None,
) -> GapReport:
    """Gaps of ``device`` (busy: its disjoint busy intervals inside the window) with causes and bubbles
    (``device_gaps`` of this one device)."""
    at = np.array([0, len(busy[0])], dtype=np.int64)
    found = device_gaps(
        model, g, [device], (at, *busy), start_us, end_us, input_by_lane, min_gap_us, untraced_by_lane
    )
    return found.report(device)


@dataclass(frozen=True)
class DeviceGaps:
    """The gaps of several devices (each device's in time order, the devices in the order asked), and the
    columns each device's report is made of."""

    gaps: tuple[Gap, ...]
    devices: list[int]
    at: I64  # device k's gaps are gaps[at[k] : at[k + 1]]
    lead: I64  # per gap: the blocking call whose lead it is in (-1: none)
    charge: F64  # per gap: the µs charged to it
    idle: F64  # per gap: its length
    causes: list[Cause]

    def report(self, device: int) -> GapReport:
        """One device's gaps, the idle each sync's lead charged (its bubble) and its idle by cause."""
        if device not in self.devices:
            return GapReport((), {}, _idle_by_cause(np.zeros(0), []))
        k = self.devices.index(device)
        a, b = int(self.at[k]), int(self.at[k + 1])
        bubbles: dict[int, float] = {}
        for blocking, charged in zip(self.lead[a:b].tolist(), self.charge[a:b].tolist(), strict=True):
            if blocking >= 0:
                bubbles[blocking] = bubbles.get(blocking, 0.0) + charged
        return GapReport(self.gaps[a:b], bubbles, _idle_by_cause(self.idle[a:b], self.causes[a:b]))


def device_gaps(
    model: TraceModel,
    g: Graph,
    devices: list[int],
    busy: tuple[I64, F64, F64],
    start_us: float,
    end_us: float,
    input_by_lane: dict[int, tuple[F64, F64]],
    min_gap_us: float = MIN_GAP_US,
    untraced_by_lane: dict[int, tuple[F64, F64]] | None = None,
) -> DeviceGaps:
    """Gaps of each of ``devices`` with causes and bubbles (busy: ``window.busy_by_device``'s offsets,
    starts and ends of each device's disjoint busy intervals inside the window).

    A sync's lead explains a gap's first ``charge`` µs; the rest is judged by the other rules, and the
    cause that explains more of the gap is the one reported (the sync keeps its charge either way). The
    rules' inputs are columns over all gaps of all devices (a trace can have tens of thousands of gaps,
    or thousands of devices); one loop writes them."""
    lo, hi, dev = _idle_spans(busy, len(devices), start_us, end_us)
    keep = (hi - lo) >= min_gap_us
    lo, hi, dev = lo[keep], hi[keep], dev[keep]
    shared = _Shared.of(model, g)
    index = _DeviceIndex(g, devices)
    lead, charge = _Leads(g, index, shared).charges(dev, lo, hi)
    host_time = _HostTime(model, g, index, input_by_lane, untraced_by_lane or {}, shared)
    rest = _rest(g, lo + charge, hi, index.endings(dev, hi), host_time.driver[dev], host_time)
    causes, details = _causes_after_sync(model, g, rest, shared)
    # the launching line is where to look unless the activity waited for something else
    located = np.array([c is not Cause.DEPENDENCY for c in causes], dtype=np.bool_)
    launched = (rest.rule != _NO_CALL) & (rest.rule != _DRIVER_BUSY)  # a launch call is known
    sites = call_sites(model, np.where(launched & located, rest.launch, -1))
    synced = np.flatnonzero((lead >= 0) & (charge >= rest.share))
    sync_sites = dict(zip(synced.tolist(), call_sites(model, g.call_event[lead[synced]]), strict=True))
    for i in np.flatnonzero(lead >= 0).tolist():  # the gaps a sync's lead explains, whole or in part
        blocking, charged = int(lead[i]), float(charge[i])
        if i in sync_sites:
            e = int(g.call_event[blocking])
            waited = float(shared.waited[blocking])
            detail = f"{model.name_of(e)} blocked the host {duration_text(waited)}{_op(model, e)}"
            if charged < float(hi[i]) - float(lo[i]) - 1e-6:
                detail += f" (explains {duration_text(charged)} of the gap; the rest: {causes[i].value})"
            causes[i], details[i], sites[i] = Cause.SYNC, detail, sync_sites[i]
        else:
            details[i] += f" (a sync's lead explains the first {duration_text(charged)})"
    ids = np.asarray(devices, dtype=np.int64)[dev].tolist()
    columns = (ids, lo.tolist(), hi.tolist(), causes, details, sites, lead.tolist(), charge.tolist())
    gaps = tuple(map(Gap, *columns))
    at = grouped.bounds(dev, len(devices))
    return DeviceGaps(gaps, list(devices), at, lead, charge, hi - lo, causes)


def _idle_spans(
    busy: tuple[I64, F64, F64], devices: int, start_us: float, end_us: float
) -> tuple[F64, F64, I64]:
    """Each device's idle spans inside the window (before its first busy interval, between two, after its
    last; empty ones too), in order, and the device (its position) of each."""
    at, bs, be = busy
    count = np.diff(at) + 1  # a device's spans: one more than its busy intervals
    dev = np.repeat(np.arange(devices, dtype=np.int64), count)
    first = np.zeros(len(dev), dtype=np.bool_)
    first[at[:-1] + np.arange(devices)] = True
    last = np.zeros(len(dev), dtype=np.bool_)
    last[at[1:] + np.arange(devices)] = True
    lo, hi = np.empty(len(dev)), np.empty(len(dev))
    lo[first], lo[~first] = start_us, be
    hi[last], hi[~last] = end_us, bs
    return lo, hi, dev


def _idle_by_cause(idle: F64, causes: list[Cause]) -> dict[Cause, float]:
    """Each cause's idle time: its gaps' lengths added one by one in order (a running sum, as a loop
    over the gaps adds them: the same float to the last bit)."""
    code = {cause: n for n, cause in enumerate(Cause)}
    of = np.fromiter(map(code.__getitem__, causes), dtype=np.int8, count=len(causes))
    present = set(causes)
    totals = {cause: np.cumsum(idle[of == n]) for cause, n in code.items() if cause in present}
    return {cause: float(totals[cause][-1]) if cause in totals else 0.0 for cause in code}


class _DeviceIndex:
    """The devices asked about (each once; by position) and their activities in order of start."""

    def __init__(self, g: Graph, devices: list[int]) -> None:
        self.devices = devices
        acts = [g.device_acts(d) for d in devices]
        self.acts = np.concatenate([np.zeros(0, dtype=np.int64), *acts]).astype(np.int64)
        self.act_group = np.repeat(np.arange(len(devices), dtype=np.int64), [len(a) for a in acts])
        by_start = np.lexsort((g.act_start[self.acts], self.act_group))  # stable: activity order on a tie
        self.by_start, self.start_group = self.acts[by_start], self.act_group[by_start]
        self.starts = g.act_start[self.by_start]
        self.at = grouped.bounds(self.start_group, len(devices))

    def endings(self, dev: I64, gap_end: F64) -> I64:
        """The activity of its device that starts as each gap ends (-1: none does)."""
        if not len(self.starts):
            return np.full(len(gap_end), -1, dtype=np.int64)
        k = grouped.searchsorted(self.start_group, self.starts, dev, gap_end - 1e-6, side="left")
        end = self.at[1:][dev]
        at = np.minimum(k, np.maximum(end - 1, 0))
        found = (k < end) & (self.starts[at] <= gap_end + 1e-6)
        return np.where(found, self.by_start[at], -1).astype(np.int64)


class _Leads:
    """Blocking calls that waited for each device's work, in order of the completion they waited for."""

    def __init__(self, g: Graph, index: _DeviceIndex, shared: _Shared) -> None:
        calls = [shared.leads.get(d, []) for d in index.devices]
        self.calls = np.array([c for mine in calls for c in mine], dtype=np.int64)
        self.group = np.repeat(np.arange(len(calls), dtype=np.int64), [len(mine) for mine in calls])
        self.done = g.call_awaited[self.calls]
        self.first = grouped.bounds(self.group, len(calls))
        self.waited = shared.waited

    def charges(self, dev: I64, lo: F64, hi: F64) -> tuple[I64, F64]:
        """Per gap (each device's in time order): the call whose lead it is in and the µs charged to that
        call (-1 and 0.0: none). The lead is the latest call whose awaited completion came at or before
        the gap's start; the gaps of a device in its lead spend its budget (the time it blocked) in turn,
        until none is left (each device has its own budget of each call)."""
        lead = np.full(len(lo), -1, dtype=np.int64)
        charge = np.zeros(len(lo))
        if not len(self.calls):
            return lead, charge
        at = grouped.searchsorted(self.group, self.done, dev, lo + 1e-6, side="right") - 1
        led = np.flatnonzero(at >= self.first[dev])
        budget: dict[tuple[int, int], float] = {}
        columns = (led.tolist(), dev[led].tolist(), self.calls[at[led]].tolist(), (hi - lo)[led].tolist())
        for i, k, call, idle in zip(*columns, strict=True):
            left = budget.get((k, call), float(self.waited[call]))
            if left > 0:
                charged = min(idle, left)
                budget[k, call] = left - charged
                lead[i], charge[i] = call, charged
        return lead, charge


# the rule after sync that decides a gap's cause, in the order they are tried (see the module docstring)
_NO_CALL, _INPUT, _WAITED, _HELD, _HOST, _UNTRACED, _DRIVER_BUSY = range(7)
_WORK_KINDS = (EventKind.CPU_OP, EventKind.ANNOTATION, EventKind.PYTHON, EventKind.RUNTIME, EventKind.DRIVER)


class _HostTime:
    """What the host threads did, as the gap rules read it: each thread's data loading and untraced
    stretches, and each device's driving thread (the one that launched most of its work, the first of
    them on a tie, else the one that issued most calls; -1: none) with the time its own events cover."""

    def __init__(
        self,
        model: TraceModel,
        g: Graph,
        index: _DeviceIndex,
        inputs: dict[int, tuple[F64, F64]],
        untraced: dict[int, tuple[F64, F64]],
        shared: _Shared,
    ) -> None:
        self.inputs, self.untraced = inputs, untraced
        self.driver = _drivers(g, index)
        self.driver_work = {lane: shared.work_of(lane) for lane in distinct(self.driver).tolist()}
        self.any_work = shared.any_work  # every thread's (after the last work)

    def share_of(self, parts: dict[int, tuple[F64, F64]], lane: I64, lo: F64, hi: F64, rows: Mask) -> F64:
        """Per gap of ``rows``, the part of ``[lo, hi]`` its thread ``lane`` spent in ``parts`` (0 for the
        other gaps)."""
        out = np.zeros(len(hi))
        for at in _by_lane(lane, rows):
            s, e = parts.get(int(lane[at[0]]), intervals.NONE)
            if len(s):
                out[at] = intervals.covered_in(s, e, lo[at], hi[at])
        return out


def _by_lane(lane: I64, rows: Mask) -> list[I64]:
    """The rows (positions, in order) of each thread of ``lane[rows]``, by thread: one sort, not a scan
    of every row per thread (the gaps of thousands of devices can have thousands of threads)."""
    chosen = np.flatnonzero(rows)
    if not len(chosen):
        return []
    chosen = chosen[group_order(lane[chosen])]
    threads = lane[chosen]
    return np.split(chosen, np.flatnonzero(threads[1:] != threads[:-1]) + 1)


def _drivers(g: Graph, index: _DeviceIndex) -> I64:
    """Per device of ``index``, its driving thread (``_HostTime``)."""
    devices = len(index.devices)
    fallback = int(np.bincount(g.call_lane).argmax()) if g.calls else -1
    driver = np.full(devices, fallback, dtype=np.int64)
    linked = g.act_call[index.acts] >= 0
    if not linked.any():
        return driver
    lanes = np.asarray(per_call(g.call_lane, g.act_call[index.acts[linked]]), dtype=np.int64)
    group = index.act_group[linked]
    width = int(lanes.max()) + 1
    pairs, count = np.unique(group * width + lanes, return_counts=True)
    group, lanes = pairs // width, pairs % width
    best = np.lexsort((lanes, -count, group))  # each device's most launches first, the lowest thread on a tie
    firsts = best[np.r_[True, group[best][1:] != group[best][:-1]]]
    driver[group[firsts]] = lanes[firsts]
    return driver


@dataclass(frozen=True)
class _Rest:
    """Per gap, its part ``[r0, g1]`` not explained by a sync: the rule that decides its cause and what
    the verdict names (columns; entries a gap's rule does not use are arbitrary)."""

    r0: F64
    g1: F64
    share: F64  # µs of the gap the rest explains
    rule: npt.NDArray[np.int8]
    ending: I64  # the activity that ends the gap (-1: none)
    lane: I64  # the launching thread
    launch: I64  # the launch call's event
    waited_for: I64  # the first activity it waited for that completed as the gap ended
    delay: F64  # from the launch's issue to the gap's end


def _rest(g: Graph, r0: F64, g1: F64, ending: I64, driver: I64, host: _HostTime) -> _Rest:
    """The rule after sync for each gap's part ``[r0, g1]``, tried in order: no launch call (the device's
    driving thread busy with its own events for at least half of it, else unknown), the thread was
    loading data for at least half of it (input), the activity waited for another stream's work that
    completed as the gap ended (dependency), it was launched before the part began or held far longer
    than the host took to launch it (``_held``), else the host: untraced when none of the thread's events
    covers at least half of the part, busy otherwise."""
    share = np.maximum(g1 - r0, 0.0)
    call = np.where(ending >= 0, per_call(g.act_call, ending), -1)
    lane = np.asarray(per_call(g.call_lane, call), dtype=np.int64)
    judged = (call >= 0) & (share > 0)
    loading = host.share_of(host.inputs, lane, r0, g1, judged) >= 0.5 * share
    loading &= judged
    tol = max(_BOUND_US, g.wait_tolerance_us)
    waited_for = np.full(len(g1), -1, dtype=np.int64)
    left = np.flatnonzero((call >= 0) & ~loading)
    for i, activity, end in zip(left.tolist(), ending[left].tolist(), g1[left].tolist(), strict=True):
        for w in g.act_waits[activity]:
            if float(g.act_end[w]) >= end - tol:
                waited_for[i] = w
                break
    issued = np.where(
        per_call(g.act_from_return, ending), per_call(g.call_end, call), per_call(g.call_start, call)
    )
    delay = g1 - issued
    bound = np.asarray(per_call(g.act_bound, ending), dtype=np.float64)
    held = (issued <= r0) | ((delay > bound) & (delay > issued - r0))
    rule = np.where(held, _HELD, _HOST)
    dark = (rule == _HOST) & judged
    rule[dark & (host.share_of(host.untraced, lane, r0, g1, dark) >= 0.5 * share)] = _UNTRACED
    rule[waited_for >= 0] = _WAITED
    rule[loading] = _INPUT
    unlinked = (call < 0) & (share > 0)  # no launch call in the trace, or no work followed at all
    rule[call < 0] = _NO_CALL
    unlinked &= driver >= 0  # (driver: per gap, its device's driving thread)
    if unlinked.any():
        busy = host.share_of(host.driver_work, driver, r0, g1, unlinked) >= 0.5 * share
        tail = unlinked & (ending < 0) & ~busy  # nothing followed: any thread still working
        anyone = dict.fromkeys(host.driver_work, host.any_work)
        busy |= host.share_of(anyone, driver, r0, g1, tail) >= 0.5 * share
        rule[unlinked & busy] = _DRIVER_BUSY
        lane = np.where(unlinked & busy, driver, lane)
    launch = np.asarray(per_call(g.call_event, call), dtype=np.int64)
    return _Rest(r0, g1, share, rule.astype(np.int8), ending, lane, launch, waited_for, delay)


def _causes_after_sync(
    model: TraceModel, g: Graph, rest: _Rest, shared: _Shared
) -> tuple[list[Cause], list[str]]:
    """Each gap's cause after sync (from ``_rest``'s rule) and the detail that says why."""
    strings, name = model.strings, model.events.name
    ending_name = per_call(name, np.asarray(per_call(g.act_event, rest.ending), dtype=np.int64)).tolist()
    launch_name = per_call(name, rest.launch).tolist()
    work = shared.host_work
    busy_with = work.busiest(rest.lane, rest.r0, rest.g1, (rest.rule == _HOST) | (rest.rule == _DRIVER_BUSY))
    loader = work.busiest(rest.lane, rest.r0, rest.g1, rest.rule == _INPUT, loaders_only=True)
    held = _held(model, g, rest, shared.first_start)
    causes: list[Cause] = []
    details: list[str] = []
    for i, (rule, ending) in enumerate(zip(rest.rule.tolist(), rest.ending.tolist(), strict=True)):
        if rule == _HOST:
            cause, detail = Cause.HOST, f"host busy in {busy_with[i] or strings[launch_name[i]]}"
        elif rule == _UNTRACED:
            cause = Cause.UNTRACED
            detail = f"{model.lanes[int(rest.lane[i])].label} ran nothing the trace shows before launching"
        elif rule == _DRIVER_BUSY:
            why = (
                f"the launch of {strings[ending_name[i]][:80]} is not in the trace"
                if ending >= 0
                else "no device work followed"
            )
            cause, detail = Cause.HOST, f"host busy in {busy_with[i] or 'its own work'} ({why})"
        elif rule == _HELD:
            cause, detail = held[i]
        elif rule == _INPUT:
            cause, detail = Cause.INPUT, f"host loading data ({loader[i] or 'data loading'})"
        elif rule == _WAITED:
            other = model.lanes[int(g.act_lane[rest.waited_for[i]])].label
            cause, detail = Cause.DEPENDENCY, f"{strings[ending_name[i]][:80]} waited for work on {other}"
        elif ending >= 0:
            cause, detail = Cause.UNKNOWN, f"{strings[ending_name[i]][:80]} has no launch call in the trace"
        else:
            cause, detail = Cause.UNKNOWN, "no work followed"
        causes.append(cause)
        details.append(detail)
    return causes, details


def _held(model: TraceModel, g: Graph, rest: _Rest, first_start: F64) -> dict[int, tuple[Cause, str]]:
    """The gaps whose activity was launched before their rest began (or held far longer than the host
    took to launch it): launch latency when the delay is plausible for this device, else whatever held it
    (a collective's other ranks, a stream wait, a graph's order)."""
    rows = np.flatnonzero(rest.rule == _HELD)
    ending, launch = rest.ending[rows], rest.launch[rows]
    call, delay = g.act_call[ending], rest.delay[rows]
    strings, ev = model.strings, model.events
    columns = (
        rows.tolist(),
        [strings[n][:80] for n in ev.name[g.act_event[ending]].tolist()],
        [strings[n] for n in ev.name[launch].tolist()],
        delay.tolist(),
        (delay <= g.act_bound[ending]).tolist(),
        g.call_after_wait[call].tolist(),
        (ev.api[launch] == ApiKind.GRAPH_LAUNCH).tolist(),
        _first_of_call(g, ending, first_start).tolist(),
    )
    verdicts: dict[int, tuple[Cause, str]] = {}
    for i, name, launched, held_us, plausible, after_wait, graph, first in zip(*columns, strict=True):
        if is_collective(name) or "c10d::" in name:
            verdicts[i] = Cause.DEPENDENCY, f"{name} (a collective) waited for the other ranks"
        elif plausible:
            verdicts[i] = Cause.LAUNCH, f"{launched} started {duration_text(held_us)} before its work ran"
        elif after_wait:
            detail = f"{name} launched after a stream wait: held {duration_text(held_us)} waiting for another stream"
            verdicts[i] = Cause.DEPENDENCY, detail
        elif graph and first:  # nothing of its graph ran before it: it waited for the launch itself
            detail = (
                f"{name}, the first node of its CUDA graph, started {duration_text(held_us)} after the graph "
                f"launch ({launched}): held by the launch or what it waited for, which the trace does not show"
            )
            verdicts[i] = Cause.UNKNOWN, detail
        elif graph:
            verdicts[i] = Cause.DEPENDENCY, f"{name} held {duration_text(held_us)} by its graph's own order"
        else:
            detail = f"{name} was held {duration_text(held_us)} after its launch ({launched}) by something not in the trace"
            verdicts[i] = Cause.UNKNOWN, detail
    return verdicts


def _first_starts(g: Graph) -> F64:
    """Per call, the earliest start of the activities it issued (inf: none)."""
    linked = np.flatnonzero(g.act_call >= 0)
    first = np.full(g.calls, np.inf)
    np.minimum.at(first, g.act_call[linked], g.act_start[linked])
    return first


def _first_of_call(g: Graph, acts: I64, first: F64) -> Mask:
    """Per activity in ``acts``: none of the activities its launch call issued started before it
    (``first``: each call's earliest activity start)."""
    call = g.act_call[acts]
    earliest = np.asarray(per_call(first, call), dtype=np.float64)
    return np.asarray((call < 0) | (g.act_start[acts] <= earliest))


def _op(model: TraceModel, event: int) -> str:
    op = int(model.events.op[event])
    return f" in {model.name_of(op)}" if op >= 0 else ""


class _Shared:
    """What the gaps of every device read and no device changes, derived once per graph (a trace can
    have thousands of devices or streams: nothing here is recomputed, or rescanned, per device)."""

    _KEY = "gaps"

    def __init__(self, model: TraceModel, g: Graph) -> None:
        ev = model.events
        step = np.array([s.startswith("ProfilerStep#") for s in model.strings], dtype=np.bool_)
        host = ~model.lane_on_device[ev.lane]
        work = np.flatnonzero(host & ev.is_kind(*_WORK_KINDS) & ~step[ev.name])
        self._ts, self._end = ev.ts, ev.end
        self.any_work = intervals.union(ev.ts[work], ev.end[work])
        work = work[group_order(ev.lane[work])]  # by lane, then event order
        lanes = ev.lane[work]
        cuts = np.flatnonzero(lanes[1:] != lanes[:-1]) + 1
        self._work = {int(ev.lane[c[0]]): np.sort(c) for c in np.split(work, cuts) if len(c)}
        self._work_union: dict[int, tuple[F64, F64]] = {}
        self.host_work = _HostWork(model)
        self.first_start = _first_starts(g)
        # blocking calls that waited (in order of the completion they waited for), by each device waited on
        self.waited = g.waited()
        order = np.argsort(g.call_awaited, kind="stable")
        self.leads: dict[int, list[int]] = {}
        for c in order[self.waited[order] > 0].tolist():
            for d in dict.fromkeys(int(g.act_device[a]) for a in g.call_waits[c]):
                self.leads.setdefault(d, []).append(c)

    def work_of(self, lane: int) -> tuple[F64, F64]:
        """The union of the host work events of thread ``lane`` (empty for -1 or a thread without any)."""
        if lane not in self._work_union:
            on = self._work.get(lane, np.zeros(0, dtype=np.int64))
            self._work_union[lane] = intervals.union(self._ts[on], self._end[on])
        return self._work_union[lane]

    @classmethod
    def of(cls, model: TraceModel, g: Graph) -> _Shared:
        found = g.memo.get(cls._KEY)
        if isinstance(found, tuple) and found[0] is model and isinstance(found[1], _Shared):
            return found[1]
        shared = cls(model, g)
        g.memo[cls._KEY] = (model, shared)
        return shared


class _HostWork:
    """Host ops and annotations per thread, sorted by start, to name what a thread was doing in a gap."""

    _SCAN = 256  # ops starting before the gap's end that are looked at
    _NARROW = 16  # of them, the last ones compared when the others all end before the gap
    _CHUNK = 512  # gaps matched to their ops at a time (a matrix of _CHUNK x _SCAN)

    def __init__(self, model: TraceModel) -> None:
        self.model = model
        ev = model.events
        step = np.array([s.startswith("ProfilerStep#") for s in model.strings], dtype=np.bool_)
        mask = ev.is_kind(EventKind.CPU_OP, EventKind.ANNOTATION) & ~step[ev.name]
        idx = np.flatnonzero(mask)
        idx = idx[group_order(ev.lane[idx])]  # by lane, then start (the table's order)
        lanes = ev.lane[idx]
        # each lane's ops (their events, starts, ends and kinds) as contiguous columns, each led by _SCAN
        # blanks so that the _SCAN ops before any op are one row of a sliding window; a blank starts and
        # ends at 0, so it overlaps no window by more than 0 and is never the one named
        blank = np.zeros(self._SCAN)
        self._window_ends: dict[int, F64] = {}
        self.by_lane: dict[int, tuple[I64, F64, F64, Mask]] = {}
        for chunk in np.split(idx, np.flatnonzero(lanes[1:] != lanes[:-1]) + 1):
            if len(chunk):
                self.by_lane[int(ev.lane[chunk[0]])] = (
                    np.concatenate([blank.astype(np.int64), chunk]),
                    np.concatenate([blank, ev.ts[chunk]]),
                    np.concatenate([blank, ev.end[chunk]]),
                    np.concatenate([blank.astype(np.bool_), ev.kind[chunk] == EventKind.ANNOTATION]),
                )

    def busiest(self, lanes: I64, g0: F64, g1: F64, rows: Mask, loaders_only: bool = False) -> list[str]:
        """For each gap of ``rows`` (the others get ""), the op (or, with ``loaders_only``, the
        annotation) of its thread that overlaps ``[g0, g1]`` the most, the first of them on a tie, among
        the ``_SCAN`` that start last before ``g1`` ("" when none overlaps it). Most gaps overlap only
        their last few ops: where the latest end among the others is no later than the gap's start (none
        of them can overlap it), only the last ``_NARROW`` are compared."""
        names = [""] * len(g1)
        for mine in _by_lane(lanes, rows):
            lane = int(lanes[mine[0]])
            found = self.by_lane.get(lane)
            if found is None:
                continue
            before = found[1][self._SCAN :].searchsorted(g1[mine], side="left")  # row k: ops k .. k+_SCAN-1
            last = min(self._NARROW, self._SCAN)
            others_end = self._others_end(lane, found[2], self._SCAN - last)[before]
            narrow = others_end <= g0[mine]  # none of the others overlaps the gap (times are finite)
            for width, pick in ((last, narrow), (self._SCAN, ~narrow)):
                gaps, first = mine[pick], before[pick] + (self._SCAN - width)
                self._name_busiest(names, found, width, gaps, first, g0, g1, loaders_only)
        return names

    def _others_end(self, lane: int, ends: F64, width: int) -> F64:
        """Per row of ``lane``'s ops (``busiest``'s ``before``), the latest end of its first ``width`` ops:
        computed once per thread (the gaps of every device ask the same threads)."""
        found = self._window_ends.get(lane)
        if found is None:
            found = window_max(ends, width, np.arange(len(ends) - self._SCAN + 1))
            self._window_ends[lane] = found
        return found

    def _name_busiest(
        self,
        names: list[str],
        ops: tuple[I64, F64, F64, Mask],
        width: int,
        gaps: I64,
        first: I64,
        g0: F64,
        g1: F64,
        loaders_only: bool,
    ) -> None:
        """``busiest`` over the ``width`` ops from ``first`` on for each of ``gaps``, as the rows of a
        matrix, ``_CHUNK`` gaps at a time."""
        if not len(gaps):
            return
        idx, ts, end, annotation = ops
        window = np.lib.stride_tricks.sliding_window_view  # row k: ops k .. k+width-1
        ts_rows, end_rows, annotation_rows = window(ts, width), window(end, width), window(annotation, width)
        for at in range(0, len(gaps), self._CHUNK):
            gap, k = gaps[at : at + self._CHUNK], first[at : at + self._CHUNK]
            overlap, started = end_rows[k], ts_rows[k]  # copies, computed on in place
            np.minimum(overlap, g1[gap, None], out=overlap)
            np.subtract(overlap, np.maximum(started, g0[gap, None], out=started), out=overlap)
            if loaders_only:
                overlap[~annotation_rows[k]] = 0.0
            best = overlap.argmax(axis=1)
            found_op = ~(overlap[np.arange(len(k)), best] <= 0)  # not `> 0`: a NaN overlap is named
            strings, op_names = self.model.strings, self.model.events.name[idx[k[found_op] + best[found_op]]]
            for i, name in zip(gap[found_op].tolist(), op_names.tolist(), strict=True):
                names[i] = strings[name]
