"""Overview of one trace: the verdict and the findings (the HTML report's top, from the same helpers),
headline numbers and the idle / critical-path charts. Everything comes from the stored analysis JSON, so
the page renders without loading the trace model."""

from __future__ import annotations

from enum import Enum
from typing import Any

from dash import Dash, dcc, html

from dashboard.pages.common import CARD, Doc, ms, pct, trace_nav
from dashboard.services import Services
from dashboard.store import Entry


class Ids(str, Enum):
    VERDICT = "overview-verdict"
    FINDINGS = "overview-findings"
    IDLE = "overview-idle"
    CRITICAL = "overview-critical"


def headline(doc: Doc) -> list[tuple[str, str]]:
    """The numbers shown in cards (and compared on the compare page), formatted."""
    s = doc["summary"]
    syncs = f"{s.get('avoidable_sync_count') or 0} of {s.get('sync_count') or 0}"
    return [
        ("wall time", ms(s["wall_us"])),
        ("GPU utilization", pct(s["device_utilization"])),
        ("bottleneck", str(s.get("bottleneck") or "-")),
        ("host blocked in syncs", ms(s["host_sync_wait_us"])),
        ("avoidable syncs", syncs),
        ("est. saving", ms(s.get("est_saving_us"))),
    ]


def findings_list(doc: Doc) -> html.Div:
    from dashboard.report import findings_doc as report_findings  # the report's own rows, shared verbatim

    items = []
    for f in report_findings(doc):
        saving = f" · saves ~{ms(f['est_saving_us'])}" if f["est_saving_us"] > 0 else ""
        items.append(
            html.Li(
                [
                    html.Span(f"[{f['severity']}] ", style={"color": f["color"], "fontWeight": "600"}),
                    html.Span(f["title"], style={"fontWeight": "600"}),
                    html.Span(f" · costs {ms(f['time_us'])}{saving}"),
                    html.Div(f["site"], className="stallscope-site", style={"fontFamily": "monospace"})
                    if f["site"]
                    else None,
                    html.Div(f"fix: {f['advice']}", style={"color": "#616e7c"}),
                ],
                style={"marginBottom": "8px"},
            )
        )
    if not items:
        return html.Div("No findings: nothing in this trace matched a rule.", id=Ids.FINDINGS.value)
    return html.Div([html.H4("Findings, most expensive first"), html.Ol(items)], id=Ids.FINDINGS.value)


def layout(services: Services, entry: Entry) -> html.Div:
    from dashboard import charts
    from dashboard.report import verdict_doc as report_verdict  # the report's verdict sentence, verbatim

    doc = services.store.analysis(entry.id)
    services.live.warm(entry.id)  # the timeline needs the typed analysis: start rebuilding it now
    verdict = report_verdict(doc)
    cards = [
        html.Div([html.Div(k, style={"color": "#616e7c"}), html.Div(v)], style=CARD) for k, v in headline(doc)
    ]
    graphs: list[Any] = []
    if doc.get("devices"):
        graphs = [
            dcc.Graph(id=Ids.IDLE.value, figure=charts.idle_by_cause(doc), config={"displaylogo": False}),
            dcc.Graph(
                id=Ids.CRITICAL.value, figure=charts.critical_by_kind(doc), config={"displaylogo": False}
            ),
        ]
    notes = doc["source"].get("notes") or []
    return html.Div(
        [
            trace_nav(entry, ""),
            html.P(verdict["sentence"], id=Ids.VERDICT.value, style={"fontSize": "17px"}),
            html.Div(cards),
            findings_list(doc),
            html.Div(graphs, style={"display": "grid", "gridTemplateColumns": "1fr 1fr", "gap": "12px"}),
            html.Ul([html.Li(n) for n in notes], style={"color": "#616e7c"}) if notes else None,
        ]
    )


def register(app: Dash, services: Services) -> None:
    """The overview has no callbacks of its own (the shell's poll re-renders it once analysed)."""
