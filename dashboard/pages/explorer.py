"""Timeline explorer: zoom and pan with server-side windowing.

Every zoom, pan, reset or zoom-out asks ``stallscope.dashboard.timeline.extract`` for the visible range only, merged
to screen resolution (``max_items_per_lane``), and redraws with ``stallscope.dashboard.timeline.figure``: the browser
never holds more than a screenful of items, however large the trace. The critical path, gaps by cause and
syncs are rows and marks of the same figure. A click shows the item's details and call site (and the page's
script, ``assets/timeline.js``, links a launch call and its kernel). ``?claim=<id>`` (the "show" links of
the other pages, ``stallscope.dashboard.claims``) opens the claim's range with its events outlined; the
outlines stay while zooming.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import numpy as np
from dash import Dash, Input, Output, State, ctx, dcc, html, no_update

from stallscope.analyzer.passes.critical import Kind
from stallscope.dashboard import claims, timeline, timeline_figure
from stallscope.dashboard.pages.common import Doc, message, ms, trace_nav
from stallscope.dashboard.services import Services
from stallscope.dashboard.store import Entry, StoreError

MAX_ITEMS = 600  # per row and view: about one item per two pixels of a laptop-wide plot
MIN_SPAN_US = 1.0


class Ids(str, Enum):
    GRAPH = "explorer-graph"
    VIEW = "explorer-view"
    TRACE = "explorer-trace"
    STATUS = "explorer-status"
    DETAILS = "explorer-details"
    RESET = "explorer-reset"
    ZOOM_OUT = "explorer-zoom-out"
    PREPARING_TICK = "explorer-preparing-tick"
    PREPARING_TRACE = "explorer-preparing-trace"
    RANGE = "explorer-range"  # the relayouts that change the x range (not plotly's own autosize events)
    SEGMENTS = "explorer-segments"


def full_view(doc: Doc) -> dict[str, float]:
    w = doc["window"]
    return {
        "start": float(w["start_us"]),
        "end": float(w["end_us"]),
        "lo": float(w["start_us"]),
        "hi": float(w["end_us"]),
    }


def next_view(
    view: dict[str, Any], trigger: str | None, relayout: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The range to show after a user action, or None when the action does not change it. The figure's x
    axis is in ms from the window's start (``lo``), whatever the zoom."""
    lo, hi = view["lo"], view["hi"]
    if trigger == Ids.RESET.value:  # also drops a claim's outlines
        return {k: v for k, v in view.items() if k not in _CLAIM_KEYS} | {"start": lo, "end": hi}
    if trigger == Ids.ZOOM_OUT.value:
        mid, half = (view["start"] + view["end"]) / 2, (view["end"] - view["start"])
        return _clamp(view, mid - half, mid + half)
    if not relayout:
        return None
    if relayout.get("xaxis.autorange"):
        return {**view, "start": lo, "end": hi}
    r = relayout.get("xaxis.range")
    r0, r1 = (
        (r[0], r[1])
        if isinstance(r, list) and len(r) == 2
        else (relayout.get("xaxis.range[0]"), relayout.get("xaxis.range[1]"))
    )
    if not isinstance(r0, int | float) or not isinstance(r1, int | float):
        return None
    return _clamp(view, lo + r0 * 1000, lo + r1 * 1000)


def _clamp(view: dict[str, Any], start: float, end: float) -> dict[str, Any]:
    lo, hi = view["lo"], view["hi"]
    start, end = max(lo, min(start, end)), min(hi, max(start, end))
    if end - start < MIN_SPAN_US:
        mid = (start + end) / 2
        start, end = max(lo, mid - MIN_SPAN_US / 2), min(hi, mid + MIN_SPAN_US / 2)
    return {**view, "start": start, "end": end}


_CLAIM_KEYS = ("claim", "note", "marks")


def claim_link(trace_id: str, claim_id: str) -> str:
    """The URL of the timeline opened at a claim (``stallscope.dashboard.claims``)."""
    return f"/trace/{trace_id}/timeline?claim={claim_id}"


def claim_view(
    services: Services, trace_id: str, view: dict[str, Any], claim_id: str | None, job: Doc | None = None
) -> dict[str, Any]:
    """``view`` opened at the claim ``claim_id`` names (its range with a margin; ``job``: the job document,
    for a collective's claim), its outlines and note kept in the view for every later zoom; unchanged when
    the id names nothing."""
    if not claim_id:
        return view
    c = claims.claim(services.live.get(trace_id), claim_id, job)
    if c is None:
        return view
    start, end = c.view(view["lo"], view["hi"])
    marks = [[k, s, e] for k, s, e in c.marks]
    return {**view, "start": start, "end": end, "claim": claim_id, "note": c.note, "marks": marks}


