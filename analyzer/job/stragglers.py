"""Per collective instance: each rank's arrival and wait, the last arriver and why it was late.

Arrival is the rank's collective kernel start on the aligned clock: the moment the rank's inputs and its
stream were ready. Every rank then waits inside the collective until the last one arrives, so a rank's
wait is the last arrival minus its own. Why the last rank was late: over the interval since the previous
collective, its own critical path spent time per kind (host, input, sync, device, launch, idle); the kind
with the most time in excess of the other ranks' median is the cause, and its largest place the site.
"""

from __future__ import annotations

import statistics

from analyzer.critical import Kind
from analyzer.job.align import Clocks, Instance
from analyzer.job.result import Arrival, InstanceResult
from analyzer.job.tables import KINDS, Collective, RankTable

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
        arrivals=arrivals,
    )


def _why(colls: dict[int, Collective], last: int, late: float) -> tuple[Kind | None, float, str | None]:
    """The kind of critical-path work the last rank did in excess of the others before arriving."""
    if late < MIN_LATE_US or len(colls) < 2:
        return None, 0.0, None
    mine = colls[last].before_us
    excess = []
    for k in range(len(KINDS)):
        typical = statistics.median(c.before_us[k] for r, c in colls.items() if r != last)
        excess.append(mine[k] - typical)
    best = max(range(len(KINDS)), key=lambda k: excess[k])
    if excess[best] < MIN_EXPLAINED * late:
        return None, 0.0, None  # nothing on its own critical path explains it (e.g. it started late)
    kind = KINDS[best]
    sites = [s for s in colls[last].sites if s.kind == kind]
    return kind, min(excess[best], late), (sites[0].site if sites else None)
