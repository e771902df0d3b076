"""Traces page: drag-and-drop upload, a sortable and searchable table of the store, delete, pin (kept when
the store is over its limit), compare two; what the store holds against its limit.

The captures of a long run (``stallscope.dashboard.runs``) are one row, the run's: its number of captures
and how many are flagged, the latest capture's numbers, a link to the run page; deleting or pinning it
acts on every capture. Other uploads are a row each.

Layout / callbacks split: ``layout`` builds the page, the ``on_*`` functions are the callbacks' bodies
(plain functions of the services and the inputs, called directly by the tests), ``register`` wires them.
"""

from __future__ import annotations

import base64
import binascii
import io
import time
from enum import Enum
from typing import Any

from dash import Dash, Input, Output, State, ctx, dcc, html, no_update

from stallscope.dashboard.auth import ENV, token_required
from stallscope.dashboard.headline import bottleneck_text, job_text
from stallscope.dashboard.pages.common import TABLE_STYLE, Shell, data_table
from stallscope.dashboard.runs import build, groups, run_of, run_url
from stallscope.dashboard.services import Services
from stallscope.dashboard.store import Entry, StoreError
from stallscope.dashboard.unpack import BadUpload


class Ids(str, Enum):
    UPLOAD = "traces-upload"
    UPLOAD_MESSAGE = "traces-upload-message"
    UPLOAD_LIMIT = "traces-upload-limit"
    SEARCH = "traces-search"
    TABLE = "traces-table"
    DELETE = "traces-delete"
    PIN = "traces-pin"
    UNPIN = "traces-unpin"
    USAGE = "traces-usage"
    COMPARE = "traces-compare"
    MESSAGE = "traces-message"
    TICK = "traces-tick"


COLUMNS = [
    {"id": "name", "name": "name"},
    {"id": "run", "name": "run"},  # a run's row: its captures, and how many are flagged
    {"id": "pinned", "name": "pinned"},
    {"id": "tags", "name": "tags"},
    {"id": "uploaded", "name": "uploaded (UTC)"},
    {"id": "status", "name": "status"},
    # a job (a rank folder) leads with the job: who held it back and what that cost; the numbers after
    # it are the shown rank's
    {"id": "ranks", "name": "ranks", "type": "numeric"},
    {"id": "job", "name": "job"},
    # a number (sorts numerically); null for a CPU-only trace, shown as a dash
    {
        "id": "utilization",
        "name": "GPU utilization",
        "type": "numeric",
        "format": {"specifier": ".1%", "nully": "—"},
    },
    {"id": "bottleneck", "name": "bottleneck"},
    {"id": "avoidable_syncs", "name": "avoidable syncs", "type": "numeric"},
    {"id": "saving_ms", "name": "est. saving (ms)", "type": "numeric", "format": {"specifier": ",.2f"}},
    {"id": "open", "name": "", "presentation": "markdown"},
]


