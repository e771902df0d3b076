"""Overview of one trace: a job's verdict first (an upload of a rank folder: who held the job back, what
it cost, a link to the job page), then the shown rank's verdict and the findings (the HTML report's top, from the same helpers),
headline numbers and the idle / critical-path charts (on a CPU-only run, its top host ops). Everything comes from the stored analysis JSON, so
the page renders without loading the trace model."""

from __future__ import annotations

from enum import Enum
from typing import Any

from dash import Dash, dcc, html

from stallscope.dashboard.headline import bottleneck_text, catalog_summary, utilization_text
from stallscope.dashboard.pages.common import Doc, card, code_text, data_table, ms, term_link, trace_nav
from stallscope.dashboard.services import Services
from stallscope.dashboard.store import Entry


class Ids(str, Enum):
    JOB = "overview-job"
    STRAGGLER = "overview-straggler-timeline"
    VERDICT = "overview-verdict"
    EVIDENCE = "overview-evidence"
    WARNINGS = "overview-warnings"
    FINDINGS = "overview-findings"
    TOP_OPS = "overview-top-ops"
    IDLE = "overview-idle"
    CRITICAL = "overview-critical"
    ANNOTATED = "overview-annotated"
    OPEN_PERFETTO = "overview-open-perfetto"
    PERFETTO_STATUS = "overview-perfetto-status"


PERFETTO_UI = "https://ui.perfetto.dev"


def perfetto_panel(entry: Entry) -> html.Div:
    """The trace with its analysis as extra tracks (``stallscope annotate``): a download, and a button
    that hands it to Perfetto UI in another tab by its documented ``postMessage`` API
    (``assets/open_perfetto.js``; the trace goes from this page to that tab, never to a server). Without
    a network the button says it could not reach Perfetto UI; the download still works."""
    from stallscope.analyzer.document.annotate import annotated_name

    href = f"/api/traces/{entry.id}/annotated"
    name = annotated_name(entry.name)
    data: dict[str, Any] = {
        "data-href": href,
        "data-title": entry.name,
        "data-file": name,
        "data-origin": PERFETTO_UI,
    }
    return html.Div(
        [
            html.H2("Open it in Perfetto"),
            html.P(
                "The trace with the critical path, idle gaps, syncs, findings and waited-for arrows as"
                " extra tracks. Open the file in ui.perfetto.dev (Open trace file) or chrome://tracing (Load).",
                className="muted",
            ),
            html.Div(
                [
                    html.A(
                        "Download annotated trace",
                        id=Ids.ANNOTATED.value,
                        href=href,
                        download=name,
                        className="ss-button",
                    ),
                    html.Button(
                        "Open in Perfetto UI",
                        id=Ids.OPEN_PERFETTO.value,
                        title="Opens ui.perfetto.dev in a new tab and hands it the annotated trace",
                        **data,
                    ),
                    html.Span("", id=Ids.PERFETTO_STATUS.value, className="muted"),
                ],
                className="ss-actions",
            ),
        ],
        className="ss-panel",
    )


def headline(doc: Doc) -> list[tuple[str, str]]:
    """The numbers shown in cards, formatted. A CPU-only trace has no utilization ("—") and its
    bottleneck is "CPU only" (``headline.catalog_summary``, the rule the report's verdict uses)."""
    s = catalog_summary(doc)
    syncs = f"{s.get('avoidable_sync_count') or 0} of {s.get('sync_count') or 0}"
    return [
        ("wall time", ms(s["wall_us"])),
        ("GPU utilization", utilization_text(s)),
        ("bottleneck", bottleneck_text(s)),
        ("host blocked in syncs", ms(s["host_sync_wait_us"])),
        ("avoidable syncs", syncs),
        ("est. saving", ms(s["best_saving_us"])),  # the verdict sentence's number
    ]


def findings_list(doc: Doc, trace_id: str | None = None) -> html.Div:
    """The findings, each with a link that opens the timeline at its evidence (``?claim=finding-<n>``)."""
    from stallscope.dashboard.report import (
        findings_doc as report_findings,  # the report's own rows, shared verbatim
    )

    items = []
    for f in report_findings(doc):
        saving = f" · saves ~{ms(f['est_saving_us'])}" if f["est_saving_us"] > 0 else ""
        items.append(
            html.Li(
                [
                    html.Span(f["severity"], className="ss-sev", style={"backgroundColor": f["color"]}),
                    html.Span(code_text(f["title"]), className="ss-title"),
                    html.Div(
                        [
                            f"{f['cost']}{saving} · ",
                            html.Span(f["rule_title"], title=f"rule id: {f['rule']}", className="ss-rule"),
                        ],
                        className="ss-facts",
                    ),
                    html.Div(f["site"], className="stallscope-site") if f["site"] else None,
                    html.Div(["fix: ", *code_text(f["advice"])], className="ss-advice"),
                    dcc.Link(
                        "show on the timeline",
                        href=f"/trace/{trace_id}/timeline?claim=finding-{f['rank']}",
                        className="ss-show",
                        id=f"show-finding-{f['rank']}",
                    )
                    if trace_id
                    else None,
                ]
            )
        )
    if not items:
        return html.Div(
            [
                html.H2("Findings"),
                html.Div("No findings: nothing in this trace matched a rule.", className="muted"),
            ],
            id=Ids.FINDINGS.value,
            className="ss-panel ss-findings",
        )
    return html.Div(
        [html.H2(["Findings ", html.Span("(most expensive first)", className="muted")]), html.Ol(items)],
        id=Ids.FINDINGS.value,
        className="ss-panel ss-findings",
    )


