"""Job page (an upload of a rank folder): the job's verdict (who held it back, what it cost), every rank
(the straggler first) with its wall, device busy and waiting, the straggler findings, a skew chart per
collective and the rank x step heatmaps (lateness first: the straggler is the darkest); clicking a rank (a
heatmap cell or a table row) shows that rank's own analysis summary and how it fared in the job, with a
link to its timeline (``/trace/<id>/timeline?rank=N``; the table links it too). Reads the analysis JSON's
``job`` key only (``job_report.job_verdict``, as the HTML report)."""

from __future__ import annotations

import html as text
from enum import Enum
from typing import Any

import plotly.graph_objects as go
from dash import Dash, Input, Output, State, dcc, html

from stallscope.dashboard import job_report, palette
from stallscope.dashboard.pages.common import (
    Doc,
    card,
    code_text,
    data_table,
    duration_column,
    message,
    ms,
    pct,
    term_link,
    trace_nav,
)
from stallscope.dashboard.services import Services
from stallscope.dashboard.store import Entry, StoreError, check_id
from stallscope.display.units import Scale, saving, scale

_METRICS = {key: label for key, label, _ in job_report.METRICS}


class Ids(str, Enum):
    TRACE = "job-trace"
    METRIC = "job-metric"
    HEATMAP = "job-heatmap"
    RANKS = "job-ranks"
    RANK = "job-rank"
    VERDICT = "job-verdict"


def heatmap(job: Doc, key: str, trace_id: str | None = None) -> go.Figure:
    """Ranks down, steps across, ``key`` (µs) as the colour; trace text escaped (plotly renders HTML).
    With ``trace_id``, each rank's label on the axis links its timeline (a rank number and the id: no
    trace text in the link)."""
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
            zmin=0,  # white is 0, not the smallest value: the straggler's 1.5 ms of waiting is not "none"
            colorbar={"title": {"text": "ms"}},
            hovertemplate="rank %{y}, %{x}: %{z:,.3f} ms<extra></extra>",
        )
    )
    fig.update_layout(
        title={"text": text.escape(f"Rank × step: {_METRICS[key]}"), "x": 0, "font": {"size": 14}},
        height=140 + 14 * max(len(hm["rows"]), 4),
        margin={"l": 40, "r": 10, "t": 36, "b": 36},
        font={"family": palette.FONT_FAMILY, "size": 12, "color": palette.TEXT},
    )
    fig.update_yaxes(title={"text": "rank"}, autorange="reversed", dtick=1 if len(hm["rows"]) <= 32 else None)
    if trace_id is not None and len(hm["rows"]) <= 32:
        ranks = [int(row["rank"]) for row in hm["rows"]]
        fig.update_yaxes(
            tickmode="array",
            tickvals=ranks,
            ticktext=[f'<a href="{timeline_link(trace_id, r)}" target="_self">{r}</a>' for r in ranks],
        )
    return fig


def timeline_link(trace_id: str, rank: int) -> str:
    """One rank's timeline (the explorer builds any rank's analysis on demand)."""
    return f"/trace/{trace_id}/timeline?rank={rank}"


