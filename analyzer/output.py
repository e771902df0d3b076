"""The JSON output contract (DESIGN.md §5, ``stallscope.analysis/1``). Every top-level key is always present."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from analyzer.analysis import SCHEMA, Analysis, Summary


def _summary(s: Summary) -> dict[str, Any]:
    return asdict(s)


def to_json(a: Analysis) -> dict[str, Any]:
    m = a.model
    report = m.report
    return {
        "schema": SCHEMA,
        "source": {
            "path": m.path,
            "format": m.format,
            "events": m.event_count,
            "devices": [{"id": d.id, "name": d.name} for d in m.devices],
            "ranks": list(a.ranks) or ([m.rank] if m.rank is not None else []),
            "rank": m.rank,
            "lanes": [
                {
                    "id": lane.id,
                    "kind": lane.kind.name.lower(),
                    "label": lane.label,
                    "device": lane.device,
                    "stream": lane.stream,
                }
                for lane in m.lanes
            ],
            "skipped": dict(report.skipped),
            "unknown_categories": dict(report.unknown_categories),
            "unknown_phases": dict(report.unknown_phases),
            "unknown_keys": list(report.unknown_keys),
            "unpaired_flows": report.unpaired_flows,
            "unlinked_device_events": report.unlinked_device_events,
            "notes": list(a.notes) + list(report.notes),
        },
        "window": {
            "start_us": a.window.start_us,
            "end_us": a.window.end_us,
            "dur_us": a.window.dur_us,
            "basis": a.window.basis.value,
        },
        "summary": _summary(a.summary),
        "devices": [
            {
                "id": d.id,
                "name": d.name,
                "busy_us": d.busy_us,
                "idle_us": d.idle_us,
                "utilization": d.utilization,
            }
            for d in a.devices
        ],
        "critical_path": None,
        "gaps": [],
        "syncs": [],
        "findings": [],
        "steps": [asdict(s) for s in a.steps],
        "whatif": [],
        "pipeline": None,
        "per_rank": [{"rank": r, "summary": _summary(s)} for r, s in sorted(a.per_rank.items())],
    }
