"""Job page (an upload of a rank folder): the straggler findings, a skew chart per collective and the rank x
step heatmaps; clicking a rank (a heatmap cell or a table row) shows that rank's own analysis summary and
how it fared in the job. Reads the analysis JSON's ``job`` key only."""

from __future__ import annotations

import html as text
from enum import Enum
from typing import Any

import plotly.graph_objects as go
from dash import Dash, Input, Output, State, dcc, html

from stallscope.dashboard import job_report, palette
from stallscope.dashboard.pages.common import Doc, card, data_table, message, ms, pct, trace_nav
from stallscope.dashboard.services import Services
from stallscope.dashboard.store import Entry, StoreError

_METRICS = {key: label for key, label, _ in job_report.METRICS}


class Ids(str, Enum):
    TRACE = "job-trace"
    METRIC = "job-metric"
    HEATMAP = "job-heatmap"
    RANKS = "job-ranks"
    RANK = "job-rank"


def heatmap(job: Doc, key: str) -> go.Figure:
    """Ranks down, steps across, ``key`` (µs) as the colour; trace text escaped (plotly renders HTML)."""
    hm = job_report.heatmap(job, key)
    steps = [text.escape(s) for s in hm["steps"]]
    z = [[None if c["us"] is None else c["us"] / 1000 for c in row["cells"]] for row in hm["rows"]]
    colour = next(c for k, _, c in job_report.METRICS if k == key)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=steps,
            y=[row["rank"] for row in hm["rows"]],
            colorscale=[[0, palette.BACKGROUND], [1, colour]],
            colorbar={"title": {"text": "ms"}},
            hovertemplate="rank %{y}, %{x}: %{z:,.3f} ms<extra></extra>",
        )
    )
    fig.update_layout(
        title={"text": f"Rank × step: {_METRICS[key]}", "x": 0, "font": {"size": 14}},
        height=140 + 14 * max(len(hm["rows"]), 4),
        margin={"l": 40, "r": 10, "t": 36, "b": 36},
        font={"family": palette.FONT_FAMILY, "size": 12, "color": palette.TEXT},
    )
    fig.update_yaxes(title={"text": "rank"}, autorange="reversed", dtick=1 if len(hm["rows"]) <= 32 else None)
    return fig


def rank_detail(doc: Doc, rank: int | None) -> Any:
    """One rank's own summary (``per_rank``) and its job figures, or a hint to click one."""
    if rank is None:
        return html.Div("Click a rank in the heatmap or the table for its own analysis.", className="muted")
    job = doc["job"]
    mine = next((r for r in job["ranks"] if r["rank"] == rank), None)
    summary = next((r["summary"] for r in doc.get("per_rank", []) if r["rank"] == rank), None)
    if mine is None or summary is None:
        return message(f"rank {rank} is not in this job")
    return html.Div(
        [
            html.H4(
                f"Rank {rank}"
                + (" (the rank this analysis shows in full)" if rank == doc["source"]["rank"] else "")
            ),
            html.Div(
                [
                    card("bottleneck", str(summary.get("bottleneck") or "-")),
                    card("device utilization", pct(summary.get("device_utilization"))),
                    card("waited in collectives", ms(mine["collective_wait_us"])),
                    card("late", f"{mine['times_last']}×", ms(mine["late_us"])),
                ],
                className="ss-cards",
            ),
        ],
        id=f"job-rank-{rank}",
    )