def rank_detail(doc: Doc, rank: int | None, trace_id: str | None = None) -> Any:
    """One rank's own summary (``per_rank``) and its job figures with a link to its timeline, or a hint
    to click one."""
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
            dcc.Link(
                f"open rank {rank}'s timeline",
                href=timeline_link(trace_id, rank),
                id=f"job-rank-timeline-{rank}",
            )
            if trace_id
            else None,
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
                *code_text(f["title"]),
                html.Div(code_text(f["advice"]), className="muted"),
                _show(entry, job_report.straggler_claim(job, f["rank"]), f["rank"]),
            ]
        )
        for f in job["findings"]
    ]
    skews = [
        dcc.Graph(figure=fig, config={"displaylogo": False}) for fig in job_report.skew_figures(job).values()
    ]
    v = job_report.job_verdict(job, doc.get("per_rank") or [])
    shown = doc["source"]["rank"]
    return html.Div(
        [
            trace_nav(entry, "/job"),
            dcc.Store(id=Ids.TRACE.value, data=entry.id),
            html.Div(
                [
                    html.H2("Job verdict"),
                    html.P(v["sentence"], id=Ids.VERDICT.value, className="ss-verdict"),
                    html.Div(
                        [
                            card(
                                "ranks",
                                str(len(job["ranks"])),
                                f"{len(job['failed'])} failed" if job["failed"] else None,
                            ),
                            card(
                                "straggler",
                                "none" if v["straggler"] is None else f"rank {v['straggler']}",
                                term_link("straggler", "what is a straggler?"),
                            ),
                            card("waited in collectives", ms(v["waited_us"]), "all ranks together"),
                            card(
                                "without stragglers",
                                saving(v["saving_us"]) if v["saving_us"] > 0 else "no saving",
                                f"every collective at the median arrival: {ms(v['predicted_wall_us'])} "
                                f"instead of {ms(v['wall_us'])}",
                            ),
                        ],
                        className="ss-cards",
                    ),
                    html.P(
                        [
                            f"Rank {shown}'s own analysis is this upload's overview and tables; every "
                            "rank's timeline opens from the table below (",
                            dcc.Link(
                                f"the straggler's: rank {v['straggler']}",
                                href=timeline_link(entry.id, v["straggler"]),
                                id="job-straggler-timeline",
                            )
                            if v["straggler"] is not None
                            else dcc.Link(f"rank {shown}'s", href=timeline_link(entry.id, shown)),
                            ") or from a click on the heatmap.",
                        ],
                        className="muted",
                    ),
                    data_table(
                        id=Ids.RANKS.value,
                        columns=rank_columns(v["ranks"]),
                        data=rank_rows(v["ranks"], job, entry.id),
                        sort_action="native",
                        markdown_options={"link_target": "_self"},  # the timeline in this tab
                    ),
                ],
                className="ss-panel",
            ),
            html.Ol(findings, id="job-findings") if findings else html.P("No straggler.", className="muted"),
            dcc.RadioItems(
                [{"label": f" {v}", "value": k} for k, v in _METRICS.items()],
                job_report.LATE,
                id=Ids.METRIC.value,
                inline=True,
            ),
            dcc.Graph(
                id=Ids.HEATMAP.value,
                figure=heatmap(job, job_report.LATE, entry.id),
                config={"displaylogo": False},
            ),
            html.Div(rank_detail(doc, None), id=Ids.RANK.value),
            *skews,
            *[message(f["error"]) for f in job["failed"]],
        ]
    )


def _show(entry: Entry, claim_id: str | None, rank: int) -> Any:
    """A straggler's "show" link: its costliest late arrival on the straggler's own timeline (the
    collective moved to that rank's clock)."""
    if claim_id is None:
        return None
    return dcc.Link(
        "show on its timeline",
        href=f"{timeline_link(entry.id, rank)}&claim={claim_id}",
        className="ss-show",
    )


#: (row key, header, the job verdict's rank field): durations, each column in one unit
_DURATIONS = (
    ("late", "late (made others wait)", "late_us"),
    ("wall", "wall", "wall_us"),
    ("busy", "device busy", "busy_us"),
    ("waited", "waited in collectives", "waited_us"),
)


def _scales(ranks: list[Doc]) -> dict[str, Scale]:
    return {key: scale(r[field] for r in ranks) for key, _name, field in _DURATIONS}


def rank_columns(ranks: list[Doc]) -> list[dict[str, Any]]:
    """The ranks table's columns: numbers (so they sort as numbers), a unit per column."""
    units = _scales(ranks)
    durations = [
        duration_column(key, name, units[key], "never last" if key == "late" else "—")
        for key, name, _field in _DURATIONS
    ]
    return [
        {"id": "rank", "name": "rank"},
        durations[0],
        {"id": "times last", "name": "times last", "type": "numeric"},
        *durations[1:],
        {"id": "file", "name": "file"},
        {"id": "timeline", "name": "", "presentation": "markdown"},
    ]


def rank_rows(ranks: list[Doc], job: Doc, trace_id: str | None = None) -> list[Doc]:
    """``job_report.job_verdict``'s ranks (the straggler first) as table rows; with ``trace_id``, each with
    a link to its timeline (the only markdown: built from the id and the rank number, never trace text)."""
    units = _scales(ranks)
    paths = {x["rank"]: x["path"] for x in job["ranks"]}
    return [
        {
            "id": r["rank"],  # the table's row id: a click names the rank whatever the sort
            "rank": f"{r['rank']} (straggler)" if r["straggler"] else str(r["rank"]),
            "times last": r["times_last"],
            "file": paths.get(r["rank"], ""),
            "timeline": f"[timeline]({timeline_link(trace_id, int(r['rank']))})" if trace_id else "",
        }
        | {
            key: None if key == "late" and not r[field] else units[key].value(r[field])
            for key, _name, field in _DURATIONS
        }
        for r in ranks
    ]


def on_metric(services: Services, trace_id: str, key: str | None) -> Any:
    try:
        job = services.store.analysis(trace_id).get("job")
    except StoreError as exc:
        return message(str(exc))
    return (
        heatmap(job, key if key in _METRICS else job_report.LATE, check_id(trace_id)) if job else go.Figure()
    )


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
    return rank_detail(doc, rank, trace_id)


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
