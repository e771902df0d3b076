"""The dashboard's pages and the router that picks one from the URL.

A plain ``dcc.Location`` router (not ``use_pages``): ``render`` is a pure function of the services and the
URL, so tests call it directly; each page module has ``layout(...)`` and ``register(app, services)``.

    /                          traces: upload, search, sort, delete, pick two to compare
    /trace/<id>                overview: verdict, headline numbers, findings
    /trace/<id>/timeline       timeline explorer (server-side windowing); ?claim=<id> opens a claim's evidence,
                               ?rank=N another rank of a job upload (a picker lists them, the straggler first)
    /trace/<id>/syncs|gaps|steps   tables with filters
    /trace/<id>/whatif         scenarios: predicted time and the re-timed device streams
    /trace/<id>/job            a rank folder's whole job: stragglers, skew per collective, rank x step heatmaps
    /compare?a=<id>&b=<id>     two traces side by side
    /runs/<run_id>             a long run's captures over time, those that changed flagged (?threshold=0.2)
    /glossary                  the terms the pages use (every page links its terms here)
"""

from __future__ import annotations

import contextlib
from typing import Any
from urllib.parse import parse_qs, unquote

from dash import Dash, Input, Output, State, html, no_update

from stallscope.dashboard.pages import compare, explorer, job, overview, run, tables, traces, whatif
from stallscope.dashboard.pages.common import Shell, glossary_page, message, progress_text, ready_entry
from stallscope.dashboard.services import Services
from stallscope.dashboard.store import Status, StoreError

_TRACE_PAGES = {
    "": overview.layout,
    "timeline": explorer.layout,
    "syncs": tables.syncs_layout,
    "gaps": tables.gaps_layout,
    "steps": tables.steps_layout,
    "tops": tables.tops_layout,
    "whatif": whatif.layout,
    "job": job.layout,
}


def _query(search: str | None) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs((search or "").lstrip("?")).items()}


def render(services: Services, pathname: str | None, search: str | None = None) -> Any:
    """The page for a URL; unknown URLs and unusable traces give a message, never an exception."""
    parts = [p for p in (pathname or "/").split("/") if p]
    query = _query(search)
    try:
        if not parts:
            return traces.layout(services)
        if parts == ["glossary"]:
            return glossary_page()
        if parts == ["compare"]:
            return compare.layout(services, query.get("a"), query.get("b"))
        if parts[0] == "runs" and len(parts) == 2:  # the browser's path is percent-encoded
            return run.layout(services, unquote(parts[1]), query.get("threshold"))
        if parts[0] == "trace" and len(parts) in (2, 3):
            page = _TRACE_PAGES.get(parts[2] if len(parts) == 3 else "")
            if page is not None:
                found = ready_entry(services, parts[1])
                if isinstance(found, html.Div):
                    return found
                if page is explorer.layout:  # "show" links open a claim (?claim=finding-1), of a rank
                    return explorer.layout(services, found, query.get("claim"), query.get("rank"))
                return page(services, found)
    except StoreError as exc:
        return message(str(exc))
    return message(f"no page at {pathname}")


def poll_pending(
    services: Services, trace_id: str | None, pathname: str | None, search: str | None
) -> tuple[Any, Any]:
    """While a trace is analysed: its progress line; once it is done (or failed), the page itself."""
    if not trace_id:
        return no_update, no_update
    try:
        entry = services.store.get(trace_id)
    except StoreError as exc:
        return str(exc), message(str(exc))
    if entry.status in (Status.PENDING, Status.ANALYSING):
        return progress_text(entry), no_update
    return progress_text(entry), render(services, pathname, search)


def on_preparing(services: Services, trace_id: str, pathname: str | None, search: str | None) -> Any:
    """The timeline page, drawn again once its analysis is ready or its rebuild failed."""
    rank: int | None = None
    with contextlib.suppress(StoreError):  # the rank awaited (a bad one: the page says so when drawn)
        rank, _ = explorer.parse_rank(services.store.overview(trace_id), _query(search).get("rank"))
    if not explorer.prepared(services, trace_id, rank):
        return no_update
    return render(services, pathname, search)


def register(app: Dash, services: Services) -> None:
    @app.callback(
        Output(Shell.CONTENT.value, "children"),
        Input(Shell.URL.value, "pathname"),
        Input(Shell.URL.value, "search"),
    )
    def route(pathname: str | None, search: str | None) -> Any:
        return render(services, pathname, search)

    @app.callback(
        Output(Shell.PENDING_TEXT.value, "children"),
        Output(Shell.CONTENT.value, "children", allow_duplicate=True),
        Input(Shell.PENDING_TICK.value, "n_intervals"),
        State(Shell.PENDING_ID.value, "data"),
        State(Shell.URL.value, "pathname"),
        State(Shell.URL.value, "search"),
        prevent_initial_call=True,
    )
    def pending(_n: int, trace_id: str | None, pathname: str | None, search: str | None) -> tuple[Any, Any]:
        return poll_pending(services, trace_id, pathname, search)

    @app.callback(
        Output(Shell.CONTENT.value, "children", allow_duplicate=True),
        Input(explorer.Ids.PREPARING_TICK.value, "n_intervals"),
        State(explorer.Ids.PREPARING_TRACE.value, "data"),
        State(Shell.URL.value, "pathname"),
        State(Shell.URL.value, "search"),
        prevent_initial_call=True,
    )
    def prepared(_n: int, trace_id: str, pathname: str | None, search: str | None) -> Any:
        return on_preparing(services, trace_id, pathname, search)

    for module in (traces, overview, explorer, tables, whatif, job, compare, run):
        module.register(app, services)
