"""One rank -> its ``RankTable``: the per-rank pipeline's results, reduced to what the job step needs.

``reduce_file`` is what a worker runs: load (cached per file), analyse with the existing per-rank pipeline,
find the collectives, and keep per collective what the rank's critical path did since the previous one.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import numpy.typing as npt

from stallscope.analyzer.analysis import Analysis, analyze_model
from stallscope.analyzer.core import intervals
from stallscope.analyzer.core.arrays import distinct
from stallscope.analyzer.core.errors import StallscopeError
from stallscope.analyzer.core.model import TraceModel
from stallscope.analyzer.core.names import EventKind
from stallscope.analyzer.core.sites import call_site, parse_frame
from stallscope.analyzer.job.collectives import ArgIndex, Found, find_collectives, scan_args
from stallscope.analyzer.job.tables import (
    KINDS,
    Collective,
    Overlap,
    RankFailure,
    RankTable,
    SiteTime,
    StepRow,
)
from stallscope.analyzer.load import cache
from stallscope.analyzer.load.loader import load_file
from stallscope.analyzer.passes.critical import CriticalPath, Kind
from stallscope.analyzer.passes.gaps import Cause
from stallscope.analyzer.passes.window import busy_intervals

SITES_PER_KIND = 2
_HOST_KINDS = (EventKind.CPU_OP, EventKind.ANNOTATION, EventKind.PYTHON, EventKind.RUNTIME, EventKind.DRIVER)


def reduce_file(path: str, use_cache: bool = True) -> RankTable | RankFailure:
    """Load, analyse and reduce one rank file. A file that cannot be used is a ``RankFailure`` with its
    one-line error (never an exception: one rank's failure is not the job's)."""
    try:
        model = load_file(Path(path), use_cache=use_cache)
        table = reduce_analysis(analyze_model(model), scan_args(path))
        cache.wait()  # a worker process may end soon after: finish writing its cached model first
        return table
    except StallscopeError as exc:
        return RankFailure(path, str(exc))
    except (MemoryError, RecursionError, ValueError) as exc:  # never a traceback for one bad rank
        return RankFailure(path, f"{path}: cannot analyse ({type(exc).__name__}: {exc})")


def reduce_analysis(a: Analysis, args: ArgIndex, rank: int | None = None) -> RankTable:
    """The table of an analysed rank (``rank`` overrides the trace's ``distributedInfo``)."""
    model = a.model
    found = find_collectives(model, args)
    steps = tuple(StepRow(s.name, s.start_us, s.dur_us, s.device_idle_us) for s in a.steps)
    colls = _collectives(a, found)
    r = rank if rank is not None else (model.rank if model.rank is not None else -1)  # -1: numbered later
    notes = () if found else ("no collective kernels (NCCL/RCCL) in this rank",)
    return RankTable(
        rank=r,
        world_size=model.world_size,
        path=model.path,
        events=model.event_count,
        window_start_us=a.window.start_us,
        window_end_us=a.window.end_us,
        summary=a.summary,
        steps=steps,
        collectives=colls,
        overlap=_overlap(a, found),
        notes=notes,
    )


def _collectives(a: Analysis, found: list[Found]) -> tuple[Collective, ...]:
    model = a.model
    ev = model.events
    starts = [s.start_us for s in a.steps]
    prev_end = a.window.start_us
    cut = _Intervals(a)
    out: list[Collective] = []
    for f in found:
        start, end = float(ev.ts[f.event]), float(ev.end[f.event])
        lo = min(prev_end, start)
        before, critical, sites = cut.before(lo, start)
        waited, sync_site = cut.syncs(lo, start)
        launch = float(ev.ts[f.launch_event]) if f.launch_event >= 0 else start
        step = int(np.searchsorted(starts, start, side="right")) - 1
        if step >= 0 and start > a.steps[step].start_us + a.steps[step].dur_us:
            step = -1
        out.append(
            Collective(
                f.name, f.group, f.seq, f.nelems, f.dtype, model.name_of(f.event),
                launch, start, end, step, lo, before, critical, sites, waited, sync_site,
            )
        )  # fmt: skip
        prev_end = max(prev_end, end)
    return tuple(out)


_GAP_KIND = {
    Cause.SYNC: Kind.SYNC,
    Cause.INPUT: Kind.INPUT,
    Cause.HOST: Kind.HOST,
    Cause.UNTRACED: Kind.UNTRACED,
    Cause.LAUNCH: Kind.LAUNCH,
    Cause.DEPENDENCY: Kind.IDLE,
    Cause.UNKNOWN: Kind.IDLE,
}


class _Intervals:
    """What the rank did before each collective: its main device's busy time and gaps (by cause, with
    call sites), and its critical path, cut to any interval."""

    def __init__(self, a: Analysis) -> None:
        self.a = a
        dev = a.main_device
        none = (np.zeros(0), np.zeros(0))
        self.busy = busy_intervals(a.model, dev, a.window) if dev is not None else none
        self.compute = (
            busy_intervals(a.model, dev, a.window, without_collectives=True) if dev is not None else none
        )
        gaps = sorted((g for g in a.gaps if g.device == dev), key=lambda g: g.start_us)
        self.gaps = gaps
        self.g_start = np.array([g.start_us for g in gaps])
        self.g_end = np.array([g.end_us for g in gaps])
        self.host = _HostPlaces(a.model)

    def syncs(self, lo: float, hi: float) -> tuple[float, str | None]:
        """Host time blocked in syncs inside [lo, hi], and where the longest was."""
        # only a sync that returned before the arrival can have delayed it (one waiting on the
        # collective itself, issued by a host running ahead, did not)
        mine = [s for s in self.a.syncs if lo <= s.start_us and s.start_us + s.wait_us <= hi]
        if not mine:
            return 0.0, None
        longest = max(mine, key=lambda s: s.wait_us)
        return sum(s.wait_us for s in mine), str(longest.call_site) if longest.call_site else longest.op

    def before(
        self, lo: float, hi: float
    ) -> tuple[tuple[float, ...], tuple[float, ...], tuple[SiteTime, ...]]:
        split = dict.fromkeys(KINDS, 0.0)
        places: dict[tuple[Kind, str], float] = defaultdict(float)
        if hi > lo:
            busy = float(intervals.covered_in(*self.busy, np.array([lo]), np.array([hi]))[0])
            compute = float(intervals.covered_in(*self.compute, np.array([lo]), np.array([hi]))[0])
            split[Kind.DEVICE] = compute  # the rank's busy split: compute (and copies), then collectives
            split[Kind.COMMUNICATION] = max(busy - compute, 0.0)
            idle = 0.0
            first = int(np.searchsorted(self.g_end, lo, side="right"))
            for g in self.gaps[first:]:
                if g.start_us >= hi:
                    break
                d = min(g.end_us, hi) - max(g.start_us, lo)
                if d <= 0:
                    continue
                kind = _GAP_KIND[g.cause]
                split[kind] += d
                idle += d
                if g.call_site is not None:
                    places[(kind, str(g.call_site))] += d
            split[Kind.IDLE] += max(hi - lo - busy - idle, 0.0)
        critical, critical_places = _critical(self.host, self.a.critical, lo, hi)
        named = {k for k, _ in critical_places}
        places = {key: us for key, us in places.items() if key[0] not in named}  # the gaps name the rest
        places.update(critical_places)
        sites: list[SiteTime] = []
        for kind in KINDS:
            mine = sorted(((us, site) for (k, site), us in places.items() if k == kind), reverse=True)
            sites.extend(SiteTime(kind, site, us) for us, site in mine[:SITES_PER_KIND])
        return tuple(split[k] for k in KINDS), critical, tuple(sites)


def _critical(
    host: _HostPlaces, cp: CriticalPath | None, lo: float, hi: float
) -> tuple[tuple[float, ...], dict[tuple[Kind, str], float]]:
    """Critical-path time per kind inside [lo, hi], and the places of its host-side kinds."""
    if cp is None or hi <= lo:
        return tuple(0.0 for _ in KINDS), {}
    s = np.maximum(cp.start_us, lo)
    e = np.minimum(cp.end_us, hi)
    inside = np.flatnonzero(e > s)
    per_kind = np.bincount(cp.kind[inside], weights=(e - s)[inside], minlength=len(KINDS))
    places: dict[tuple[Kind, str], float] = defaultdict(float)
    for i in inside.tolist():
        kind = KINDS[int(cp.kind[i])]
        if kind in (Kind.IDLE, Kind.DEVICE, Kind.COMMUNICATION):
            continue  # a device kernel or a wait has no host call site worth naming
        at = (float(s[i]) + float(e[i])) / 2
        places[(kind, host.place(int(cp.event[i]), int(cp.lane[i]), at))] += float(e[i] - s[i])
    return tuple(float(x) for x in per_kind), places


class _HostPlaces:
    """Names a piece of host work: the innermost user frame around it, else the op that ran it."""

    def __init__(self, model: TraceModel) -> None:
        self.model = model
        ev = model.events
        host = ev.is_kind(*_HOST_KINDS)
        self.by_lane: dict[int, npt.NDArray[np.int64]] = {}
        for lane in distinct(ev.lane[host]).tolist():
            self.by_lane[int(lane)] = np.flatnonzero(host & (ev.lane == lane))

    def place(self, event: int, lane: int, t: float) -> str:
        model = self.model
        ev = model.events
        if event < 0:  # work between calls: the innermost host event around that moment
            idx = self.by_lane.get(lane)
            k = int(np.searchsorted(ev.ts[idx], t, side="right")) - 1 if idx is not None else -1
            at = int(idx[k]) if idx is not None and k >= 0 else -1
            while at >= 0 and ev.end[at] < t:
                at = int(ev.parent[at])
            if at < 0:
                return model.lanes[lane].label if 0 <= lane < len(model.lanes) else "host"
            event = at
        if ev.kind[event] == EventKind.PYTHON and (own := parse_frame(model.name_of(event))) is not None:
            return str(own)
        site = call_site(model, event)
        if site is not None:
            return str(site)
        op = int(ev.op[event])  # a runtime call: name the op that made it
        return model.name_of(op if op >= 0 else event)


def _overlap(a: Analysis, found: list[Found]) -> Overlap:
    """Collective kernels against every other activity of the main device, inside the window."""
    model = a.model
    if a.main_device is None:
        return Overlap(0.0, 0.0, 0.0)
    ev = model.events
    on_main = ev.activity_mask() & model.device_lanes(a.main_device)[ev.lane]
    comm = np.zeros(len(ev), dtype=np.bool_)
    comm[[f.event for f in found]] = True
    lo, hi = a.window.start_us, a.window.end_us
    cs, ce = intervals.clip(*intervals.union(ev.ts[on_main & comm], ev.end[on_main & comm]), lo, hi)
    ws, we = intervals.clip(*intervals.union(ev.ts[on_main & ~comm], ev.end[on_main & ~comm]), lo, hi)
    both = float(np.sum(intervals.covered_in(ws, we, cs, ce))) if len(cs) else 0.0
    return Overlap(intervals.total(cs, ce), intervals.total(ws, we), both)
