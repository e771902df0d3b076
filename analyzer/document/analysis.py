"""The JSON output contract (DESIGN.md §5, ``stallscope.analysis/3``). Every top-level key is always present."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import msgspec
import numpy as np

from stallscope.analyzer.analysis import SCHEMA, Analysis
from stallscope.analyzer.core.arrays import distinct
from stallscope.analyzer.core.sites import CallSite
from stallscope.analyzer.document.encoding import OneLine, encode_compact
from stallscope.analyzer.load.counters import counters_json
from stallscope.analyzer.passes.critical import Kind
from stallscope.analyzer.passes.gaps import Gap
from stallscope.analyzer.passes.syncs import Sync
from stallscope.analyzer.passes.window import StepStats, Summary

DEVICE_KEYS = ("device_busy_us", "device_idle_us", "device_utilization")


def _summary(s: Summary, device: bool = True) -> dict[str, Any]:
    """``s`` as JSON; without any device activity (a CPU-only run) its device figures are null: there is
    no device to be busy or idle (not 0% busy and idle for the whole wall)."""
    out = asdict(s)
    return out if device else out | dict.fromkeys(DEVICE_KEYS)


def _step(s: StepStats, device: bool) -> dict[str, Any]:
    out = asdict(s)
    return out if device else out | dict.fromkeys(DEVICE_KEYS[:2])


def to_json(a: Analysis) -> dict[str, Any]:
    """The ``--json`` document as Python values (``stallscope.to_json``)."""
    return _document(a, False)


def encoded_document(a: Analysis, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """``to_json``'s document with ``extra`` keys, for ``encode_json`` only: the critical path's columns
    are JSON text already (``OneLine``), so the document no longer needs the analysis (a caller can drop
    it before encoding: large traces' peak memory) and ``encode_json`` writes each column on one line."""
    return _document(a, True) | (extra or {})


def _document(a: Analysis, encoded: bool) -> dict[str, Any]:
    m = a.model
    sync_of = {c: s.id for s in a.syncs for c in s.calls}
    report = m.report
    counters, counter_notes = counters_json(m.counters, a.window.start_us, a.window.end_us)
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
            "counter_samples": report.counter_samples,
            "notes": list(a.notes) + list(report.notes) + counter_notes + recording_notes(a),
            "capture": capture_of(a),
        },
        "window": {
            "start_us": a.window.start_us,
            "end_us": a.window.end_us,
            "dur_us": a.window.dur_us,
            "basis": a.window.basis.value,
        },
        "summary": _summary(a.summary, bool(a.devices)),
        "devices": [
            {
                "id": d.id,
                "name": d.name,
                "busy_us": d.busy_us,
                "idle_us": d.idle_us,
                "utilization": d.utilization,
                "busy_split_us": {
                    "compute": d.compute_us,
                    "communication": d.communication_us,
                    "copies": d.copy_us,
                },
            }
            for d in a.devices
        ],
        "critical_path": _critical(a, encoded),
        "gaps": _gaps(a, sync_of, encoded),
        "syncs": [_sync(a, s) for s in a.syncs],
        "findings": [
            {
                "rule": f.rule,
                "severity": f.severity.value,
                "title": f.title,
                "call_site": _site(f.call_site),
                "count": f.count,
                "time_us": f.time_us,
                "est_saving_us": f.est_saving_us,
                "advice": f.advice,
            }
            for f in a.findings
        ],
        "steps": [_step(s, bool(a.devices)) for s in a.steps],
        "whatif": [
            {"scenario": w.scenario.value, "predicted_wall_us": w.predicted_wall_us, "saving_us": w.saving_us}
            for w in (a.whatif.results if a.whatif else ())
        ],
        "pipeline": asdict(a.pipeline) if a.pipeline else None,
        "idle_by_cause_us": {c.value: v for c, v in a.idle_by_cause.items()},
        "per_rank": [{"rank": r, "summary": _summary(s)} for r, s in sorted(a.per_rank.items())],
        "verdict": _verdict(a),
        "tops": _tops(a),
        "warnings": list(a.warnings),
        "run_steps": _run_steps(a),
        "counters": counters,
    }


def _tops(a: Analysis) -> dict[str, Any]:
    t = a.top()
    return {"ops": [asdict(r) for r in t.ops], "kernels": [asdict(r) for r in t.kernels]}


def _verdict(a: Analysis) -> dict[str, Any] | None:
    v = a.verdict
    if v is None:
        return None
    return {
        "bottleneck": v.bottleneck,
        "basis": v.basis,
        "evidence": v.evidence(),
        "sensitivity_us": dict(v.sensitivity_us),
        "path_share": dict(v.path_share),
        "window_us": a.window.dur_us,
        "overrun_us": a.whatif.overrun_us if a.whatif else 0.0,
    }


def _run_steps(a: Analysis) -> dict[str, Any] | None:
    t = a.run_timing
    if t is None:
        return None
    return {
        "steps": t.steps,
        "host_ms": asdict(t.host),
        "device_ms": asdict(t.device) if t.device else None,
        "profiled_median_ms": t.profiled_median_ms,
        "profiled_ratio": t.profiled_ratio,
        "typical": t.typical,
    }


def _critical(a: Analysis, one_line: bool = False) -> dict[str, Any] | None:
    """The critical path; its segments as columns (``_segment_columns``)."""
    cp = a.critical
    if cp is None:
        return None
    return {
        "length_us": cp.length_us,
        "breakdown_us": {k.value: v for k, v in cp.breakdown_us.items()},
        "bottleneck": cp.bottleneck.value,
        "segments": _segment_columns(a, one_line),
    }


_KINDS = np.array([k.value for k in Kind], dtype=object)  # a kind code -> its name


