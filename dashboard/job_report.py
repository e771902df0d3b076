"""The job part of the HTML report: the job's verdict (who held the job back, what it cost), a rank x step
heatmap (lateness first: the straggler is the darkest cell; then wall, device idle, collective wait) and a
skew chart per collective, read from the analysis JSON's ``job`` key
(``stallscope.analyzer.document.job.job_json``). The dashboard's job page shows the same.

The heatmaps are HTML tables whose cells carry a computed background colour (no plotly trace type beyond
the vendored "basic" bundle); the skew charts are plotly bars. Trace text (step names, call sites, paths)
reaches the page only through Jinja's autoescape and ``|tojson``; inside figures it is HTML-escaped,
because plotly renders a subset of HTML in labels and hovers.
"""

from __future__ import annotations

import html
from typing import Any

import plotly.graph_objects as go

from stallscope.dashboard import headline, palette
from stallscope.display.units import duration as ms
from stallscope.display.units import saving, share

Doc = dict[str, Any]
MAX_SKEW_CHARTS = 6  # collectives drawn (the costliest by waiting)
MAX_BARS = 400  # instances per skew chart (the costliest when there are more)
#: the heatmap's metrics, the default first: lateness colours who made the others wait (the straggler),
#: where "waiting in collectives" colours the ranks that waited for it
LATE = "late_us"
METRICS = (
    (LATE, "arrived late at collectives (made the others wait)", palette.SYNC),
    ("wall_us", "step wall", palette.HOST),
    ("device_idle_us", "device idle", palette.UNKNOWN),
    ("collective_wait_us", "waiting in collectives (waited for others)", palette.UNKNOWN),
)


straggler = headline.straggler  # the rank that made the job wait most


def instance_sentence(i: Doc) -> str:
    """One collective's story in words, from the JSON (the analysis' own ``InstanceResult.sentence``):
    "rank 7 reached alltoall #0 4.67 ms late, having begun 4.52 ms after the others"."""
    why = ""
    if i.get("cause"):
        why = f", {ms(i['cause_us'])} of it in {i['cause']}" + (f" at {i['site']}" if i.get("site") else "")
    elif i["began_late_us"] >= 0.25 * i["late_us"] > 0:
        why = f", having begun {ms(i['began_late_us'])} after the others"
    label = f"{i['name']} #{i['number']}" + (f" (group {i['group']})" if i.get("group") else "")
    return f"rank {i['straggler']} reached {label} {ms(i['late_us'])} late{why}"


def job_verdict(job: Doc, per_rank: list[Doc]) -> Doc:
    """What a job report and the dashboard lead with: who held the job back and what that cost, and
    every rank's wall, device busy and waiting (``per_rank`` gives busy: the rank's own summary)."""
    rank = straggler(job)
    wall = float(job["wall_us"])
    w = job["whatif"][0] if job["whatif"] else None
    worst = job["collectives"]["worst"][0] if job["collectives"]["worst"] else None
    n = len(job["ranks"])
    if rank is None:
        sentence = f"No rank held the job back: the {n} ranks reached their collectives together."
    else:
        mine = next(s for s in job["stragglers"] if s["rank"] == rank)
        sentence = (
            f"Rank {rank} held the job back: it reached {mine['times_last']} collective"
            f"{'s' if mine['times_last'] != 1 else ''} last, {ms(mine['late_us'])} late in all"
        )
        if worst is not None and worst["straggler"] == rank:
            sentence += f"; the worst: {instance_sentence(worst)}"
        sentence += "."
    if w is not None and w["saving_us"] > 0:
        sentence += (
            f" Without stragglers the job would take {ms(w['predicted_wall_us'])} instead of {ms(wall)}:"
            f" it {saving(w['saving_us'])} ({share(w['saving_us'] / wall if wall > 0 else 0.0)})."
        )
    busy = {r["rank"]: (r.get("summary") or {}).get("device_busy_us") for r in per_rank}
    ranks = [
        {
            "rank": r["rank"],
            "straggler": r["rank"] == rank,
            "wall_us": r["wall_us"],
            "busy_us": busy.get(r["rank"]),
            "waited_us": r["collective_wait_us"],
            "late_us": r["late_us"],
            "times_last": r["times_last"],
        }
        for r in job["ranks"]
    ]
    order = sorted(ranks, key=lambda r: (-r["late_us"], r["rank"]))  # who held the job back first
    return {
        "sentence": sentence,
        "straggler": rank,
        "wall_us": wall,
        "saving_us": w["saving_us"] if w else 0.0,
        "predicted_wall_us": w["predicted_wall_us"] if w else wall,
        "waited_us": job["collectives"]["wait_us"],
        "ranks": order,
    }