def layout(services: Services) -> html.Div:
    mb = services.max_upload_bytes >> 20
    limit: dict[str, Any] = {"data-max-bytes": str(services.max_upload_bytes)}
    if token_required():  # assets/upload_limit.js adds --token to the command it suggests
        limit["data-token"] = "1"
    return html.Div(
        [
            html.H2("Traces"),
            html.Div(  # data-max-bytes: assets/upload_limit.js says when a file is over the limit
                dcc.Upload(
                    html.Div(
                        [
                            html.Div(["Drop a trace here or ", html.A("choose a file")]),
                            html.Div(
                                f".json, .json.gz, or a zipped/tarred bundle, up to {mb} MB;"
                                " larger files: stallscope upload FILE --to URL"
                                + (f" --token ${ENV}" if token_required() else ""),
                                className="ss-hint",
                            ),
                        ]
                    ),
                    id=Ids.UPLOAD.value,
                    max_size=services.max_upload_bytes,
                    multiple=False,
                    className="ss-upload",
                    # over the limit (inline: dcc.Upload swaps these styles in while a file is dragged)
                    style_reject={"borderColor": "#b42318", "backgroundColor": "#fdecea"},
                    style_active={"borderColor": "#3b78b5", "backgroundColor": "#eef4fb"},
                ),
                **limit,
            ),
            html.Div(id=Ids.UPLOAD_LIMIT.value),  # written by assets/upload_limit.js only
            html.Div(id=Ids.UPLOAD_MESSAGE.value),
            html.Div(
                [
                    dcc.Input(
                        id=Ids.SEARCH.value, type="search", placeholder="search names and tags", debounce=True
                    ),
                    html.Button("Delete selected", id=Ids.DELETE.value),
                    html.Button("Pin selected", id=Ids.PIN.value, title="keep them when the store is full"),
                    html.Button("Unpin selected", id=Ids.UNPIN.value),
                    html.Button("Compare two selected", id=Ids.COMPARE.value),
                    html.Span(id=Ids.MESSAGE.value, className="muted"),
                ],
                className="ss-toolbar",
            ),
            data_table(
                id=Ids.TABLE.value,
                columns=COLUMNS,
                data=rows(services.store.entries(), ""),
                sort_action="native",
                row_selectable="multi",
                selected_rows=[],
                page_size=50,
                markdown_options={"link_target": "_self"},
                style_data_conditional=[
                    *TABLE_STYLE["style_data_conditional"],
                    {"if": {"filter_query": "{flagged} > 0"}, "backgroundColor": "#fff8e6"},
                ],
            ),
            html.Div(usage_text(services), id=Ids.USAGE.value, className="muted"),
            dcc.Interval(id=Ids.TICK.value, interval=2000),
        ]
    )


def usage_text(services: Services) -> str:
    """What the store holds on disk, against its limit: the oldest unpinned traces go when it is over."""
    store = services.store
    usage = store.usage(max_age_s=5.0)  # every open traces page asks every 2 s
    used = f"store: {usage / (1 << 20):,.1f} MB"
    if store.limit_bytes is None:
        return f"{used} (no limit)"
    share = usage / store.limit_bytes if store.limit_bytes else 1.0
    return (
        f"{used} of {store.limit_bytes / (1 << 20):,.0f} MB ({share:.0%});"
        " over the limit, the oldest unpinned traces are removed first"
    )


RUN_ROW = "run:"  # a run's row id: "run:<run id>" (an entry's is its 32 hex digits)


def rows(entries: list[Entry], search: str | None) -> list[dict[str, Any]]:
    """Table rows of the entries whose name or a tag contains ``search`` (case-insensitive), a run's
    captures as one row where its newest upload would be (found by the run id or any capture's name or
    tag). The name is a plain text cell; the only markdown is the link, built from the id (32 hex digits)
    or the run id (``runs.RUN_ID_RE``, quoted)."""
    needle = (search or "").strip().lower()
    by_run = groups(entries)
    out = []
    for e in entries:
        run_id = run_of(e)
        if run_id is None:
            if not needle or _matches(e, needle):
                out.append(_row(e))
            continue
        mine = by_run.pop(run_id, None)
        if mine is None:  # its run's row is already in
            continue
        if not needle or needle in run_id.lower() or any(_matches(m, needle) for m in mine):
            out.append(run_row(run_id, mine))
    return out


def _matches(e: Entry, needle: str) -> bool:
    return needle in e.name.lower() or any(needle in t.lower() for t in e.tags)


def _row(e: Entry) -> dict[str, Any]:
    s = e.summary or {}
    saving = s.get("best_saving_us", s.get("est_saving_us"))  # entries stored before best_saving_us
    job = s.get("job")
    return {
        "id": e.id,
        "uploaded_at": e.uploaded_at,  # not a column: orders a comparison (before = older)
        "name": e.name,
        "run": "",
        "flagged": 0,
        "pinned": "pinned" if e.pinned else "",
        "tags": ", ".join(e.tags),
        "uploaded": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e.uploaded_at)),
        "status": e.status.value if e.status.value != "error" else f"error: {e.error[:80]}",
        "ranks": job["ranks"] if job else (1 if e.summary else None),
        "job": job_text(job) if job else "",
        "utilization": s.get("device_utilization"),
        "bottleneck": bottleneck_text(s) if e.summary else None,
        "avoidable_syncs": s.get("avoidable_sync_count"),
        "saving_ms": None if saving is None else saving / 1000,
        "open": f"[open](/trace/{e.id})",
    }


