"""The job step: rank tables -> ``JobAnalysis`` (matching, clocks, stragglers, ranking, findings, what-if).

It sees only the ranks' tables, so its memory grows with ranks x collectives, never with events.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from stallscope.analyzer.core.numbers import duration_text
from stallscope.analyzer.findings import advice
from stallscope.analyzer.findings.base import Severity
from stallscope.analyzer.job.align import Instance, align_clocks, match
from stallscope.analyzer.job.result import (
    InstanceResult,
    JobAnalysis,
    JobFinding,
    JobStep,
    JobWhatIf,
    RankStats,
    StepCell,
)
from stallscope.analyzer.job.stragglers import MIN_LATE_US, instance_results
from stallscope.analyzer.job.tables import RankFailure, RankTable


def analyze_job(
    tables: list[RankTable], failures: list[RankFailure] | None = None, notes: tuple[str, ...] = ()
) -> JobAnalysis:
    """Match collectives, align clocks, find stragglers and their causes, rank them, predict the job
    without stragglers. ``tables`` must hold distinct ranks (see ``dedupe``)."""
    tables = sorted(tables, key=lambda t: t.rank)
    matching = match(tables)
    clocks = align_clocks(tables, matching.instances)
    off = clocks.offsets_us
    instances = instance_results(tables, matching.instances, clocks)
    starts = [t.window_start_us - off[t.rank] for t in tables]
    ends = [t.window_end_us - off[t.rank] for t in tables]
    wall = (max(ends) - min(starts)) if tables else 0.0
    saving = min(sum(max(i.late_us, 0.0) for i in instances if i.late_us >= MIN_LATE_US), wall)
    extra = list(notes)
    if matching.unmatched:
        extra.append(f"{matching.unmatched} collectives were seen on one rank only (not matched)")
    if matching.size_mismatches:
        extra.append(f"{matching.size_mismatches} collective instances disagree on the message size")
    if tables and not instances:
        extra.append("no collective was matched across ranks: clocks not aligned, no straggler analysis")
    return JobAnalysis(
        ranks=tuple(t.rank for t in tables),
        tables=tuple(tables),
        failures=tuple(failures or ()),
        offsets_us=off,
        residual_p50_us=clocks.residual_p50_us,
        residual_max_us=clocks.residual_max_us,
        wall_us=wall,
        steps=_steps(tables, off),
        instances=instances,
        unmatched=matching.unmatched,
        size_mismatches=matching.size_mismatches,
        collective_wait_us=sum(i.wait_us for i in instances),
        rank_stats=_rank_stats(tables, instances),
        cells=_cells(tables, matching.instances, instances),
        findings=_findings(instances, wall, len(tables)),
        whatif=(JobWhatIf("no_stragglers", wall - saving, saving),),
        notes=tuple(extra),
    )


def dedupe(tables: list[RankTable]) -> tuple[list[RankTable], list[str]]:
    """One table per rank: when two files claim a rank, the newest by name wins (as the loader does).
    Ranks come only from ``distributedInfo``: files without it are separate runs, not ranks (as the
    loader rules): with ranked files they are left out, without any only the first is kept; a note names
    those left out."""
    by_rank: dict[int, RankTable] = {}
    notes: list[str] = []
    for t in sorted((t for t in tables if t.rank >= 0), key=lambda t: _file_order(t.path)):
        if t.rank in by_rank:
            old = Path(by_rank[t.rank].path).name
            notes.append(f"rank {t.rank}: using {Path(t.path).name}, ignoring {old}")
        by_rank[t.rank] = t
    unranked = sorted((t for t in tables if t.rank < 0), key=lambda t: t.path)
    if not by_rank and unranked:
        first, *unranked = unranked
        by_rank[0] = replace(first, rank=0)
        used = f"analysed {Path(first.path).name}"
    else:
        used = f"analysed the {len(by_rank)} ranked file{'s' if len(by_rank) > 1 else ''}"
    if unranked:
        names = ", ".join(Path(t.path).name for t in unranked[:5]) + (", ..." if len(unranked) > 5 else "")
        many = len(unranked) > 1
        notes.append(
            f"{len(unranked)} more trace file{'s' if many else ''} without distributedInfo "
            f"{'are separate runs' if many else 'is a separate run'}, not ranks, and "
            f"{'were' if many else 'was'} not analysed ({used}): {names}"
        )
    return [by_rank[r] for r in sorted(by_rank)], notes


def _file_order(path: str) -> tuple[int, str]:
    """The profiler's timestamp in a rank file's name (``worker0.1694128201545.pt.trace.json``), then
    the name: the loader's order, so both pick the same file of a rank."""
    stamp = re.findall(r"\.(\d{10,})\.", Path(path).name)
    return (int(stamp[-1]) if stamp else 0, Path(path).name)