def layout(services: Services, entry: Entry) -> html.Div:
    doc = services.store.analysis(entry.id)
    job = doc.get("job")
    if not job:
        return html.Div([trace_nav(entry, "/job"), message("a single rank: no job to analyse", "info")])
    findings = [
        html.Li(
            [
                html.B(f"[{f['severity']}] "),
                f["title"],
                html.Div(f["advice"], className="muted"),
                _show(entry, job_report.straggler_claim(job, f["rank"])),
            ]
        )
        for f in job["findings"]
    ]
    skews = [
        dcc.Graph(figure=fig, config={"displaylogo": False}) for fig in job_report.skew_figures(job).values()
    ]
    saving = job["whatif"][0]["saving_us"] if job["whatif"] else 0.0
    return html.Div(
        [
            trace_nav(entry, "/job"),
            dcc.Store(id=Ids.TRACE.value, data=entry.id),
            html.Div(
                [
                    card(
                        "ranks",
                        str(len(job["ranks"])),
                        f"{len(job['failed'])} failed" if job["failed"] else None,
                    ),
                    card("job wall", ms(job["wall_us"])),
                    card("waited in collectives", ms(job["collectives"]["wait_us"]), "all ranks together"),
                    card("without stragglers", f"−{ms(saving)}", "every collective at the median arrival"),
                ],
                className="ss-cards",
            ),
            html.Ol(findings, id="job-findings") if findings else html.P("No straggler.", className="muted"),
            *skews,
            dcc.RadioItems(
                [{"label": f" {v}", "value": k} for k, v in _METRICS.items()],
                "collective_wait_us",
                id=Ids.METRIC.value,
                inline=True,
            ),
            dcc.Graph(
                id=Ids.HEATMAP.value, figure=heatmap(job, "collective_wait_us"), config={"displaylogo": False}
            ),
            html.Div(rank_detail(doc, None), id=Ids.RANK.value),
            data_table(
                id=Ids.RANKS.value,
                columns=[{"id": k, "name": k} for k in _COLUMNS],
                data=[_rank_row(r) for r in job["ranks"]],
                sort_action="native",
            ),
            *[message(f["error"]) for f in job["failed"]],
        ]
    )


def _show(entry: Entry, claim_id: str | None) -> Any:
    """A straggler's "show" link: its costliest late arrival on the timeline of the rank shown in full."""
    if claim_id is None:
        return None
    return dcc.Link(
        "show on the timeline", href=f"/trace/{entry.id}/timeline?claim={claim_id}", className="ss-show"
    )


_COLUMNS = ("rank", "wall", "idle", "waited", "times last", "late", "file")


def _rank_row(r: Doc) -> Doc:
    return {
        "id": r["rank"],  # the table's row id: a click names the rank whatever the sort
        "rank": r["rank"],
        "wall": ms(r["wall_us"]),
        "idle": ms(r["device_idle_us"]),
        "waited": ms(r["collective_wait_us"]),
        "times last": r["times_last"],
        "late": ms(r["late_us"]),
        "file": r["path"],
    }


def on_metric(services: Services, trace_id: str, key: str | None) -> Any:
    try:
        job = services.store.analysis(trace_id).get("job")
    except StoreError as exc:
        return message(str(exc))
    return heatmap(job, key if key in _METRICS else "collective_wait_us") if job else go.Figure()


def on_rank(services: Services, trace_id: str, click: Doc | None, cell: Doc | None) -> Any:
    """The rank clicked last: a heatmap point (its y) or a table cell (its row's rank)."""
    try:
        doc = services.store.analysis(trace_id)
    except StoreError as exc:
        return message(str(exc))
    rank: int | None = None
    if cell and isinstance(cell.get("row_id"), int):  # rows carry their rank as id (sorting keeps it)
        rank = cell["row_id"]
    elif click and click.get("points"):
        y = click["points"][0].get("y")
        rank = int(y) if isinstance(y, int | float) else None
    return rank_detail(doc, rank)


def register(app: Dash, services: Services) -> None:
    @app.callback(
        Output(Ids.HEATMAP.value, "figure"),
        Input(Ids.METRIC.value, "value"),
        State(Ids.TRACE.value, "data"),
        prevent_initial_call=True,
    )
    def metric(key: str | None, trace_id: str) -> Any:
        return on_metric(services, trace_id, key)

    @app.callback(
        Output(Ids.RANK.value, "children"),
        Input(Ids.HEATMAP.value, "clickData"),
        Input(Ids.RANKS.value, "active_cell"),
        State(Ids.TRACE.value, "data"),
        prevent_initial_call=True,
    )
    def pick_rank(click: Doc | None, cell: Doc | None, trace_id: str) -> Any:
        return on_rank(services, trace_id, click, cell)