def run_row(run_id: str, mine: list[Entry]) -> dict[str, Any]:
    """One run's row: its captures, how many are flagged, and the numbers of its latest analysed one."""
    run = build(run_id, mine)
    n = len(run.captures)
    text = f"{n} capture{'s' * (n != 1)}" + (f", {run.flagged} flagged" if run.flagged else "")
    if run.others:
        text += f", {len(run.others)} not analysed"
    row = _row(run.captures[-1].entry if run.captures else mine[0])
    newest = max(e.uploaded_at for e in mine)
    pinned = sum(e.pinned for e in mine)
    busy = [e.status.value for e in mine if e.status.value != "ready"]
    row.update(
        {
            "id": RUN_ROW + run_id,
            "uploaded_at": newest,
            "name": f"run {run_id}",
            "run": text,
            "flagged": run.flagged,
            "pinned": "" if not pinned else "pinned" if pinned == len(mine) else f"{pinned} pinned",
            "tags": ", ".join(sorted({t for e in mine for t in e.tags})),
            "uploaded": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(newest)),
            "status": "ready" if not busy else ", ".join(sorted(set(busy))),
            "open": f"[run]({run_url(run_id)})",
        }
    )
    return row


def _selected(services: Services, data: list[dict[str, Any]] | None, selected: list[int] | None) -> list[str]:
    """The entry ids of the selected rows: a run's row stands for each of its captures."""
    ids: list[str] = []
    runs: dict[str, list[Entry]] | None = None
    for i in selected or []:
        if not data or i >= len(data):
            continue
        row_id = str(data[i]["id"])
        if row_id.startswith(RUN_ROW):
            runs = groups(services.store.entries()) if runs is None else runs
            ids += [e.id for e in runs.get(row_id[len(RUN_ROW) :], [])]
        else:
            ids.append(row_id)
    return ids


def on_upload(services: Services, contents: str | None, filename: str | None) -> tuple[Any, Any]:
    """Store a ``dcc.Upload`` file (a base64 data URL) and queue its analysis; returns (message, new
    pathname: the trace's page, where its progress shows)."""
    if not contents:
        return no_update, no_update
    try:
        _header, _, payload = contents.partition(",")
        data = base64.b64decode(payload, validate=True)
        entry = services.store.add(filename or "trace", io.BytesIO(data), services.max_upload_bytes)
    except (binascii.Error, ValueError):
        return _error("the upload is not a readable file"), no_update
    except (BadUpload, StoreError) as exc:
        return _error(f"{filename}: {exc}"), no_update
    if services.worker is not None:
        services.worker.submit(entry.id)
    return html.Span(f"uploaded {entry.name}"), f"/trace/{entry.id}"


