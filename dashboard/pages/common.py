"""What every page shares: the shell's component ids, number formats, the trace sub-navigation and the
panels shown instead of a page while a trace is analysed or when it cannot be shown.

Trace strings reach the page only as component text (Dash renders text, never markup).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from dash import dcc, html
from dash.dash_table.DataTable import DataTable

from stallscope.dashboard.palette import FONT_FAMILY, GRID, MUTED, PYTHON, TEXT
from stallscope.dashboard.report import site_text as report_site_text
from stallscope.dashboard.runs import run_of, run_url
from stallscope.dashboard.services import Services
from stallscope.dashboard.store import Entry, Status, StoreError
from stallscope.display import glossary
from stallscope.display.text import code_spans
from stallscope.display.units import Scale, duration


class Shell(str, Enum):
    URL = "shell-url"
    CONTENT = "shell-content"
    PENDING_TICK = "shell-pending-tick"
    PENDING_TEXT = "shell-pending-text"
    PENDING_ID = "shell-pending-id"


Doc = dict[str, Any]

#: The DataTable look (the report's tables: horizontal rules only, muted small headers, tabular numbers),
#: set here once for every table of the dashboard; assets/stallscope.css styles the rest of the page.
TABLE_STYLE: dict[str, Any] = {
    "style_as_list_view": True,
    "style_table": {"overflowX": "auto"},
    "style_cell": {
        "fontFamily": FONT_FAMILY,  # DataTable's own default is monospace
        "fontSize": "13px",
        "textAlign": "left",
        "padding": "6px 8px",
        "color": TEXT,
        "backgroundColor": "#ffffff",
        "borderBottom": f"1px solid {GRID}",
        "whiteSpace": "normal",
        "height": "auto",
        "maxWidth": "420px",
    },
    "style_cell_conditional": [
        {"if": {"column_type": "numeric"}, "textAlign": "right", "fontVariantNumeric": "tabular-nums"}
    ],
    "style_header": {
        "fontWeight": "600",
        "fontSize": "12px",
        "color": MUTED,
        "backgroundColor": "#ffffff",
        "borderBottom": f"2px solid {GRID}",
        "whiteSpace": "nowrap",
    },
    "style_data_conditional": [  # the selected / active cell: a light blue, not Dash's default pink
        {"if": {"state": "active"}, "backgroundColor": "#eef4fb", "border": f"1px solid {PYTHON}"},
        {"if": {"state": "selected"}, "backgroundColor": "#eef4fb", "border": f"1px solid {GRID}"},
    ],
}


def card(label: str, value: str, detail: Any = None) -> html.Div:
    """A headline number the way the report draws it: small upper-case label, large value, muted detail."""
    parts: list[Any] = [html.Div(label, className="ss-label"), html.Div(value, className="ss-value")]
    if detail is not None:
        parts.append(html.Div(detail, className="muted"))
    return html.Div(parts, className="ss-card")


def data_table(**props: Any) -> Any:
    """A ``DataTable`` in the dashboard's style (its typed signature is stricter than the JSON rows we
    give it)."""
    return DataTable(**{**TABLE_STYLE, **props})


def ms(us: float | None) -> str:
    """The time format of every view (``stallscope.display.units.duration``), "—" for a value that does
    not exist."""
    return duration(us)


def duration_column(cid: str, name: str, unit: Scale, missing: str = "—") -> dict[str, Any]:
    """A numeric (so numerically sortable) table column of durations in ``unit`` (``units.scale`` of the
    column's values), its unit in the header; a null cell reads ``missing``."""
    return {
        "id": cid,
        "name": unit.header(name),
        "type": "numeric",
        "format": {"specifier": unit.specifier, "nully": missing},
    }


def code_text(text: str) -> list[Any]:
    """``text`` as Dash children: its Markdown code spans (`x`) as ``html.Code``, the rest as text (Dash
    renders strings as text, never markup)."""
    return [html.Code(part) if is_code else part for is_code, part in code_spans(text)]


def term_link(slug: str, label: str | None = None) -> Any:
    """``label`` (default: the term) linked to its glossary entry, its meaning as the tooltip."""
    t = glossary.BY_SLUG[slug]
    return dcc.Link(label or t.term, href=f"/glossary#{t.anchor}", title=t.meaning, className="ss-term")


def glossary_page() -> html.Div:
    """The glossary every page links to (the report's and docs/glossary.md's)."""
    items: list[Any] = []
    for t in glossary.TERMS:
        items += [html.Dt(t.term, id=t.anchor), html.Dd(t.meaning)]
    return html.Div([html.H2("Glossary"), html.Dl(items, className="ss-glossary")], className="ss-panel")


def pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.1%}"


def site_text(site: Doc | None) -> str:
    """``file:line in function`` of a call site object of the analysis JSON, or ''."""
    return report_site_text(site)


def message(text: str, kind: str = "error") -> html.Div:
    """A one-line message in the page (errors never become tracebacks or blank pages)."""
    return html.Div(text, className=f"stallscope-{kind}")  # the colours are in assets/stallscope.css


TRACE_TABS = (
    ("", "Overview"),
    ("/timeline", "Timeline"),
    ("/syncs", "Syncs"),
    ("/gaps", "Gaps"),
    ("/steps", "Steps"),
    ("/tops", "Top ops"),
    ("/whatif", "What-if"),
    ("/job", "Job"),
)


def trace_nav(entry: Entry, current: str) -> html.Div:
    links: list[Any] = [html.Span(entry.name, className="ss-name")]
    for suffix, label in TRACE_TABS:
        links.append(
            dcc.Link(
                label, href=f"/trace/{entry.id}{suffix}", className="ss-active" if suffix == current else ""
            )
        )
    links.append(dcc.Link("Compare…", href=f"/compare?a={entry.id}"))
    run_id = run_of(entry)
    if run_id is not None:  # one capture of a long run: its run's page
        links.append(dcc.Link(f"Run {run_id}", href=run_url(run_id), className="ss-run-link"))
    return html.Div(links, className="ss-subnav")


def ready_entry(services: Services, trace_id: str) -> Entry | html.Div:
    """The entry when its analysis is ready; otherwise the panel to show instead (progress while it is
    analysed, with a poll that re-renders the page when done; the error when it failed)."""
    try:
        entry = services.store.get(trace_id)
    except StoreError as exc:
        return message(str(exc))
    if entry.status is Status.READY:
        return entry
    if entry.status in (Status.PENDING, Status.ANALYSING):
        return pending_panel(entry)
    return message(f"{entry.name}: {entry.error or entry.status.value}")


def pending_panel(entry: Entry) -> html.Div:
    return html.Div(
        [
            html.H3(entry.name),
            html.Div(progress_text(entry), id=Shell.PENDING_TEXT.value, className="stallscope-progress"),
            dcc.Store(id=Shell.PENDING_ID.value, data=entry.id),
            dcc.Interval(id=Shell.PENDING_TICK.value, interval=700),
        ]
    )


def progress_text(entry: Entry) -> str:
    if entry.status is Status.PENDING:
        return "waiting for the analysis to start…"
    if entry.status is Status.ANALYSING:
        return f"analysing: {entry.progress or 'starting'}…"
    if entry.status is Status.READY:
        return "analysis done"
    return f"{entry.error or entry.status.value}"
