"""One rank -> its ``RankTable``: the per-rank pipeline's results, reduced to what the job step needs.

``reduce_file`` is what a worker runs: load (cached per file), analyse with the existing per-rank pipeline,
find the collectives, and keep per collective what the rank's critical path did since the previous one.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from analyzer import cache, intervals
from analyzer.analysis import Analysis, analyze_model
from analyzer.critical import CriticalPath, Kind
from analyzer.errors import StallscopeError
from analyzer.job.collectives import ArgIndex, Found, find_collectives, scan_args
from analyzer.job.tables import KINDS, Collective, Overlap, RankFailure, RankTable, SiteTime, StepRow
from analyzer.loader import load_file
from analyzer.model import TraceModel
from analyzer.sites import call_site

SITES_PER_KIND = 2


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
    out: list[Collective] = []
    for f in found:
        start, end = float(ev.ts[f.event]), float(ev.end[f.event])
        lo = min(prev_end, start)
        before, sites = _before(model, a.critical, lo, start)
        launch = float(ev.ts[f.launch_event]) if f.launch_event >= 0 else start
        step = int(np.searchsorted(starts, start, side="right")) - 1
        if step >= 0 and start > a.steps[step].start_us + a.steps[step].dur_us:
            step = -1
        out.append(
            Collective(
                f.name, f.group, f.seq, f.nelems, f.dtype, model.name_of(f.event),
                launch, start, end, step, lo, before, sites,
            )
        )  # fmt: skip
        prev_end = max(prev_end, end)
    return tuple(out)


def _before(
    model: TraceModel, cp: CriticalPath | None, lo: float, hi: float
) -> tuple[tuple[float, ...], tuple[SiteTime, ...]]:
    """Critical-path time per kind inside [lo, hi], and the largest places of it per kind."""
    if cp is None or hi <= lo:
        return tuple(0.0 for _ in KINDS), ()
    s = np.maximum(cp.start_us, lo)
    e = np.minimum(cp.end_us, hi)
    inside = np.flatnonzero(e > s)
    per_kind = np.bincount(cp.kind[inside], weights=(e - s)[inside], minlength=len(KINDS))
    by_site: dict[tuple[Kind, str], float] = defaultdict(float)
    for i in inside.tolist():
        kind = KINDS[int(cp.kind[i])]
        if kind in (Kind.IDLE, Kind.DEVICE):
            continue  # a device kernel or a wait has no host call site worth naming
        by_site[(kind, _place(model, int(cp.event[i]), int(cp.lane[i])))] += float(e[i] - s[i])
    sites: list[SiteTime] = []
    for kind in KINDS:
        mine = sorted(((us, site) for (k, site), us in by_site.items() if k == kind), reverse=True)
        sites.extend(SiteTime(kind, site, us) for us, site in mine[:SITES_PER_KIND])
    return tuple(float(x) for x in per_kind), tuple(sites)


def _place(model: TraceModel, event: int, lane: int) -> str:
    if event >= 0:
        site = call_site(model, event)
        if site is not None:
            return str(site)
        op = int(model.events.op[event])  # a runtime call: name the op that made it
        return model.name_of(op if op >= 0 else event)
    return model.lanes[lane].label if 0 <= lane < len(model.lanes) else "host"


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
