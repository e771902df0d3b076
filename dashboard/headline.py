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


def catalog_summary(doc: Doc) -> Doc:
    """The headline numbers a store keeps for a trace: the analysis ``summary`` plus ``cpu_only`` and
    ``best_saving_us`` (``best_saving``); a CPU-only trace's ``device_utilization`` is null rather than
    a meaningless 0."""
    out = dict(doc.get("summary") or {})
    out["cpu_only"] = cpu_only(doc)
    out["best_saving_us"] = best_saving(doc)[0]
    if out["cpu_only"]:
        out["device_utilization"] = None
    return out


def utilization_text(summary: Doc) -> str:
    """``summary``'s device utilization as a percentage, "—" when it has none (CPU-only, old entry)."""
    value = summary.get("device_utilization")
    return "—" if summary.get("cpu_only") or value is None else f"{value:.1%}"


def bottleneck_text(summary: Doc) -> str:
    """``summary``'s bottleneck, "CPU only" for a CPU-only trace, "-" when there is none."""
    if summary.get("cpu_only"):
        return CPU_ONLY
    return str(summary.get("bottleneck") or "-")
