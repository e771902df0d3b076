"""Timeline explorer: zoom and pan with server-side windowing.

Every zoom, pan, reset or zoom-out asks ``stallscope.dashboard.timeline.extract`` for the visible range only, merged
to screen resolution (``max_items_per_lane``), and redraws with ``stallscope.dashboard.timeline.figure``: the browser
never holds more than a screenful of items, however large the trace. The critical path, gaps by cause and
syncs are rows and marks of the same figure. A click shows the item's details and call site (and the page's
script, ``assets/timeline.js``, links a launch call and its kernel). ``?claim=<id>`` (the "show" links of
the other pages, ``stallscope.dashboard.claims``) opens the claim's range with its events outlined; the
outlines stay while zooming.

A job upload (a rank folder) can show any of its ranks: ``?rank=N`` (a picker on the page lists every
rank, the straggler first). The rank analysed in full at upload is the default; another rank's analysis is
built from its own file on demand (``LiveAnalyses``). The view carries its rank, so every zoom and click
asks the same analysis. Claims of the other pages (findings, syncs, gaps) are the fully analysed rank's:
on another rank they are not applied, the page says so and links to them; a collective's claim
(``collective-<k>``, the job's straggler evidence) and the segments listed on this page are the rank's own.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any
from urllib.parse import quote

import numpy as np
from dash import Dash, Input, Output, State, ctx, dcc, html, no_update

from stallscope.analyzer.analysis import Analysis
from stallscope.analyzer.passes.critical import Kind
from stallscope.dashboard import claims, headline, timeline, timeline_figure
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
    RANKS = "explorer-ranks"  # the rank picker of a job upload
    TITLE = "explorer-title"  # which rank (and file) the timeline shows
    CLAIM_NOTE = "explorer-claim-note"  # a claim of another rank's analysis: not applied, linked


def full_view(doc: Doc) -> dict[str, float]:
    w = doc["window"]
    return {
        "start": float(w["start_us"]),
        "end": float(w["end_us"]),
        "lo": float(w["start_us"]),
        "hi": float(w["end_us"]),
    }


def rank_view(a: Analysis) -> dict[str, float]:
    """``full_view`` of another rank of a job: its own window (its own clock)."""
    w = a.window
    return {"start": w.start_us, "end": w.end_us, "lo": w.start_us, "hi": w.end_us}


def job_ranks(doc: Doc) -> list[int]:
    """The ranks of a job upload (analysed ones: a failed rank has nothing to show), the straggler first,
    then in order; [] for a single trace."""
    job = doc.get("job")
    if not job:
        return []
    first = headline.straggler(job)
    ranks = sorted({int(r["rank"]) for r in job["ranks"]})
    return sorted(ranks, key=lambda r: (r != first, r))


def shown_rank(doc: Doc) -> int | None:
    """The rank the upload analysed in full (the default timeline)."""
    rank = (doc.get("source") or {}).get("rank")
    return int(rank) if isinstance(rank, int) else None


def parse_rank(doc: Doc, text: str | None) -> tuple[int | None, str | None]:
    """``?rank=`` read against the upload: (the rank to build on demand, None for the rank analysed in
    full; an error to show instead, or None)."""
    if text is None or text == "":
        return None, None
    ranks = job_ranks(doc)
    if not re.fullmatch(r"[0-9]{1,9}", text.strip()):
        return None, f"rank {text[:40]!r} is not a rank number" + (
            f"; this job's ranks are {_listed(ranks)}" if ranks else ""
        )
    rank = int(text)
    own = shown_rank(doc)
    if rank == own or (not ranks and own is None and rank == 0):  # a trace without a rank is rank 0
        return None, None
    if not ranks:
        return None, f"this upload is a single trace (rank {own or 0}): it has no rank {rank}"
    if rank not in ranks:
        failed = len(doc["job"].get("failed") or ())
        also = f" ({failed} rank file{'s' if failed > 1 else ''} could not be analysed)" if failed else ""
        return None, f"rank {rank} is not in this job: its ranks are {_listed(ranks)}{also}"
    return rank, None


def _listed(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in sorted(ranks))


def rank_link(trace_id: str, rank: int, claim_id: str | None = None) -> str:
    """The URL of one rank's timeline (a collective's claim kept: the same collective on that rank)."""
    keep = f"&claim={quote(claim_id, safe='-')}" if claim_id and claim_id.startswith("collective-") else ""
    return f"/trace/{trace_id}/timeline?rank={rank}{keep}"


def rank_picker(
    entry: Entry, doc: Doc, rank: int | None, claim_id: str | None = None, shown: bool = True
) -> html.Div | None:
    """A job upload's ranks as links, the straggler first and marked, the shown one highlighted (none when
    not ``shown``: a bad ``?rank=``); None for a single trace."""
    ranks = job_ranks(doc)
    if not ranks:
        return None
    first = headline.straggler(doc["job"])
    current = (shown_rank(doc) if rank is None else rank) if shown else None
    full = shown_rank(doc)
    links: list[Any] = [html.Span("Rank:", className="ss-label")]
    for r in ranks:
        label = (
            f"rank {r}"
            + (" (straggler)" if r == first else "")
            + (" · analysed in full" if r == full else "")
        )
        links.append(
            dcc.Link(
                label,
                href=rank_link(entry.id, r, claim_id),
                id=f"explorer-rank-{r}",
                className="ss-rank ss-active" if r == current else "ss-rank",
                title=f"the timeline of rank {r}",
            )
        )
    return html.Div(links, id=Ids.RANKS.value, className="ss-rank-picker")


def rank_title(doc: Doc, rank: int | None) -> html.H3 | None:
    """Which rank a job's timeline shows, and its file; None for a single trace."""
    job = doc.get("job")
    if not job:
        return None
    r = shown_rank(doc) if rank is None else rank
    file = next((str(x.get("path") or "") for x in job["ranks"] if x["rank"] == r), "")
    what = " (straggler)" if r == headline.straggler(job) else ""
    full = " · analysed in full: the overview and tables are this rank's" if rank is None else ""
    return html.H3(f"Rank {r}{what}: {file}{full}", id=Ids.TITLE.value)


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


