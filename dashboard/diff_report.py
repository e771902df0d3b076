"""The standalone HTML page of ``stallscope diff A B --report OUT``: the comparison of two runs.

Renders the ``stallscope.diff/1`` document (``stallscope.analyzer.document.diff.diff_json``) and nothing else: every figure
was computed by the diff, which read only the two analyses. Trace text (op, kernel and step names, call
sites, paths) is hostile: the template is rendered by Jinja with autoescape on, the document is embedded
with ``|tojson`` in a ``<script type="application/json">`` block, and no markup is built from a trace
string. No plotting library: the page is tables, a few kB.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stallscope.analyzer.passes.verdict import SENTENCE
from stallscope.dashboard import palette
from stallscope.dashboard.report import _environment, ms
from stallscope.display.names import display_name
from stallscope.display.text import evidence_sentence
from stallscope.display.units import signed

Doc = dict[str, Any]
ABSENT = "—"  # a figure that does not exist on that side (a CPU-only run's device idle)

_HEADLINE = (  # (diff key, label, format, which way is better: -1 lower, +1 higher, 0 neither)
    ("wall_us", "wall (window)", "ms", -1),
    ("device_utilization", "device utilization", "pct", +1),
    ("device_busy_us", "device busy", "ms", 0),
    ("device_idle_us", "device idle", "ms", -1),
    ("host_sync_wait_us", "host blocked in syncs", "ms", -1),
    ("sync_count", "syncs", "n", -1),
    ("avoidable_sync_count", "avoidable syncs", "n", -1),
    ("would_sync_count", "would-be syncs (CPU-only)", "n", -1),
)
_TABLES = (  # (diff key, title, what the time column is)
    ("syncs", "Syncs by call site", "host wait + device idle charged"),
    ("ops", "Top ops that changed most", "self time"),
    ("kernels", "Top kernels that changed most", "device time"),
    ("findings", "Findings that changed", "cost"),
)


def write(doc: Doc, path: str | Path) -> int:
    """Render and write the page; returns its size in bytes. ``OSError`` is the caller's to report."""
    data = render(doc).encode("utf-8")
    Path(path).write_bytes(data)
    return len(data)


def render(doc: Doc) -> str:
    """The comparison ``doc`` (schema ``stallscope.diff/1``) as one HTML document."""
    steps = doc["steps"]
    context = {
        "doc": doc,
        "headline": [
            _cells(label, doc[key], how, better)
            for key, label, how, better in _HEADLINE
            if key != "would_sync_count" or _present(doc[key])  # only for CPU-only runs
        ],
        "verdict": {side: _verdict(doc["verdict"][side]) for side in ("before", "after")},
        "verdict_changed": doc["verdict"]["changed"],
        "steps": {
            "rows": [
                _cells("profiled steps", steps["count"], "n", 0),
                _cells("median step", steps["median_us"], "ms", -1),
                _cells("mean step", steps["mean_us"], "ms", -1),
            ],
            "pairs": [
                {"index": p["index"], "name_before": p["before"], "name_after": p["after"]}
                | _fmt(p["dur_us"], "ms", -1)
                for p in steps["pairs"]
            ],
            "note": steps["note"],
        },
        "run": _run(doc.get("run_steps")),
        "tables": [
            {"id": key, "title": title, "what": what, "rows": [table_row(r) for r in doc[key]]}
            for key, title, what in _TABLES
        ],
        "whatif": [_whatif(doc, w) for w in doc["whatif"]],
        "font": palette.FONT_FAMILY,
        "mono": palette.MONO_FAMILY,
        "colors": {"text": palette.TEXT, "muted": palette.MUTED, "grid": palette.GRID},
    }
    return _environment().get_template("diff.html.j2").render(context)


#: how the page names what the whole runs say of the windows' change (``RunNoise.reading``)
_READING = {
    "noise": "noise: the profiled steps differ by less than the runs' step-to-step spread",
    "windows_atypical": "the profiled steps caught atypical steps: the whole runs differ by less than their spread",
    "windows_disagree": "the profiled steps and the whole runs disagree: trust the whole runs",
    "confirmed": "the whole runs confirm the change",
    "run_only": "no profiled steps to compare: the whole runs' change",
}


def _run(run: Any) -> Doc | None:
    """The whole runs' step times against the windows (the diff's ``run_steps``), as text."""
    if not isinstance(run, dict):
        return None
    reading = str(run.get("reading") or "")
    return {
        "rows": [
            _cells("median step (every step)", run["median_us"], "ms", -1),
            _cells("p90 step (every step)", run["p90_us"], "ms", -1),
            _cells("steps timed", run["steps"], "n", 0),
        ],
        "spread": ms(run["spread_us"]),
        "reading": reading,
        "said": _READING.get(reading, reading.replace("_", " ")),
        "trusted": reading in ("confirmed", "run_only"),
        "note": run.get("note") or "",
    }


def _present(delta: Doc) -> bool:
    return delta["before"] is not None or delta["after"] is not None


def _one(value: Any, how: str) -> str:
    if value is None:
        return ABSENT
    if how == "pct":
        return f"{value:.1%}"
    return ms(value) if how == "ms" else f"{int(value):,}"


def _fmt(delta: Doc, how: str, better: int) -> Doc:
    """Before, after and change of one ``{before, after, change, rel}`` as text, and its ``tone``:
    ``better`` / ``worse`` when the figure moved (``better``: -1 lower is better, +1 higher, 0 neither)."""
    change, rel = delta["change"], delta["rel"]
    if change is None:
        text = ""
    elif not change:
        text = "no change"
    elif how == "pct":
        text = f"{change * 100:+.1f} pts"
    else:
        text = (signed(change) if how == "ms" else f"{change:+,.0f}") + (
            f" ({rel:+.0%})" if rel is not None else ""
        )
    tone = "" if not change or not better else ("better" if (change > 0) == (better > 0) else "worse")
    return {
        "before": _one(delta["before"], how),
        "after": _one(delta["after"], how),
        "change": text,
        "tone": tone,
    }


def _cells(label: str, delta: Doc, how: str, better: int) -> Doc:
    return {"metric": label} | _fmt(delta, how, better)


def _verdict(v: Doc) -> Doc:
    if v["cpu_only"]:
        return {"text": "CPU-only profile: no device work, nothing waited on a GPU", "evidence": ""}
    words = evidence_sentence(v, v.get("utilization")) if v.get("sensitivity_us") else v["evidence"]
    return {"text": SENTENCE.get(v["bottleneck"] or "", "no verdict"), "evidence": words}


def table_row(r: Doc) -> Doc:
    """One changed row of the diff (an op, kernel, sync site or finding) as text: the diff page's and
    the dashboard's compare page's. Kernel names are demangled for display (the JSON keeps them raw)."""
    counts = _fmt(r["count"], "n", 0)
    times = _fmt(r["time_us"], "ms", -1)
    return {
        "name": display_name(r["name"]),
        "detail": r["detail"],
        "status": r["status"],
        "count": f"{counts['before']} → {counts['after']}",
        "before": times["before"] if r["time_us"]["before"] is not None else "below the top rows",
        "after": times["after"] if r["time_us"]["after"] is not None else "below the top rows",
        "change": times["change"],
        "tone": times["tone"],
    }


def _whatif(doc: Doc, w: Doc) -> Doc:
    walls = doc["wall_us"]
    out: Doc = {"scenario": w["scenario"]}
    for side in ("before", "after"):
        saving = w["saving_us"][side]
        wall = walls[side] or 0.0
        out[side] = ABSENT if saving is None else f"{ms(saving)} ({saving / max(wall, 1e-9):.0%})"
    return out
