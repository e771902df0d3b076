"""What a trace's headline numbers mean when nothing ran on a device, shared by the HTML report, the
dashboard store's catalog, its pages and ``stallscope upload --wait``.

A CPU-only profile (the analysis JSON's ``devices`` list is empty: no kernel, copy or memset ran) has
no device to be busy or idle, so its "GPU utilization 0%" and "host-bound" are artefacts, not findings.
Every view asks ``cpu_only`` and says "CPU only" instead; the catalog keeps a null utilization for it
(a number that does not exist), so sorting by utilization still works and puts those traces apart.

Kept free of plotly/dash imports: the store calls it from the analysis worker processes.
"""

from __future__ import annotations

from typing import Any

Doc = dict[str, Any]

#: Each what-if scenario in words, in every view (the report's table and sentence, the what-if page).
SCENARIO_LABELS: dict[str, str] = {
    "no_avoidable_syncs": "remove the avoidable syncs",
    "no_syncs": "remove every sync (the work stays)",
    "device_2x": "device twice as fast",
    "host_2x": "host twice as fast",
    "input_overlapped": "overlap data loading with compute",
    "compute_2x": "compute twice as fast (collectives as recorded)",
    "communication_2x": "collectives twice as fast",
    "communication_overlapped": "overlap the collectives fully with compute",
}

#: The label shown instead of a utilization and a bottleneck for a CPU-only trace.
CPU_ONLY = "CPU only"


def cpu_only(doc: Doc) -> bool:
    """True when the analysis JSON ``doc`` saw no device activity (its ``devices`` list is empty)."""
    return not doc.get("devices")


def best_saving(doc: Doc) -> tuple[float, int | None]:
    """The best estimated saving of a trace, µs, and the 1-based finding it comes from (None: from
    ``summary.est_saving_us``, the what-if of no avoidable syncs / overlapped input). A finding's own
    estimate (tensor cores, launch-bound...) can be the larger one; every view quotes this number."""
    saving = float((doc.get("summary") or {}).get("est_saving_us") or 0.0)
    source: int | None = None
    for i, f in enumerate(doc.get("findings") or [], 1):
        if float(f.get("est_saving_us") or 0.0) > saving:
            saving, source = float(f["est_saving_us"]), i
    return saving, source


def straggler(job: Doc) -> int | None:
    """The rank that made a job wait most (the most lateness in all), or None when none was late."""
    late = [s for s in job.get("stragglers") or [] if s["late_us"] > 0]
    return int(max(late, key=lambda s: (s["late_us"], -s["rank"]))["rank"]) if late else None


def job_summary(doc: Doc) -> Doc | None:
    """A job's headline numbers (the analysis JSON's ``job`` key), None for a single rank: ranks, job
    wall, the straggler and its lateness, time waited in collectives, the no-stragglers saving."""
    job = doc.get("job")
    if not job:
        return None
    rank = straggler(job)
    late = next((s["late_us"] for s in job.get("stragglers") or [] if s["rank"] == rank), 0.0)
    w = (job.get("whatif") or [None])[0]
    return {
        "ranks": len(job["ranks"]),
        "wall_us": job["wall_us"],
        "straggler": rank,
        "straggler_late_us": late,
        "waited_us": job["collectives"]["wait_us"],
        "saving_us": w["saving_us"] if w else 0.0,
    }


#: Findings a catalog entry keeps (``top_findings``), the largest estimated savings first.
TOP_FINDINGS = 3


def step_time(doc: Doc) -> tuple[float | None, int]:
    """The time of one step of the trace, µs, and the steps it is the median of: the median of
    ``steps[].dur_us``, or (no profiled steps: 0) the window's duration; None when there is neither."""
    durations = sorted(float(s["dur_us"]) for s in doc.get("steps") or () if s.get("dur_us") is not None)
    if durations:
        n = len(durations)
        mid = durations[n // 2] if n % 2 else (durations[n // 2 - 1] + durations[n // 2]) / 2
        return mid, n
    window = (doc.get("window") or {}).get("dur_us")
    return (None if window is None else float(window)), 0


def top_findings(doc: Doc, n: int = TOP_FINDINGS) -> list[Doc]:
    """The ``n`` findings with the largest ``est_saving_us`` (the document's order among equals), each
    as ``{rule, title, est_saving_us}``."""
    found = list(doc.get("findings") or ())
    ranked = sorted(range(len(found)), key=lambda i: (-float(found[i].get("est_saving_us") or 0.0), i))
    return [{k: found[i].get(k) for k in ("rule", "title", "est_saving_us")} for i in ranked[:n]]


def catalog_summary(doc: Doc) -> Doc:
    """The headline numbers a store keeps for a trace: the analysis ``summary`` plus ``cpu_only`` and
    ``best_saving_us`` (``best_saving``); a CPU-only trace's ``device_utilization`` is null rather than
    a meaningless 0. A job adds ``job`` (``job_summary``): the numbers are then the shown rank's, ``rank``.

    What a run's page shows of each of its captures without reading their analyses: ``capture`` (the
    document's ``source.capture``: null for a trace that is not one capture of a long run), ``step_us``
    and ``step_count`` (``step_time``), ``top_findings`` (``top_findings``) and ``finding_rules`` (every
    finding's rule, sorted once each: what is new in a later capture). Entries catalogued before these
    existed lack them; every reader takes them with ``.get``."""
    out = dict(doc.get("summary") or {})
    out["cpu_only"] = cpu_only(doc)
    out["best_saving_us"] = best_saving(doc)[0]
    out["capture"] = (doc.get("source") or {}).get("capture")
    out["step_us"], out["step_count"] = step_time(doc)
    out["top_findings"] = top_findings(doc)
    out["finding_rules"] = sorted({str(f.get("rule")) for f in doc.get("findings") or ()})
    if out["cpu_only"]:
        out["device_utilization"] = None
    job = job_summary(doc)
    if job is not None:
        out["job"] = job
        out["rank"] = (doc.get("source") or {}).get("rank")
    return out


def job_text(job: Doc) -> str:
    """One line for a job: "8 ranks, job wall 20.82 ms; rank 7 held the job back (6.10 ms late);
    without stragglers it saves 8.01 ms (38%)"."""
    from stallscope.display.units import duration, saving, share

    line = f"{job['ranks']} ranks, job wall {duration(job['wall_us'])}"
    if job["straggler"] is not None:
        line += f"; rank {job['straggler']} held the job back ({duration(job['straggler_late_us'])} late)"
    if job["saving_us"] > 0:
        wall = job["wall_us"]
        line += f"; without stragglers it {saving(job['saving_us'])} ({share(job['saving_us'] / wall if wall else 0.0)})"
    return line


def utilization_text(summary: Doc) -> str:
    """``summary``'s device utilization as a percentage, "—" when it has none (CPU-only, old entry)."""
    value = summary.get("device_utilization")
    return "—" if summary.get("cpu_only") or value is None else f"{value:.1%}"


def bottleneck_text(summary: Doc) -> str:
    """``summary``'s bottleneck, "CPU only" for a CPU-only trace, "-" when there is none."""
    if summary.get("cpu_only"):
        return CPU_ONLY
    return str(summary.get("bottleneck") or "-")