def _segment_columns(a: Analysis, one_line: bool) -> dict[str, Any]:
    """The segments as columns, in time order: ``kind``, ``lane`` (its id in ``source.lanes``), ``name``
    (an index into ``names``, the distinct names of the segments' events; ``""`` for a segment without
    one), ``start_us``, ``end_us``. With ``one_line`` each column is its JSON text already (``OneLine``),
    made as the column is: no list of a million numbers kept beside the next one."""
    cp = a.critical
    assert cp is not None
    has_event = cp.event >= 0
    codes = np.where(has_event, a.model.events.name[np.where(has_event, cp.event, 0)], -1).astype(np.int64)
    used = distinct(codes)
    strings = a.model.strings
    columns: dict[str, Callable[[], list[Any]]] = {
        "kind": lambda: _KINDS[cp.kind].tolist(),
        "lane": cp.lane.tolist,
        "name": lambda: np.searchsorted(used, codes).tolist(),
        "start_us": cp.start_us.tolist,
        "end_us": cp.end_us.tolist,
        "names": lambda: [strings[c] if c >= 0 else "" for c in used.tolist()],
    }
    out: dict[str, Any] = {"count": len(cp.kind)}
    for key, make in columns.items():
        out[key] = OneLine(encode_compact(make())) if one_line else make()
    return out


def _site(site: CallSite | None) -> dict[str, Any] | None:
    if site is None:
        return None
    return {"file": site.file, "line": site.line, "function": site.function, "library": site.library}


def _sync(a: Analysis, s: Sync) -> dict[str, Any]:
    return {
        "id": s.id,
        "kind": s.kind.value,
        "api": s.api,
        "op": s.op,
        "thread": a.model.lanes[s.thread].label,
        "start_us": s.start_us,
        "wait_us": s.wait_us,
        "bubble_us": s.bubble_us,
        "avoidable": s.avoidable,
        "reason": [r.value for r in s.reasons],
        "call_site": _site(s.call_site),
        "step": a.steps[s.step].name if 0 <= s.step < len(a.steps) else None,
    }


class _GapEntry(msgspec.Struct, gc=False):
    """A gap's entry, its fields in the document's order (made and encoded in half a dict's time)."""

    device: int
    start_us: float
    end_us: float
    dur_us: float
    cause: str
    detail: str
    call_site: dict[str, Any] | None
    sync_id: int | None
    charged_us: float


def _gaps(a: Analysis, sync_of: dict[int, int], one_line: bool) -> list[dict[str, Any]] | OneLine:
    """Every gap's entry; with ``one_line``, the list as JSON text with one gap per line (a trace can have
    tens of thousands: indented, each took eleven lines and the indenting a third of the writing). The
    lines are cut where one gap's object ends and the next begins, the only place where ``},{"device":``
    can stand: inside a string its quotes would be escaped."""
    entries = [_gap(a, g, sync_of) for g in a.gaps]
    if not one_line:
        return [msgspec.structs.asdict(e) for e in entries]
    if not entries:
        return OneLine(b"[]")
    text = encode_compact(entries)
    return OneLine(b"[\n  " + text[1:-1].replace(b'},{"device":', b'},\n  {"device":') + b"\n ]")


def _gap(a: Analysis, g: Gap, sync_of: dict[int, int]) -> _GapEntry:
    """One gap's entry; ``Gap.dur_us`` is inlined and the cause's value read from the member itself
    (``Enum.value`` is a Python-level descriptor call)."""
    return _GapEntry(
        g.device,
        g.start_us,
        g.end_us,
        g.end_us - g.start_us,
        g.cause._value_,
        g.detail,
        _site(g.call_site),
        sync_of.get(g.blocking_call) if g.blocking_call >= 0 else None,
        g.charged_us,
    )


CAPTURE_TRIGGERS = ("request", "every")


def capture_of(a: Analysis) -> dict[str, Any] | None:
    """The sidecar's ``run.capture`` when the bundle is one capture of a long run (``stallscope capture``,
    ``profile --every``): ``run_id``, ``index`` (1 for the run's first capture), ``at`` (UTC,
    ``YYYY-mm-ddTHH:MM:SSZ``), ``trigger`` and ``steps`` (``run.profiled_steps``); None otherwise, and
    for a block whose fields do not have those types (the sidecar is input like any other)."""
    run = a.sidecar.run if a.sidecar is not None else {}
    capture = run.get("capture")
    if not isinstance(capture, dict):
        return None
    run_id, index, at, trigger = (capture.get(k) for k in ("run_id", "index", "at", "trigger"))
    if not (isinstance(run_id, str) and 0 < len(run_id) <= 200 and isinstance(at, str) and len(at) <= 40):
        return None
    if not isinstance(index, int) or isinstance(index, bool) or index < 1 or trigger not in CAPTURE_TRIGGERS:
        return None
    steps = run.get("profiled_steps")
    ok = (
        isinstance(steps, list)
        and len(steps) == 2
        and all(isinstance(n, int) and not isinstance(n, bool) for n in steps)
    )
    return {"run_id": run_id, "index": index, "at": at, "trigger": trigger, "steps": steps if ok else None}


def recording_notes(a: Analysis) -> list[str]:
    """What the collector's sidecar says about the recording itself: a last step cut by the event
    budget (``run.partial_step``)."""
    run = a.sidecar.run if a.sidecar is not None else {}
    partial = run.get("partial_step")
    if not isinstance(partial, int) or isinstance(partial, bool) or partial <= 0:
        return []
    return [
        f"step {partial} is partial: the event budget (--max-events) ended the recording inside it, "
        "so its figures cover only its start"
    ]