def claim_link(trace_id: str, claim_id: str, rank: int | None = None) -> str:
    """The URL of the timeline opened at a claim (``stallscope.dashboard.claims``), of ``rank`` (None:
    the rank analysed in full)."""
    return f"/trace/{trace_id}/timeline?claim={quote(claim_id, safe='-')}" + (
        "" if rank is None else f"&rank={rank}"
    )


def own_claim(claim_id: str) -> bool:
    """Whether a claim applies to any rank's timeline: a collective (every rank took part) or a segment
    of the critical path the page itself lists; findings, syncs and gaps are the fully analysed rank's."""
    return claim_id.startswith(("collective-", "segment-"))


def claim_view(
    services: Services, trace_id: str, view: dict[str, Any], claim_id: str | None, job: Doc | None = None
) -> dict[str, Any]:
    """``view`` opened at the claim ``claim_id`` names (its range with a margin; ``job``: the job document,
    for a collective's claim), its outlines and note kept in the view for every later zoom; unchanged when
    the id names nothing (or, on another rank than the one analysed in full, is not that rank's own)."""
    if not claim_id or (view.get("rank") is not None and not own_claim(claim_id)):
        return view
    c = claims.claim(services.live.get(trace_id, view.get("rank")), claim_id, job)
    if c is None:
        return view
    start, end = c.view(view["lo"], view["hi"])
    marks = [[k, s, e] for k, s, e in c.marks]
    return {**view, "start": start, "end": end, "claim": claim_id, "note": c.note, "marks": marks}


def draw(services: Services, trace_id: str, view: dict[str, Any]) -> tuple[Any, str]:
    """The figure of ``view`` and a status line (range shown, items drawn, whether merged); with a
    claim in the view, its events outlined."""
    a = services.live.get(trace_id, view.get("rank"))
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
    a = services.live.get(trace_id, view.get("rank"))
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