def layout(services: Services, entry: Entry) -> html.Div:
    from stallscope.dashboard import charts
    from stallscope.dashboard.report import (
        verdict_doc as report_verdict,  # the report's verdict sentence, verbatim
    )

    doc = services.store.overview(entry.id)  # bounded: no critical-path segments
    services.live.warm(entry.id)  # the timeline needs the typed analysis: start rebuilding it now
    verdict = report_verdict(doc)
    graphs: list[Any] = []
    if not verdict["cpu_only"]:
        graphs = [
            dcc.Graph(id=Ids.IDLE.value, figure=charts.idle_by_cause(doc), config={"displaylogo": False}),
            dcc.Graph(
                id=Ids.CRITICAL.value, figure=charts.critical_by_kind(doc), config={"displaylogo": False}
            ),
        ]
    notes = doc["source"].get("notes") or []
    job = _job_panel(entry, doc)
    return html.Div(
        [
            trace_nav(entry, ""),
            job,
            html.Div(
                [
                    html.H2(f"Rank {doc['source']['rank']}: verdict" if job is not None else "Verdict"),
                    html.P(verdict["sentence"], id=Ids.VERDICT.value, className="ss-verdict"),
                    html.P(f"Evidence: {verdict['evidence']}", id=Ids.EVIDENCE.value, className="muted")
                    if verdict["evidence"]
                    else None,
                    html.Div(
                        [
                            html.B("The analysis contradicts itself here; do not trust these numbers:"),
                            html.Ul([html.Li(w) for w in verdict["warnings"]]),
                        ],
                        id=Ids.WARNINGS.value,
                        className="ss-warnings",
                    )
                    if verdict["warnings"]
                    else None,
                    html.Div([card(k, v) for k, v in headline(doc)], className="ss-cards"),
                    html.Ul([html.Li(n) for n in notes], className="ss-notes") if notes else None,
                ],
                className="ss-panel",
            ),
            findings_list(doc, entry.id),
            perfetto_panel(entry),
            _top_ops_panel(entry, doc) if verdict["cpu_only"] else None,
            html.Div(
                [html.H2("Where the time went"), html.Div(graphs, className="ss-grid2")], className="ss-panel"
            )
            if graphs
            else None,
        ],
        className="ss-sections",
    )


def _job_panel(entry: Entry, doc: Doc) -> html.Div | None:
    """A job's verdict, first on its overview (the rank's own follows): ``job_report.job_verdict``."""
    if not doc.get("job"):
        return None
    from stallscope.dashboard import job_report

    v = job_report.job_verdict(doc["job"], doc.get("per_rank") or [])
    straggler: list[Any] = []
    if v["straggler"] is not None:
        href = f"/trace/{entry.id}/timeline?rank={v['straggler']}"
        straggler = [dcc.Link(f"Rank {v['straggler']}'s timeline", href=href, id=Ids.STRAGGLER.value)]
        straggler.append(" (the straggler). ")
    return html.Div(
        [
            html.H2("Job verdict"),
            html.P(v["sentence"], id=Ids.JOB.value, className="ss-verdict"),
            html.P(
                [
                    dcc.Link("The job", href=f"/trace/{entry.id}/job"),
                    f": every rank's wall, device busy and waiting, the heatmaps and the skew per call. The "
                    f"numbers below are rank {doc['source']['rank']}'s own analysis. ",
                    *straggler,
                    term_link("straggler", "What is a straggler?"),
                ],
                className="muted",
            ),
        ],
        className="ss-panel",
    )


def _top_ops_panel(entry: Entry, doc: Doc) -> html.Div | None:
    """A CPU-only run's main answer: the host ops with the most self time (the Top ops tab has all)."""
    from stallscope.dashboard.pages.tables import top_op_columns, top_op_rows

    rows = top_op_rows(doc, limit=5)
    if not rows:
        return None
    return html.Div(
        [
            html.H2("Where the host's time went"),
            data_table(id=Ids.TOP_OPS.value, columns=top_op_columns(doc), data=rows, sort_action="native"),
            dcc.Link("every top op", href=f"/trace/{entry.id}/tops"),
        ],
        className="ss-panel",
    )


def register(app: Dash, services: Services) -> None:
    """The overview has no callbacks of its own (the shell's poll re-renders it once analysed)."""
