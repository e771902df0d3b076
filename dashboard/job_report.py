"""The job part of the HTML report: a rank x step heatmap (wall, device idle, collective wait) and a skew
chart per collective, read from the analysis JSON's ``job`` key (``stallscope.analyzer.document.job.job_json``).

The heatmaps are HTML tables whose cells carry a computed background colour (no plotly trace type beyond
the vendored "basic" bundle); the skew charts are plotly bars. Trace text (step names, call sites, paths)
reaches the page only through Jinja's autoescape and ``|tojson``; inside figures it is HTML-escaped,
because plotly renders a subset of HTML in labels and hovers.
"""

from __future__ import annotations

import html
from typing import Any

import plotly.graph_objects as go

from stallscope.dashboard import palette

Doc = dict[str, Any]
MAX_SKEW_CHARTS = 6  # collectives drawn (the costliest by waiting)
MAX_BARS = 400  # instances per skew chart (the costliest when there are more)
METRICS = (
    ("wall_us", "step wall", palette.HOST),
    ("device_idle_us", "device idle", palette.UNKNOWN),
    ("collective_wait_us", "waiting in collectives", palette.SYNC),
)


def job_context(job: Doc) -> Doc:
    """What the template's job section shows, and the skew figures (name -> figure JSON)."""
    return {
        "heatmaps": [heatmap(job, key) for key, _, _ in METRICS],
        "findings": [f | {"claim": straggler_claim(job, f["rank"])} for f in job["findings"]],
        "worst": [i | {"claim": f"collective-{k}"} for k, i in enumerate(job["collectives"]["worst"][:5])],
        "whatif": job["whatif"],
        "ranks": job["ranks"],
        "failed": job["failed"],
        "notes": job["notes"],
        "wall_us": job["wall_us"],
        "wait_us": job["collectives"]["wait_us"],
        "matched": job["collectives"]["matched"],
        "residual": job["clock_residual_us"],
        "offsets": job["clock_offsets_us"],
    }


def straggler_claim(job: Doc, rank: int) -> str | None:
    """The claim (``stallscope.dashboard.claims``) of a straggler finding: the costliest collective that
    ``rank`` was last at, or None."""
    worst = job["collectives"]["worst"]
    return next((f"collective-{k}" for k, i in enumerate(worst) if i["straggler"] == rank), None)


def skew_figures(job: Doc) -> dict[str, Any]:
    """One bar chart per collective (group and name): each instance's skew, coloured by the straggler's
    cause, the straggler and its site in the hover."""
    groups: dict[tuple[str, str], list[Doc]] = {}
    for inst in job["collectives"]["instances"]:
        groups.setdefault((inst["group"], inst["name"]), []).append(inst)
    costly = sorted(groups.items(), key=lambda kv: -sum(i["wait_us"] for i in kv[1]))[:MAX_SKEW_CHARTS]
    return {
        f"skew-{k}": _skew(group, name, items).to_plotly_json()
        for k, ((group, name), items) in enumerate(costly)
    }


def _skew(group: str, name: str, items: list[Doc]) -> go.Figure:
    if len(items) > MAX_BARS:
        items = sorted(sorted(items, key=lambda i: -i["wait_us"])[:MAX_BARS], key=lambda i: i["index"])
    causes = [i["cause"] or "unknown" for i in items]
    hover = [
        html.escape(
            f"#{i['number']}: rank {i['straggler']} last, {i['late_us'] / 1000:.3f} ms late"
            + (
                f", {i['cause']} at {i['site']}"
                if i["cause"] and i["site"]
                else (f", {i['cause']}" if i["cause"] else "")
            )
        )
        for i in items
    ]
    fig = go.Figure(
        go.Bar(
            x=[i["number"] for i in items],
            y=[i["skew_us"] / 1000 for i in items],
            marker={"color": [palette.KIND_COLORS.get(c, palette.UNKNOWN) for c in causes]},
            customdata=hover,
            hovertemplate="%{customdata}<br>skew %{y:,.3f} ms<extra></extra>",
        )
    )
    title = html.escape(f"Skew per call: {name}" + (f" (group {group})" if group else ""))
    fig.update_layout(
        title={"text": title, "font": {"size": 14}, "x": 0, "xanchor": "left"},
        height=260,
        margin={"l": 10, "r": 10, "t": 36, "b": 36},
        font={"family": palette.FONT_FAMILY, "size": 12, "color": palette.TEXT},
        plot_bgcolor=palette.BACKGROUND,
        paper_bgcolor=palette.BACKGROUND,
        bargap=0.2,
    )
    fig.update_xaxes(
        title={"text": "call (sequence number or position)", "font": {"size": 11}}, gridcolor=palette.GRID
    )
    fig.update_yaxes(
        title={"text": "ms, last minus first arrival", "font": {"size": 11}}, gridcolor=palette.GRID
    )
    return fig


def heatmap(job: Doc, key: str) -> Doc:
    """One metric of the rank x step grid: steps, rows of cells (value and shade) and the largest value."""
    label, colour = next((lbl, c) for k, lbl, c in METRICS if k == key)
    cells = job["heatmap"]
    steps = list(dict.fromkeys(c["step"] for c in cells))
    values = {(c["rank"], c["step"]): float(c[key]) for c in cells}
    top = max(values.values(), default=0.0)
    rows = []
    for rank in sorted({c["rank"] for c in cells}):
        row = []
        for step in steps:
            v = values.get((rank, step))
            row.append({"us": v, "background": _shade(colour, v / top if v is not None and top > 0 else 0.0)})
        rows.append({"rank": rank, "cells": row})
    return {"key": key, "label": label, "steps": steps, "rows": rows, "max_us": top}


def _shade(colour: str, t: float) -> str:
    """``colour`` blended with white: 0 -> white, 1 -> the colour."""
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    mix = [round(255 + (c - 255) * max(0.0, min(t, 1.0))) for c in (r, g, b)]
    return "#{:02x}{:02x}{:02x}".format(*mix)