def layout(
    services: Services, entry: Entry, claim_id: str | None = None, rank_text: str | None = None
) -> html.Div:
    """The timeline of the upload's fully analysed rank, or (``rank_text``, ``?rank=``) of another rank of
    its job; a rank that is not one gets a message under the picker."""
    doc = services.store.analysis(entry.id)
    rank, problem = parse_rank(doc, rank_text)
    head = [trace_nav(entry, "/timeline"), rank_picker(entry, doc, rank, claim_id, problem is None)]
    if problem is not None:
        return html.Div([*head, message(problem)])
    live = services.live
    if not live.ready(entry.id, rank=rank):
        live.warm(entry.id, rank)
        if not live.ready(entry.id, wait_s=1.0, rank=rank) and live.failure(entry.id, rank) is None:
            return preparing(entry, doc, rank, head)
    try:
        view: dict[str, Any] = dict(full_view(doc)) if rank is None else rank_view(live.get(entry.id, rank))
        view["rank"] = rank
        view = claim_view(services, entry.id, view, claim_id, doc.get("job"))
        fig, status = draw(services, entry.id, view)
    except (StoreError, ValueError) as exc:
        return html.Div([*head, message(str(exc))])
    return html.Div(
        [
            *head,
            rank_title(doc, rank),
            other_claim(entry, doc, rank, claim_id),
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
            segments_panel(services, entry, rank),
        ]
    )


def other_claim(entry: Entry, doc: Doc, rank: int | None, claim_id: str | None) -> html.Div | None:
    """On another rank than the one analysed in full, a claim of that rank's analysis (a finding, sync or
    gap of the other pages) is not applied: say so, and link to it where it applies."""
    if rank is None or not claim_id or own_claim(claim_id):
        return None
    full = shown_rank(doc)
    return html.Div(
        [
            f"{claim_id[:60]} is a claim of rank {full}'s analysis (the rank analysed in full), not of "
            f"rank {rank}'s: this is rank {rank}'s whole timeline. ",
            dcc.Link(f"Show it on rank {full}", href=claim_link(entry.id, claim_id[:60])),
        ],
        id=Ids.CLAIM_NOTE.value,
        className="stallscope-info",
    )


SEGMENTS_LISTED = 10


def segments_panel(services: Services, entry: Entry, rank: int | None = None) -> html.Div | None:
    """The longest critical-path segments (of ``rank``'s analysis), each a link to its evidence
    (``?claim=segment-<i>``)."""
    a = services.live.get(entry.id, rank)
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
        items.append(html.Li([text, " ", dcc.Link("show", href=claim_link(entry.id, f"segment-{i}", rank))]))
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


def preparing(entry: Entry, doc: Doc, rank: int | None = None, head: list[Any] | None = None) -> html.Div:
    """Shown while the typed analysis is rebuilt (seconds for a 1M-event trace; another rank of a job is
    loaded from its file first); polls until ready."""
    if rank is None:
        events = doc["source"].get("events") or 0
        what = f"preparing the timeline: rebuilding the analysis of {events:,} events…"
    else:
        what = f"preparing the timeline of rank {rank}: loading its trace file and analysing it…"
    return html.Div(
        [
            *(head or [trace_nav(entry, "/timeline")]),
            html.Div(what, className="stallscope-progress"),
            dcc.Store(id=Ids.PREPARING_TRACE.value, data=entry.id),
            dcc.Interval(id=Ids.PREPARING_TICK.value, interval=500),
        ]
    )


def prepared(services: Services, trace_id: str, rank: int | None = None) -> bool:
    """Whether the timeline page can be drawn again: its analysis is ready or its rebuild failed (then the
    page says why). The router redraws it (``pages.on_preparing``)."""
    live = services.live
    return live.ready(trace_id, rank=rank) or live.failure(trace_id, rank) is not None


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