def job_context(job: Doc) -> Doc:
    """What the template's job section shows, and the skew figures (name -> figure JSON)."""
    return {
        "heatmaps": [heatmap(job, key) for key, _, _ in METRICS],
        "straggler": straggler(job),
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
            f"#{i['number']}: rank {i['straggler']} last, {ms(i['late_us'])} late"
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
    numbers = [int(i["number"]) for i in items]
    span = max(numbers, default=0) - min(numbers, default=0)
    fig.update_xaxes(  # calls are whole numbers: ticks on them, never at -0.5 or 0.5
        title={"text": "call (sequence number or position)", "font": {"size": 11}},
        gridcolor=palette.GRID,
        tickmode="linear",
        tick0=min(numbers, default=0),
        dtick=max(1, -(-span // 12)),
        tickformat="d",
    )
    fig.update_yaxes(
        title={"text": "ms, last minus first arrival", "font": {"size": 11}}, gridcolor=palette.GRID
    )
    return fig


def _late_by_cell(job: Doc) -> dict[tuple[int, str], float]:
    """Each (straggler rank, step)'s lateness summed over the collectives it reached last."""
    out: dict[tuple[int, str], float] = {}
    for i in job["collectives"]["instances"]:
        if i.get("step") is not None and i["late_us"] > 0:
            key = (int(i["straggler"]), str(i["step"]))
            out[key] = out.get(key, 0.0) + float(i["late_us"])
    return out


def heatmap(job: Doc, key: str) -> Doc:
    """One metric of the rank x step grid: steps, rows of cells (value and shade from 0, white, to the
    largest value, the metric's colour) and the largest value. ``late_us`` is each rank's lateness at the
    collectives it reached last in that step (0 for a rank that was never last)."""
    label, colour = next((lbl, c) for k, lbl, c in METRICS if k == key)
    cells = job["heatmap"]
    steps = list(dict.fromkeys(c["step"] for c in cells))
    if key == LATE:
        late = _late_by_cell(job)
        values = {(c["rank"], c["step"]): late.get((c["rank"], c["step"]), 0.0) for c in cells}
    else:
        values = {(c["rank"], c["step"]): float(c[key]) for c in cells}
    top = max(values.values(), default=0.0)
    rows = []
    for rank in sorted({c["rank"] for c in cells}):
        row = []
        for step in steps:
            v = values.get((rank, step))
            shade = _shade(colour, v / top if v is not None and top > 0 else 0.0)
            # a rank that was never last in the step: "—", not "0.0 µs" of lateness
            text = "" if v is None else ("—" if key == LATE and v == 0 else ms(v))
            row.append({"us": v, "background": shade, "text": text})
        rows.append({"rank": rank, "cells": row})
    return {"key": key, "label": label, "steps": steps, "rows": rows, "max_us": top}


def _shade(colour: str, t: float) -> str:
    """``colour`` blended with white: 0 -> white, 1 -> the colour."""
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    mix = [round(255 + (c - 255) * max(0.0, min(t, 1.0))) for c in (r, g, b)]
    return "#{:02x}{:02x}{:02x}".format(*mix)
