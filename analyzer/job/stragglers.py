"""Per collective instance: each rank's arrival and wait, the last arriver and why it was late.

Arrival is the rank's collective kernel start on the aligned clock: the moment the rank's inputs and its
stream were ready. Every rank then waits inside the collective until the last one arrives, so a rank's
wait is the last arrival minus its own. Why the last rank was late: over the interval since the previous
collective, its own critical path spent time per kind (host, input, sync, device, launch, idle); the kind
with the most time in excess of the other ranks' median is the cause and its largest place the site. Host
or device work in excess while the rank blocked in syncs the others did not make is charged to the sync
(the sync threw away the host's lead, so work the others overlapped became serial). When no kind explains
a quarter of the lateness, the same is asked of its main device (busy, or idle by the cause of its gaps).
"""

from __future__ import annotations

import statistics

from stallscope.analyzer.job.align import Clocks, Instance
from stallscope.analyzer.job.result import Arrival, InstanceResult
from stallscope.analyzer.job.tables import KINDS, Collective, RankTable
from stallscope.analyzer.passes.critical import Kind

#: lateness under which the last arriver is not called a straggler (the gap threshold's order)
MIN_LATE_US = 20.0
#: a kind is the cause only when its excess explains at least this share of the lateness
MIN_EXPLAINED = 0.25


def instance_results(
    tables: list[RankTable], instances: tuple[Instance, ...], clocks: Clocks
) -> tuple[InstanceResult, ...]:
    by_rank = {t.rank: t for t in tables}
    return tuple(_one(k, inst, by_rank, clocks.offsets_us) for k, inst in enumerate(instances))


def _one(index: int, inst: Instance, by_rank: dict[int, RankTable], off: dict[int, float]) -> InstanceResult:
    colls = {r: by_rank[r].collectives[i] for r, i in inst.members.items()}
    arrive = {r: c.start_us - off[r] for r, c in colls.items()}
    last = max(arrive, key=lambda r: (arrive[r], -r))
    others = [a for r, a in arrive.items() if r != last]
    late = arrive[last] - statistics.median(others)
    arrivals = tuple(
        Arrival(r, arrive[r], arrive[last] - arrive[r], colls[r].end_us - colls[r].start_us)
        for r in sorted(arrive)
    )
    cause, cause_us, site = _why(colls, last, late)
    began = {r: c.interval_start_us - off[r] for r, c in colls.items()}
    began_late = began[last] - statistics.median(b for r, b in began.items() if r != last)
    mine = colls[last]
    steps = by_rank[last].steps
    sizes = [c.nelems for c in colls.values() if c.nelems >= 0]
    return InstanceResult(
        index=index,
        name=inst.name,
        group=inst.group,
        number=inst.number,
        by_seq=inst.by_seq,
        nelems=statistics.median_high(sizes) if sizes else -1,
        first_arrival_us=min(arrive.values()),
        median_arrival_us=statistics.median(arrive.values()),
        end_us=statistics.median(c.end_us - off[r] for r, c in colls.items()),
        straggler=last,
        late_us=late,
        skew_us=arrive[last] - min(arrive.values()),
        wait_us=sum(a.wait_us for a in arrivals),
        cause=cause,
        cause_us=cause_us,
        site=site,
        step=steps[mine.step].name if 0 <= mine.step < len(steps) else None,
        began_late_us=began_late,
        arrivals=arrivals,
    )


def _why(colls: dict[int, Collective], last: int, late: float) -> tuple[Kind | None, float, str | None]:
    """The kind of work the last rank did in excess of the others before arriving (see the module doc)."""
    if late < MIN_LATE_US or len(colls) < 2:
        return None, 0.0, None
    others = [c for r, c in colls.items() if r != last]
    mine = colls[last]
    for split in (_critical, _device):
        excess = [split(mine)[k] - statistics.median(split(c)[k] for c in others) for k in range(len(KINDS))]
        best = max(range(len(KINDS)), key=lambda k: excess[k])
        if excess[best] < MIN_EXPLAINED * late:
            continue
        kind = KINDS[best]
        extra_sync = mine.sync_wait_us - statistics.median(c.sync_wait_us for c in others)
        if kind in (Kind.HOST, Kind.DEVICE) and extra_sync >= MIN_EXPLAINED * late:
            # the work was not more than the others': a sync made the rank do it without the device ahead
            return Kind.SYNC, min(excess[best], late), mine.sync_site
        sites = [s for s in mine.sites if s.kind == kind]
        return kind, min(excess[best], late), (sites[0].site if sites else None)
    return None, 0.0, None  # nothing on its own timeline explains it (e.g. it started late)


def _device(c: Collective) -> tuple[float, ...]:
    return c.before_us


def _critical(c: Collective) -> tuple[float, ...]:
    return c.critical_us