def on_table(
    services: Services,
    trigger: str | None,
    search: str | None,
    selected: list[int] | None,
    data: list[dict[str, Any]] | None,
) -> tuple[list[dict[str, Any]], list[int], Any]:
    """Refresh the table (tick, search), delete, pin or unpin the selected rows; returns (rows, selection,
    message)."""
    note: Any = no_update
    if trigger in (Ids.PIN.value, Ids.UNPIN.value):
        ids = _selected(services, data, selected)
        note = "select traces to pin" if trigger == Ids.PIN.value else "select traces to unpin"
        for trace_id in ids:
            try:
                services.store.pin(trace_id, trigger == Ids.PIN.value)
            except StoreError as exc:
                note = str(exc)
                break
        else:
            if ids:
                verb = "pinned" if trigger == Ids.PIN.value else "unpinned"
                note = f"{verb} {len(ids)} trace{'s' * (len(ids) != 1)}"
    elif trigger == Ids.DELETE.value:
        ids = _selected(services, data, selected)
        if not ids:
            note = "select traces to delete"
        for trace_id in ids:
            try:
                services.store.delete(trace_id)
            except StoreError as exc:
                note = str(exc)
        if ids and note is no_update:
            note = f"deleted {len(ids)} trace{'s' * (len(ids) != 1)}"
        selected = []
    elif trigger != Ids.TICK.value:
        selected = []
    fresh = rows(services.store.entries(), search)
    if trigger == Ids.TICK.value and data is not None and selected:
        keep = {data[i]["id"] for i in selected if i < len(data)}
        selected = [i for i, r in enumerate(fresh) if r["id"] in keep]
    return fresh, selected or [], note


def on_compare(
    clicks: int | None, selected: list[int] | None, data: list[dict[str, Any]] | None
) -> tuple[Any, Any]:
    """Two selected rows -> the compare page for them: the older upload is 'before', whatever the
    table's order or the order they were selected in (the compare page can swap them)."""
    if not clicks:  # the page was just drawn, nobody clicked
        return no_update, no_update
    picked = [data[i] for i in (selected or []) if data and i < len(data)]
    if len(picked) != 2:
        return "select exactly two traces to compare", no_update
    if any(str(r["id"]).startswith(RUN_ROW) for r in picked):
        return "a run is a row of captures: compare them from its run page", no_update
    a, b = sorted(picked, key=lambda r: (float(r.get("uploaded_at") or 0.0), str(r.get("uploaded"))))
    return no_update, f"/compare?a={a['id']}&b={b['id']}"


def _error(text: str) -> html.Div:
    return html.Div(text, className="stallscope-error")


def register(app: Dash, services: Services) -> None:
    @app.callback(
        Output(Ids.UPLOAD_MESSAGE.value, "children"),
        Output(Shell.URL.value, "href", allow_duplicate=True),
        Input(Ids.UPLOAD.value, "contents"),
        State(Ids.UPLOAD.value, "filename"),
        prevent_initial_call=True,
    )
    def upload(contents: str | None, filename: str | None) -> tuple[Any, Any]:
        return on_upload(services, contents, filename)

    @app.callback(
        Output(Ids.TABLE.value, "data"),
        Output(Ids.TABLE.value, "selected_rows"),
        Output(Ids.MESSAGE.value, "children"),
        Input(Ids.TICK.value, "n_intervals"),
        Input(Ids.SEARCH.value, "value"),
        Input(Ids.DELETE.value, "n_clicks"),
        Input(Ids.PIN.value, "n_clicks"),
        Input(Ids.UNPIN.value, "n_clicks"),
        State(Ids.TABLE.value, "selected_rows"),
        State(Ids.TABLE.value, "data"),
        prevent_initial_call=True,
    )
    def table(
        _t: Any, search: str | None, _d: Any, _p: Any, _u: Any, selected: list[int] | None, data: Any
    ) -> tuple[Any, ...]:
        return on_table(services, ctx.triggered_id, search, selected, data)

    @app.callback(
        Output(Ids.USAGE.value, "children"), Input(Ids.TICK.value, "n_intervals"), prevent_initial_call=True
    )
    def usage(_t: Any) -> str:
        return usage_text(services)

    @app.callback(
        Output(Ids.MESSAGE.value, "children", allow_duplicate=True),
        Output(Shell.URL.value, "href", allow_duplicate=True),
        Input(Ids.COMPARE.value, "n_clicks"),
        State(Ids.TABLE.value, "selected_rows"),
        State(Ids.TABLE.value, "data"),
        prevent_initial_call=True,
    )
    def compare(clicks: int | None, selected: list[int] | None, data: Any) -> tuple[Any, Any]:
        return on_compare(clicks, selected, data)
