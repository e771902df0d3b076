"""The standalone HTML report: one self-contained file that renders an ``Analysis`` and says what to fix.

The report renders the analyzer's result only (DESIGN.md §1): the verdict, findings, syncs, what-if and
pipeline numbers are read from the analysis JSON (``stallscope.analyzer.document.analysis.to_json``), the timelines from
``stallscope.dashboard.timeline.extract`` and the charts from ``stallscope.dashboard.charts``. Nothing is recomputed.

Trace text is hostile. The template is rendered by Jinja with autoescape on; figures and data are embedded
as JSON with ``|tojson`` (which escapes ``<``, ``>``, ``&`` and ``'``) inside ``<script
type="application/json">`` blocks and handed to plotly by a fixed script; no markup is ever built from a
trace string. Plotly renders a subset of HTML in labels, so the figure builders escape trace text too.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
import plotly.graph_objects as go
from markupsafe import Markup, escape

from stallscope.analyzer.analysis import Analysis
from stallscope.analyzer.document.analysis import to_json
from stallscope.analyzer.document.job import job_json
from stallscope.analyzer.findings.latent import UNMEASURED, measured
from stallscope.analyzer.job.result import JobAnalysis
from stallscope.analyzer.passes.critical import Kind
from stallscope.analyzer.passes.verdict import SENTENCE
from stallscope.dashboard import (
    charts,
    claims,
    job_report,
    palette,
    report_timeline,
    timeline,
    timeline_figure,
)
from stallscope.dashboard.headline import SCENARIO_LABELS, best_saving, cpu_only
from stallscope.display import glossary, names, text, units

Progress = Callable[[str], None]
Doc = dict[str, Any]

_SCENARIOS = SCENARIO_LABELS
_VENDORED = Path(__file__).resolve().parent / "vendor" / "plotly-basic.min.js"
_TIMELINE_JS = Path(__file__).resolve().parent / "pages" / "assets" / "timeline.js"
EVIDENCE_ROWS = 20  # the longest gaps and critical-path segments listed under the timeline
#: trace types the vendored plotly.js bundle draws ("basic": scatter, bar, pie); figures use only these
BUNDLE_TRACE_TYPES = frozenset({"scatter", "bar", "pie"})
_PLOT_CONFIG = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["select2d", "lasso2d"]}


@dataclass(frozen=True)
class ReportOptions:
    cdn: bool = False  # load plotly.js from its CDN instead of inlining it (small file, needs a network)
    max_items_per_lane: int = timeline.DEFAULT_MAX_ITEMS  # timeline level of detail
    max_sync_rows: int = 200  # sync groups listed (the costliest)


# the one formatter of every view (``stallscope.display.units``), under the names the templates use
share = units.share
ms = units.duration


def render(
    analysis: Analysis,
    options: ReportOptions | None = None,
    progress: Progress | None = None,
    job: JobAnalysis | None = None,
    ranks: Mapping[int, Analysis] | None = None,
) -> str:
    """The report of ``analysis`` as one HTML document (plotly.js inlined unless ``options.cdn``); with
    ``job``, the job's verdict first and the whole job's section (``stallscope.dashboard.job_report``),
    and with ``ranks`` (rank -> its analysis) a timeline per rank behind a rank picker, the straggler's
    shown first."""
    opts = options or ReportOptions()
    say = progress or (lambda _msg: None)
    say("report: collecting the analysis")
    doc = _analysis_json(analysis)
    say("report: drawing the timeline")
    frame_fig, columns, _sl = report_timeline.timeline_doc(analysis, origin_name="window")
    syncs = _sync_groups(doc, opts.max_sync_rows)
    job_doc = job_json(job) if job is not None else None
    evidence = _evidence(analysis, doc, syncs, job_doc)
    # a job's other ranks behind a picker, the straggler's first (the detailed rank's is the timeline above)
    rank = doc["source"]["rank"]
    shown = {r: a for r, a in (ranks or {}).items() if r != rank} if job_doc is not None else {}
    rank_timelines = _rank_timelines(shown, job_doc, opts.max_items_per_lane) if shown else []
    say("report: drawing the charts")
    figures = {
        "idle": _fig(charts.idle_by_cause(doc)),
        "critical": _fig(charts.critical_by_kind(doc)),
        "steps": _fig(charts.steps_stacked(doc)) if doc["devices"] else None,  # busy/idle needs a device
        "pipeline": _fig(charts.pipeline(doc)),
    }
    if job_doc is not None:
        figures.update(job_report.skew_figures(job_doc))
    context = {
        "title": _title(analysis, doc)
        if job_doc is None
        else f"{Path(doc['source']['path']).parent.name} (job)",
        "doc": doc,
        "summary_doc": _summary_doc(doc),
        "verdict": verdict_doc(doc),
        "findings": findings_doc(doc),
        "syncs": syncs,
        "tops": _tops(doc),
        "whatif": _whatif(analysis, doc),
        "pipeline": doc["pipeline"],
        "source": _source(analysis, doc, opts),
        "timeline": {
            "figure": frame_fig,
            "columns": columns,
            "views": _timeline_views(analysis),
            "gaps": evidence["gaps"],
            "segments": evidence["segments"],
        },
        "claims": evidence["claims"],
        "timeline_js": _timeline_js(),
        "rank_timelines": rank_timelines,
        "timeline_ranks": {p["rank"] for p in rank_timelines} | ({rank} if job_doc is not None else set()),
        "units": units,
        "job": job_report.job_context(job_doc) if job_doc is not None else None,
        "job_verdict": job_report.job_verdict(job_doc, doc["per_rank"]) if job_doc is not None else None,
        "pipeline_note": text.pipeline_note(doc["pipeline"], float(doc["window"]["dur_us"]))
        if doc["pipeline"]
        else "",
        "glossary": glossary.TERMS,
        "term": term_link,
        "terms": glossary.BY_SLUG,
        "figures": figures,
        "plot_config": _PLOT_CONFIG,
        "palette": {"causes": dict(palette.CAUSE_COLORS), "kinds": dict(palette.KIND_COLORS)},
        "colors": {"text": palette.TEXT, "muted": palette.MUTED, "grid": palette.GRID, "sync": palette.SYNC},
        "font": palette.FONT_FAMILY,
        "mono": palette.MONO_FAMILY,
        "severity": dict(palette.SEVERITY_COLORS),
        "plotly_cdn": _cdn_url() if opts.cdn else None,
        "plotly_js": None if opts.cdn else _plotly_js(),
        "ms": ms,
        "share": share,
    }
    say("report: writing the page")
    return _environment().get_template("report.html.j2").render(context)


def write(
    analysis: Analysis,
    path: str | Path,
    options: ReportOptions | None = None,
    progress: Progress | None = None,
    job: JobAnalysis | None = None,
    ranks: Mapping[int, Analysis] | None = None,
) -> int:
    """Render and write the report; returns its size in bytes. ``OSError`` is the caller's to report."""
    text = render(analysis, options, progress, job, ranks)
    data = text.encode("utf-8")
    Path(path).write_bytes(data)
    return len(data)


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("stallscope.dashboard", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["code"] = code_html
    env.filters["demangle"] = names.display_name
    env.filters["rule_title"] = text.rule_title
    return env


def code_html(value: object) -> Markup:
    """Text whose Markdown code spans (`x`) become ``<code>`` elements; every part is escaped first, so
    trace text inside or outside a span stays text."""
    return Markup("").join(
        Markup("<code>{}</code>").format(part) if is_code else escape(part)
        for is_code, part in text.code_spans(str(value))
    )


def term_link(slug: str, label: str | None = None) -> Markup:
    """``label`` (default: the term) linked to its glossary entry, its meaning as the tooltip."""
    t = glossary.BY_SLUG[slug]
    return Markup('<a class="term" href="#{}" title="{}">{}</a>').format(t.anchor, t.meaning, label or t.term)


def _timelines(a: Analysis, prefix: str, max_items: int) -> list[Doc]:
    return [
        {
            "id": f"{prefix}-{i}",
            "title": title,
            # the title is the section's own heading (it wraps on a narrow page; inside the figure it would
            # crowd the axis)
            "figure": _fig(timeline_figure.figure(sl, origin_name="step" if a.steps else "window")),
        }
        for i, (title, sl) in enumerate(_timeline_slices(a, max_items))
    ]


def _timeline_slices(a: Analysis, max_items: int) -> list[tuple[str, timeline.TimelineSlice]]:
    """A representative step (median duration) and the worst (longest); without steps, the window."""
    m = a.model
    if not a.steps:
        return [
            (
                "Timeline of the whole trace (no profiled steps)",
                timeline.extract(m, a, a.window.start_us, a.window.end_us, max_items),
            )
        ]
    durs = [s.dur_us for s in a.steps]
    median = statistics.median_low(durs)
    rep = next(s for s in a.steps if s.dur_us == median)
    worst = max(a.steps, key=lambda s: s.dur_us)
    picks = [(f"Representative step: {rep.name} ({ms(rep.dur_us)}, the median)", rep)]
    if worst is not rep:
        picks.append((f"Worst step: {worst.name} ({ms(worst.dur_us)}, the longest)", worst))
    elif len(a.steps) == 1:
        picks = [(f"The profiled step: {rep.name} ({ms(rep.dur_us)})", rep)]
    return [
        (title, timeline.extract(m, a, s.start_us, s.start_us + s.dur_us, max_items)) for title, s in picks
    ]


def _rank_timelines(ranks: Mapping[int, Analysis], job: Doc | None, max_items: int) -> list[Doc]:
    """One panel per rank (its representative and worst steps), the straggler's first, then by how late
    each rank was, then by rank; the page shows one panel at a time (the rank picker)."""
    late = {s["rank"]: s["late_us"] for s in (job or {}).get("stragglers") or []}
    straggler = job_report.straggler(job) if job is not None else None
    order = sorted(ranks, key=lambda r: (r != straggler, -late.get(r, 0.0), r))
    return [
        {
            "rank": r,
            "straggler": r == straggler,
            "late_us": late.get(r, 0.0),
            "timelines": _timelines(ranks[r], f"timeline-rank{r}", max_items),
        }
        for r in order
    ]


@cache
def _plotly_js() -> Markup:
    """The vendored plotly.js basic bundle (a quarter of the full one: the report opens much faster)."""
    js = _VENDORED.read_text(encoding="utf-8")
    # plotly.js holds no "</script"; make sure it never ends the script element it is inlined in
    return Markup(js.replace("</script", "<\\/script"))


def plotly_version() -> str:
    """Version of the vendored plotly.js, from its header comment (``plotly.js (basic - minified) vX``)."""
    head = _VENDORED.read_text(encoding="utf-8")[:300]
    m = re.search(r"plotly\.js \(basic - minified\) v(\d+\.\d+\.\d+)", head)
    if m is None:
        raise RuntimeError(f"{_VENDORED}: not the plotly.js basic bundle")
    return m.group(1)


def _cdn_url() -> str:
    return f"https://cdn.jsdelivr.net/npm/plotly.js-basic-dist-min@{plotly_version()}/plotly-basic.min.js"


def _tops(doc: Doc) -> Doc:
    """The JSON's top tables with what their share columns divide by: the window, the device's busy time,
    the profiled steps."""
    tops = doc.get("tops") or {"ops": [], "kernels": []}
    return {
        **tops,
        "window_us": float(doc["window"]["dur_us"]),
        "busy_us": float(doc["summary"].get("device_busy_us") or 0.0),
        "steps": len(doc.get("steps") or []),
        "cpu_only": cpu_only(doc),
    }


def _fig(fig: go.Figure | None) -> Any:
    """A figure as plain JSON data (plotly's encoder handles numpy); embedded later with ``|tojson``."""
    return None if fig is None else json.loads(fig.to_json())


def _timeline_views(a: Analysis) -> list[Doc]:
    """The ranges the timeline's buttons open (ms from the window's start): the representative step
    (median duration, opened first), the worst (longest) and the whole window; without steps, the
    window only."""
    w = a.window

    def view(label: str, start: float, end: float) -> Doc:
        return {
            "label": label,
            "start": round((start - w.start_us) / 1000, 6),
            "end": round((end - w.start_us) / 1000, 6),
        }

    out = []
    if a.steps:
        durs = [s.dur_us for s in a.steps]
        rep = next(s for s in a.steps if s.dur_us == statistics.median_low(durs))
        worst = max(a.steps, key=lambda s: s.dur_us)
        out.append(
            view(
                f"representative step: {rep.name} ({ms(rep.dur_us)}, the median)",
                rep.start_us,
                rep.start_us + rep.dur_us,
            )
        )
        if worst is not rep:
            out.append(
                view(
                    f"worst step: {worst.name} ({ms(worst.dur_us)}, the longest)",
                    worst.start_us,
                    worst.start_us + worst.dur_us,
                )
            )
    out.append(view(f"whole window ({ms(w.dur_us)})", w.start_us, w.end_us))
    return out


def _evidence(a: Analysis, doc: Doc, syncs: Doc, job: Doc | None) -> Doc:
    """The claims the page's "show" links open (every finding, every listed sync group, the longest gaps
    and critical-path segments, a job's costliest collectives on this rank) and the rows of the gap and
    segment tables."""
    out: dict[str, Doc] = {}
    for k in range(len(job["collectives"]["worst"]) if job else 0):
        c = claims.claim(a, f"collective-{k}", job)
        if c is not None:
            out[c.id] = report_timeline.claim_doc(a, c)
    for i in range(1, len(doc["findings"]) + 1):
        c = claims.claim(a, f"finding-{i}")
        if c is not None:
            out[c.id] = report_timeline.claim_doc(a, c)
    for k, g in enumerate(syncs["rows"]):
        g["claim"] = f"syncs-{k}"
        out[g["claim"]] = report_timeline.claim_doc(a, claims.sync_group(a, g["claim"], g["ids"]))
    t0 = a.window.start_us
    gaps = []
    for i in sorted(range(len(a.gaps)), key=lambda i: -a.gaps[i].dur_us)[:EVIDENCE_ROWS]:
        g = a.gaps[i]
        c = claims.claim(a, f"gap-{i}")
        if c is not None:
            out[c.id] = report_timeline.claim_doc(a, c)
        gaps.append(
            {
                "claim": f"gap-{i}",
                "device": g.device,
                "at_us": g.start_us - t0,
                "dur_us": g.dur_us,
                "cause": g.cause.value,
                "detail": g.detail,
                "site": str(g.call_site) if g.call_site else "",
            }
        )
    segments = []
    cp = a.critical
    if cp is not None:
        kinds = [k.value for k in Kind]
        for i in np.argsort(-(cp.end_us - cp.start_us), kind="stable")[:EVIDENCE_ROWS].tolist():
            c = claims.claim(a, f"segment-{i}")
            if c is not None:
                out[c.id] = report_timeline.claim_doc(a, c)
            event = int(cp.event[i])
            segments.append(
                {
                    "claim": f"segment-{i}",
                    "kind": kinds[int(cp.kind[i])],
                    "at_us": float(cp.start_us[i]) - t0,
                    "dur_us": float(cp.end_us[i] - cp.start_us[i]),
                    "lane": a.model.lanes[int(cp.lane[i])].label,
                    "what": a.model.name_of(event) if event >= 0 else "host work between calls",
                }
            )
    return {"claims": out, "gaps": gaps, "segments": segments}


@cache
def _timeline_js() -> Markup:
    """The timeline's script, shared with the dashboard (its assets folder serves the same file)."""
    return Markup(_TIMELINE_JS.read_text(encoding="utf-8").replace("</script", "<\\/script"))


def _analysis_json(a: Analysis) -> Doc:
    """``to_json`` without the critical path's segments: the report draws them from the model's columns
    (``timeline.extract``) and embeds none (``_summary_doc``), and listing them, even as columns, grows
    with the trace (176k segments at 1M events). Length, breakdown and bottleneck are unchanged."""
    cp = a.critical
    if cp is not None:
        empty = slice(0, 0)
        cp = replace(
            cp,
            kind=cp.kind[empty],
            lane=cp.lane[empty],
            event=cp.event[empty],
            start_us=cp.start_us[empty],
            end_us=cp.end_us[empty],
        )
    return to_json(replace(a, critical=cp))


def _summary_doc(doc: Doc) -> Doc:
    """The analysis JSON without its long lists (segments, gaps, syncs, lanes): embedded in the report
    for scripts and tests that want the numbers behind the page."""
    out = {k: doc[k] for k in ("schema", "window", "summary", "devices", "findings", "steps", "whatif")}
    out |= {k: doc[k] for k in ("pipeline", "idle_by_cause_us", "per_rank")}
    out["source"] = {k: v for k, v in doc["source"].items() if k != "lanes"}
    cp = doc["critical_path"] or {}
    out["critical_path"] = {k: v for k, v in cp.items() if k != "segments"}
    return out


def verdict_doc(doc: Doc) -> Doc:
    """One sentence and three numbers: utilization, idle (by cause), and the best estimated saving: the
    larger of ``summary.est_saving_us`` (no avoidable syncs / overlapped input) and the findings' own
    estimates, saying which it is."""
    s = doc["summary"]
    wall = float(s["wall_us"]) or 1.0
    idle_us = float(s["device_idle_us"] or 0.0)  # null on a CPU-only run
    idle = sorted(((v, c) for c, v in doc["idle_by_cause_us"].items() if v > 0), reverse=True)
    best = _best_saving(doc)
    saving, finding = best_saving(doc)  # a finding's own estimate can be the larger one
    if finding is not None:
        how = f"by fixing finding {finding} ({text.rule_title(doc['findings'][finding - 1]['rule'])})"
    else:
        how = f"if you {_SCENARIOS[best['scenario']]}" if best and saving > 0 else ""
    no_device = cpu_only(doc)
    if no_device:
        sentence = (
            "CPU-only profile: no kernels, copies or memsets ran on a device, so nothing waited on a GPU."
        )
    else:
        verdict = SENTENCE.get(s["bottleneck"] or "", "no verdict: the critical path is empty")
        sentence = f"{verdict[0].upper()}{verdict[1:]}. The device was busy {s['device_utilization']:.0%} of {ms(wall)}"
        if idle:
            sentence += (
                f"; the largest cause of idle time was {idle[0][1]} ({ms(idle[0][0])} of {ms(idle_us)})"
            )
        if saving > 0:
            sentence += f"; the best estimated saving is {ms(saving)}, {how}."
        else:
            sentence += "; removing avoidable syncs or overlapping input would not make it faster."
    gaps = sum(v for v, _c in idle)
    return {
        "sentence": sentence,
        "cpu_only": no_device,  # no utilization or bottleneck to show (the views say "CPU only")
        "bottleneck": s["bottleneck"],
        "utilization": s["device_utilization"],
        "idle_us": idle_us,
        "idle": [
            {
                "cause": c,
                "us": v,
                "share": v / idle_us if idle_us > 0 else 0.0,
                "color": palette.cause_color(c),
            }
            for v, c in idle
        ],
        "small_gaps_us": max(idle_us - gaps, 0.0),
        "saving_us": saving,
        "saving_share": saving / wall,
        "saving_how": how,
        "unestimated": _unestimated(doc) if saving <= 0 else None,
        "est_saving_us": float(s["est_saving_us"] or 0.0),
        "wall_us": wall,
        # in words from the sensitivities (the JSON's ``verdict.evidence`` line is for scripts)
        "evidence": text.evidence_sentence(doc.get("verdict") or {}, s["device_utilization"])
        if not no_device
        else "",
        "warnings": list(doc.get("warnings") or []),
    }


def _unestimated(doc: Doc) -> Doc | None:
    """The costliest finding when nothing has an estimated saving: the card must not say "none" above
    a finding that costs time (the replay could not re-time it, e.g. data loading on a CPU-only run)."""
    costly = [(float(f.get("time_us") or 0.0), i) for i, f in enumerate(doc.get("findings") or [], 1)]
    cost, i = max(costly, default=(0.0, 0))
    if cost <= 0:
        return None
    rule = doc["findings"][i - 1]["rule"]
    return {"finding": i, "rule": rule, "rule_title": text.rule_title(rule), "cost_us": cost}


def _best_saving(doc: Doc) -> Doc | None:
    """The realistic scenario behind ``summary.est_saving_us``: no avoidable syncs or overlapped input."""
    real = [w for w in doc["whatif"] if w["scenario"] in ("no_avoidable_syncs", "input_overlapped")]
    return max(real, key=lambda w: w["saving_us"]) if real else None


def site_text(site: Doc | None) -> str:
    """``file:line in function`` of a call site object of the analysis JSON (marked when it is library
    code: no user frame was on the stack), or ''."""
    if not site:
        return ""
    where = f"{site.get('file', '?')}:{site.get('line', '?')} in {site.get('function', '?')}"
    return f"{where} (library code)" if site.get("library") else where


def findings_doc(doc: Doc) -> list[Doc]:
    """The findings as the report lists them (most expensive first, call site as text); the dashboard's
    overview shows the same rows."""
    return [
        {
            "rank": i,
            "rule": f["rule"],
            "rule_title": text.rule_title(f["rule"]),
            "severity": f["severity"],
            "color": palette.SEVERITY_COLORS.get(f["severity"], palette.UNKNOWN),
            "title": f["title"],
            "site": site_text(f["call_site"]),
            "count": f["count"],
            "time_us": f["time_us"],
            "measured": measured(f["rule"]),  # a would-be sync of a CPU-only run has no cost to show
            "cost": f"costs {ms(f['time_us'])}" if measured(f["rule"]) else UNMEASURED,
            "est_saving_us": f["est_saving_us"],
            "advice": f["advice"],
        }
        for i, f in enumerate(doc["findings"], 1)
    ]


def _sync_groups(doc: Doc, limit: int) -> Doc:
    """Syncs grouped by (kind, call site, api, avoidable): count, total wait and bubble, costliest first."""
    groups: dict[tuple[str, str, str, bool], Doc] = {}
    for i, s in enumerate(doc["syncs"]):
        where = site_text(s["call_site"]) or (s["op"] or "")
        key = (s["kind"], where, s["api"], bool(s["avoidable"]))
        g = groups.setdefault(
            key,
            {
                "kind": s["kind"],
                "site": where,
                "api": s["api"],
                "avoidable": bool(s["avoidable"]),
                "reasons": [],
                "count": 0,
                "wait_us": 0.0,
                "bubble_us": 0.0,
                "ids": [],
            },
        )
        g["ids"].append(i)
        g["count"] += 1
        g["wait_us"] += s["wait_us"]
        g["bubble_us"] += s["bubble_us"]
        g["reasons"] = sorted(set(g["reasons"]) | set(s["reason"]))
    rows = sorted(groups.values(), key=lambda g: -(g["wait_us"] + g["bubble_us"]))
    return {"rows": rows[:limit], "groups": len(rows), "total": len(doc["syncs"])}


def _whatif(a: Analysis, doc: Doc) -> Doc:
    recorded = float(doc["window"]["dur_us"])  # the baseline every view shows: the window
    rows = [
        {
            "scenario": w["scenario"],
            "label": _SCENARIOS.get(w["scenario"], w["scenario"]),
            "predicted_wall_us": w["predicted_wall_us"],
            "saving_us": w["saving_us"],
            "share": w["saving_us"] / recorded if recorded > 0 else 0.0,
        }
        for w in doc["whatif"]
    ]
    return {"recorded_us": recorded, "rows": rows}


def _source(a: Analysis, doc: Doc, opts: ReportOptions) -> Doc:
    src = doc["source"]
    devices = []
    for d in a.model.devices:
        props = d.properties
        extra = []
        if "computeMajor" in props:
            extra.append(f"compute {props.get('computeMajor')}.{props.get('computeMinor', 0)}")
        if isinstance(props.get("totalGlobalMem"), int):
            extra.append(f"{props['totalGlobalMem'] / 2**30:.0f} GiB")
        devices.append({"id": d.id, "name": d.name, "detail": ", ".join(extra)})
    run = a.sidecar.run if a.sidecar is not None else {}
    versions = {k: str(run[k]) for k in ("torch", "cuda", "python", "device") if run.get(k)}
    return {
        "path": src["path"],
        "format": src["format"],
        "events": src["events"],
        "ranks": src["ranks"],
        "rank": src["rank"],
        "devices": devices,
        "versions": versions,
        "command": _command(run.get("argv")),
        "git_commit": str(run.get("git_commit") or ""),
        "window": doc["window"],
        "steps": len(doc["steps"]),
        "min_gap_us": a.options.min_gap_us,
        "max_items": opts.max_items_per_lane,
        "skipped": src["skipped"],
        "notes": src["notes"],
        "unlinked": src["unlinked_device_events"],
        # the folder a rank's own report is made from (rank files sit side by side in it)
        "rank_folder": str(Path(src["path"]).parent) if len(src["ranks"]) > 1 else "",
    }


def _command(argv: object) -> str:
    """The profiled command line from the sidecar (a list of strings; anything else is shown as text)."""
    if isinstance(argv, list):
        return " ".join(str(a) for a in argv)
    return "" if argv is None else str(argv)


def _title(a: Analysis, doc: Doc) -> str:
    """The bundle's folder name for a stallscope bundle, else the trace file's name."""
    if a.sidecar is not None:
        return Path(a.sidecar.path).parent.name
    path = str(doc["source"]["path"])
    return Path(path).name or path