def draw(services: Services, trace_id: str, view: dict[str, Any]) -> tuple[Any, str]:
    """The figure of ``view`` and a status line (range shown, items drawn, whether merged); with a
    claim in the view, its events outlined."""
    a = services.live.get(trace_id)
    sl = timeline.extract(a.model, a, view["start"], view["end"], MAX_ITEMS)
    marks = [(str(k), float(s), float(e)) for k, s, e in view.get("marks") or ()]
    fig = timeline_figure.figure(sl, origin_us=view["lo"], origin_name="window", highlights=marks)
    fig.update_layout(uirevision=f"{view['start']}-{view['end']}")
    merged = ", short events merged" if sl.merged else ""
    status = (
        f"showing {ms(view['start'] - view['lo'])} to {ms(view['end'] - view['lo'])} of {ms(view['hi'] - view['lo'])}"
        f" · {sl.items:,} items{merged} · drag to zoom, double-click to reset, click an item for details"
    )
    if view.get("claim"):
        note = view.get("note") or ""
        status = f"{view['claim']}{': ' + note if note else ''} (outlined) · {status}"
    return fig, status


def on_view(
    services: Services,
    trace_id: str,
    trigger: str | None,
    relayout: dict[str, Any] | None,
    view: dict[str, Any],
) -> tuple[Any, Any, Any]:
    """Callback body: (figure, view, status) after a zoom/pan/reset; errors become the status line."""
    new = next_view(view, trigger, relayout)
    if new is None or (new["start"] == view["start"] and new["end"] == view["end"] and trigger is None):
        return no_update, no_update, no_update
    try:
        fig, status = draw(services, trace_id, new)
    except (StoreError, ValueError) as exc:
        return no_update, no_update, str(exc)
    return fig, new, status


def details(services: Services, trace_id: str, view: dict[str, Any], click: dict[str, Any] | None) -> Any:
    """What a click hit: the item of that row at that time (name, duration, count, call site) or the sync
    mark, from the same extraction the figure was drawn from."""
    points = (click or {}).get("points") or []
    if not points:
        return no_update
    p = points[0]
    a = services.live.get(trace_id)
    sl = timeline.extract(a.model, a, view["start"], view["end"], MAX_ITEMS)
    custom = p.get("customdata")
    if isinstance(custom, str) and custom.startswith("counter:"):  # a point of a counter line
        return _counter_panel(sl, custom, view["lo"] + float(p.get("x", 0.0)) * 1000, view["lo"])
    if "base" not in p:  # a sync marker (x = its start, in ms from the window start)
        at = view["lo"] + float(p.get("x", 0.0)) * 1000
        marks = sorted(sl.syncs, key=lambda m: abs(m.start_us - at))
        if not marks:
            return no_update
        m = marks[0]
        verdict = "avoidable" if m.avoidable else "needed"
        return _panel(
            f"sync ({m.kind}, {verdict}): {m.api}",
            [
                f"host blocked {ms(m.wait_us)}, device idle charged {ms(m.bubble_us)}",
                m.site or "no call site",
            ],
        )
    row_index = round(float(p.get("y", -1)))
    if not 0 <= row_index < len(sl.rows):
        return no_update
    row = sl.rows[row_index]
    at = view["lo"] + float(p["base"]) * 1000
    it = row.items
    best = min(range(len(it)), key=lambda i: abs(float(it.start_us[i]) - at), default=None)
    if best is None:
        return no_update
    dur = float(it.end_us[best] - it.start_us[best])
    count = int(it.count[best])
    lines = [
        f"{row.label} · {'span ' if count > 1 else ''}{ms(dur)} at {ms(float(it.start_us[best]) - view['lo'])}",
        f"{count} events merged at this zoom (zoom in to separate them)" if count > 1 else "",
        it.site[best] or "no call site in the trace",
    ]
    return _panel(timeline.describe(row.kind, it, best), [x for x in lines if x])


def _counter_panel(sl: timeline.TimelineSlice, key: str, at_us: float, origin_us: float) -> Any:
    """A counter's value in force at the clicked time (the sample at or before it)."""
    row = next((c for c in sl.counters if c.key == key), None)
    if row is None or not len(row.ts_us):
        return no_update
    i = max(int(np.searchsorted(row.ts_us, at_us, side="right")) - 1, 0)
    return _panel(
        f"counter: {row.label}",
        [f"{float(row.value[i]):,.6g} at {ms(at_us - origin_us)}", f"{row.samples:,} samples in view"],
    )


def _panel(title: str, lines: list[str]) -> html.Div:
    return html.Div(
        [html.Div(title, style={"fontWeight": "600"})]
        + [html.Div(x, style={"fontFamily": "monospace"}) for x in lines],
        style={
            "border": "1px solid #e4e7eb",
            "borderRadius": "6px",
            "padding": "8px 12px",
            "marginTop": "8px",
        },
    )