def _steps(tables: list[RankTable], off: dict[int, float]) -> tuple[JobStep, ...]:
    span: dict[str, list[float]] = {}
    count: dict[str, int] = defaultdict(int)
    for t in tables:
        for s in t.steps:
            lo, hi = s.start_us - off[t.rank], s.start_us + s.dur_us - off[t.rank]
            cur = span.setdefault(s.name, [lo, hi])
            cur[0], cur[1] = min(cur[0], lo), max(cur[1], hi)
            count[s.name] += 1
    return tuple(
        JobStep(n, hi - lo, count[n]) for n, (lo, hi) in sorted(span.items(), key=lambda kv: kv[1][0])
    )


def _cells(
    tables: list[RankTable], matched: tuple[Instance, ...], instances: tuple[InstanceResult, ...]
) -> tuple[StepCell, ...]:
    """Per rank and step: wall, device idle and the time the rank waited inside collectives."""
    by_rank = {t.rank: t for t in tables}
    wait: dict[tuple[int, int], float] = defaultdict(float)
    for inst, res in zip(matched, instances, strict=True):
        for a in res.arrivals:
            step = by_rank[a.rank].collectives[inst.members[a.rank]].step
            if step >= 0:
                wait[(a.rank, step)] += a.wait_us
    return tuple(
        StepCell(t.rank, s.name, s.dur_us, s.device_idle_us, wait[(t.rank, k)])
        for t in tables
        for k, s in enumerate(t.steps)
    )


def _rank_stats(tables: list[RankTable], instances: tuple[InstanceResult, ...]) -> tuple[RankStats, ...]:
    last: dict[int, int] = defaultdict(int)
    late: dict[int, float] = defaultdict(float)
    waited: dict[int, float] = defaultdict(float)
    causes: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for inst in instances:
        for a in inst.arrivals:
            waited[a.rank] += a.wait_us
        if inst.late_us >= MIN_LATE_US:
            last[inst.straggler] += 1
            late[inst.straggler] += inst.late_us
            causes[inst.straggler][inst.cause.value if inst.cause else "unknown"] += inst.late_us
    stats = [
        RankStats(
            t.rank, last[t.rank], late[t.rank], waited[t.rank], dict(causes[t.rank]), t.overlap,
            t.summary.wall_us, t.summary.device_idle_us,
        )
        for t in tables
    ]  # fmt: skip
    return tuple(sorted(stats, key=lambda s: (-s.late_us, s.rank)))


def _findings(instances: tuple[InstanceResult, ...], wall: float, nranks: int) -> tuple[JobFinding, ...]:
    """One ``straggler`` finding per late rank and cause, most expensive first."""
    groups: dict[tuple[int, str], list[InstanceResult]] = defaultdict(list)
    for inst in instances:
        if inst.late_us >= MIN_LATE_US:
            groups[(inst.straggler, inst.cause.value if inst.cause else "unknown")].append(inst)
    out: list[JobFinding] = []
    for (rank, cause), group in groups.items():
        late = sum(i.late_us for i in group)
        waited = sum(i.wait_us / max(len(i.arrivals) - 1, 1) for i in group)
        cause_us = sum(i.cause_us for i in group)
        sites: dict[str, float] = defaultdict(float)
        for i in group:
            if i.site:
                sites[i.site] += i.cause_us
        site = max(sites, key=lambda s: sites[s]) if sites else None
        worst = max(group, key=lambda i: i.late_us)
        share = late / wall if wall > 0 else 0.0
        severity = Severity.HIGH if share >= 0.1 else Severity.MEDIUM if share >= 0.02 else Severity.LOW
        where = f" at {site}" if site else ""
        what = f", {_ms(cause_us)} of it in {cause}{where}" if cause != "unknown" else ""
        began = sum(max(i.began_late_us, 0.0) for i in group)
        if cause == "unknown" and began >= 0.25 * late:
            what = f", having begun {_ms(began)} after the others (carried in from before)"
        title = (
            f"rank {rank} reached {len(group)} collective{'s' if len(group) > 1 else ''} late "
            f"({_ms(late)} in total; worst {worst.label} {_ms(worst.late_us)}){what}; "
            f"the other {nranks - 1} ranks waited {_ms(waited)} each on average"
        )
        out.append(
            JobFinding(
                "straggler",
                severity,
                rank,
                cause,
                title,
                site,
                len(group),
                late,
                late,
                advice.STRAGGLER[cause],
            )
        )
    return tuple(sorted(out, key=lambda f: (-f.time_us, f.rank)))


def _ms(us: float) -> str:
    return duration_text(us)
