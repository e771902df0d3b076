"""The ``job`` key of the analysis JSON (additive to ``stallscope.analysis/3``; see docs/output.md)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from stallscope.analyzer.job.result import InstanceResult, JobAnalysis

WORST = 10  # instances listed in full


def job_json(j: JobAnalysis) -> dict[str, Any]:
    by_rank = {t.rank: t for t in j.tables}
    return {
        "ranks": [
            {
                "rank": s.rank,
                "path": by_rank[s.rank].path,
                "wall_us": s.wall_us,
                "device_idle_us": s.device_idle_us,
                "collectives": len(by_rank[s.rank].collectives),
                "collective_wait_us": s.wait_us,
                "times_last": s.times_last,
                "late_us": s.late_us,
                "comm_us": s.overlap.comm_us,
                "compute_us": s.overlap.compute_us,
                "overlap_us": s.overlap.overlapped_us,
                "exposed_comm_us": s.overlap.exposed_comm_us,
                "notes": list(by_rank[s.rank].notes),
            }
            for s in sorted(j.rank_stats, key=lambda s: s.rank)
        ],
        "failed": [{"path": f.path, "error": f.error} for f in j.failures],
        "wall_us": j.wall_us,
        "steps": [asdict(s) for s in j.steps],
        "heatmap": [asdict(c) for c in j.cells],
        "collectives": {
            "matched": len(j.instances),
            "unmatched": j.unmatched,
            "size_mismatches": j.size_mismatches,
            "wait_us": j.collective_wait_us,
            "by_name": _by_name(j),
            "worst": [_instance(i, full=True) for i in j.worst(WORST)],
            "instances": [_instance(i, full=False) for i in j.instances],
        },
        "stragglers": [
            {
                "rank": s.rank,
                "times_last": s.times_last,
                "late_us": s.late_us,
                "late_by_cause_us": s.late_by_cause_us,
            }
            for s in j.rank_stats
            if s.times_last
        ],
        "findings": [asdict(f) | {"severity": f.severity.value} for f in j.findings],
        "whatif": [asdict(w) for w in j.whatif],
        "clock_offsets_us": {str(r): v for r, v in sorted(j.offsets_us.items())},
        "clock_residual_us": {"p50": j.residual_p50_us, "max": j.residual_max_us},
        "notes": list(j.notes),
    }


def _by_name(j: JobAnalysis) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[InstanceResult]] = {}
    for i in j.instances:
        groups.setdefault((i.group, i.name), []).append(i)
    return [
        {
            "name": name,
            "group": group,
            "count": len(items),
            "wait_us": sum(i.wait_us for i in items),
            "skew_max_us": max(i.skew_us for i in items),
            "skew_median_us": sorted(i.skew_us for i in items)[len(items) // 2],
        }
        for (group, name), items in sorted(groups.items())
    ]


def _instance(i: InstanceResult, *, full: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "index": i.index,
        "name": i.name,
        "group": i.group,
        "number": i.number,
        "by_seq": i.by_seq,
        "nelems": i.nelems,
        "straggler": i.straggler,
        "late_us": i.late_us,
        "skew_us": i.skew_us,
        "wait_us": i.wait_us,
        "cause": i.cause.value if i.cause else None,
        "cause_us": i.cause_us,
        "site": i.site,
        "step": i.step,
        "began_late_us": i.began_late_us,
        "first_arrival_us": i.first_arrival_us,
        "end_us": i.end_us,
    }
    if full:
        doc["arrivals"] = [asdict(a) for a in i.arrivals]
    return doc