def layout(services: Services, entry: Entry, claim_id: str | None = None) -> html.Div:
    doc = services.store.analysis(entry.id)
    view: dict[str, Any] = dict(full_view(doc))
    live = services.live
    if not live.ready(entry.id):
        live.warm(entry.id)
        if not live.ready(entry.id, wait_s=1.0) and live.failure(entry.id) is None:
            return preparing(entry, doc)
    try:
        view = claim_view(services, entry.id, view, claim_id, doc.get("job"))
        fig, status = draw(services, entry.id, view)
    except (StoreError, ValueError) as exc:
        return html.Div([trace_nav(entry, "/timeline"), message(str(exc))])
    return html.Div(
        [
            trace_nav(entry, "/timeline"),
            html.Div(
                [
                    html.Button("Reset", id=Ids.RESET.value),
                    html.Button("Zoom out", id=Ids.ZOOM_OUT.value, style={"marginLeft": "6px"}),
                    html.Span(status, id=Ids.STATUS.value, className="muted"),
                ],
                className="ss-toolbar",
            ),
            dcc.Store(id=Ids.VIEW.value, data=view),
            dcc.Store(id=Ids.TRACE.value, data=entry.id),
            dcc.Graph(id=Ids.GRAPH.value, figure=fig, config={"displaylogo": False, "scrollZoom": True}),
            dcc.Store(id=Ids.RANGE.value),
            html.Div(id=Ids.DETAILS.value, className="stallscope-details"),
            segments_panel(services, entry),
        ]
    )


SEGMENTS_LISTED = 10


def segments_panel(services: Services, entry: Entry) -> html.Div | None:
    """The longest critical-path segments, each a link to its evidence (``?claim=segment-<i>``)."""
    a = services.live.get(entry.id)
    cp = a.critical
    if cp is None or not len(cp.kind):
        return None
    kinds = [k.value for k in Kind]
    w0 = a.window.start_us
    items = []
    for i in np.argsort(-(cp.end_us - cp.start_us), kind="stable")[:SEGMENTS_LISTED].tolist():
        event = int(cp.event[i])
        what = a.model.name_of(event) if event >= 0 else "host work between calls"
        text = (
            f"{kinds[int(cp.kind[i])]} {ms(float(cp.end_us[i] - cp.start_us[i]))} at "
            f"{ms(float(cp.start_us[i]) - w0)} on {a.model.lanes[int(cp.lane[i])].label}: {what}"
        )
        items.append(html.Li([text, " ", dcc.Link("show", href=claim_link(entry.id, f"segment-{i}"))]))
    return html.Div(
        [html.H4("Longest critical-path segments"), html.Ol(items)],
        id=Ids.SEGMENTS.value,
        className="ss-panel",
    )


# Runs in the browser: passes on only the relayouts that move the x axis. Plotly also reports an
# 'autosize' relayout when a figure is (re)drawn; were that to reach the server callback while a zoom
# request is in flight, Dash would drop the zoom's answer as stale.
_RANGE_ONLY = """
function(r) {
    if (r && (r['xaxis.range[0]'] !== undefined || r['xaxis.range'] || r['xaxis.autorange'])) { return r; }
    return window.dash_clientside.no_update;
}
"""


def preparing(entry: Entry, doc: Doc) -> html.Div:
    """Shown while the typed analysis is rebuilt (seconds for a 1M-event trace); polls until ready."""
    events = doc["source"].get("events") or 0
    return html.Div(
        [
            trace_nav(entry, "/timeline"),
            html.Div(
                f"preparing the timeline: rebuilding the analysis of {events:,} events…",
                className="stallscope-progress",
            ),
            dcc.Store(id=Ids.PREPARING_TRACE.value, data=entry.id),
            dcc.Interval(id=Ids.PREPARING_TICK.value, interval=500),
        ]
    )


def prepared(services: Services, trace_id: str) -> bool:
    """Whether the timeline page can be drawn again: its analysis is ready or its rebuild failed (then the
    page says why). The router redraws it (``pages.on_preparing``)."""
    live = services.live
    return live.ready(trace_id) or live.failure(trace_id) is not None


def register(app: Dash, services: Services) -> None:
    clientside: Any = app.clientside_callback  # untyped in dash
    clientside(
        _RANGE_ONLY,
        Output(Ids.RANGE.value, "data"),
        Input(Ids.GRAPH.value, "relayoutData"),
        prevent_initial_call=True,
    )

    @app.callback(
        Output(Ids.GRAPH.value, "figure"),
        Output(Ids.VIEW.value, "data"),
        Output(Ids.STATUS.value, "children"),
        Input(Ids.RANGE.value, "data"),
        Input(Ids.RESET.value, "n_clicks"),
        Input(Ids.ZOOM_OUT.value, "n_clicks"),
        State(Ids.VIEW.value, "data"),
        State(Ids.TRACE.value, "data"),
        prevent_initial_call=True,
    )
    def zoom(relayout: Any, _r: Any, _z: Any, view: dict[str, Any], trace_id: str) -> tuple[Any, Any, Any]:
        trigger = ctx.triggered_id if ctx.triggered_id != Ids.RANGE.value else None
        return on_view(services, trace_id, trigger, relayout, view)

    @app.callback(
        Output(Ids.DETAILS.value, "children"),
        Input(Ids.GRAPH.value, "clickData"),
        State(Ids.VIEW.value, "data"),
        State(Ids.TRACE.value, "data"),
        prevent_initial_call=True,
    )
    def click(data: Any, view: dict[str, Any], trace_id: str) -> Any:
        return details(services, trace_id, view, data)
