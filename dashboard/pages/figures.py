"""The dashboard's own figures (what-if and compare); the timeline and the summary charts come from
``stallscope.dashboard.timeline`` and ``stallscope.dashboard.charts``, shared with the HTML report. Colours from the palette;
trace text HTML-escaped before plotly sees it (plotly renders a subset of HTML in labels)."""

from __future__ import annotations

import html
import time
from typing import Any

import numpy as np
import plotly.graph_objects as go

from stallscope.analyzer.analysis import Analysis
from stallscope.analyzer.core.model import LaneKind
from stallscope.analyzer.core.names import EventKind
from stallscope.analyzer.passes.replay import Replay
from stallscope.dashboard import palette
from stallscope.dashboard.runs import Run
from stallscope.dashboard.timeline import Groups, RowKind, fmt_us, lod, plural
from stallscope.dashboard.timeline_figure import opacity

Doc = dict[str, Any]
_ROWS_MAX_ITEMS = 600


def _base(fig: go.Figure, title: str, height: int) -> go.Figure:
    fig.update_layout(
        title={"text": html.escape(title), "font": {"size": 14}, "x": 0, "xanchor": "left"},
        height=height,
        margin={"l": 10, "r": 10, "t": 40, "b": 40},
        font={"family": palette.FONT_FAMILY, "size": 12, "color": palette.TEXT},
        plot_bgcolor=palette.BACKGROUND,
        paper_bgcolor=palette.BACKGROUND,
    )
    fig.update_xaxes(gridcolor=palette.GRID, zeroline=False)
    fig.update_yaxes(gridcolor=palette.GRID, zeroline=False, automargin=True)
    return fig


def whatif_bars(doc: Doc, scenarios: list[str], labels: dict[str, str]) -> go.Figure:
    """Predicted wall time of the chosen scenarios next to the recorded one (ms)."""
    w = {r["scenario"]: r for r in doc["whatif"]}
    recorded = float(doc["summary"]["wall_us"])
    base = recorded + 0.0
    if w:
        first = next(iter(w.values()))
        base = first["predicted_wall_us"] + first["saving_us"]  # the unchanged replay
    names = ["as recorded"] + [s for s in scenarios if s in w]
    values = [base / 1000] + [w[s]["predicted_wall_us"] / 1000 for s in names[1:]]
    colours = [palette.MUTED] + [palette.DEVICE for _ in names[1:]]
    text = [f"{v:,.2f} ms" for v in values]
    shown = [labels.get(n, n) for n in names]
    fig = go.Figure(go.Bar(x=values, y=shown, orientation="h", marker={"color": colours}, text=text))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title={"text": "predicted wall time (ms)"})
    return _base(fig, "What-if: predicted time per scenario", 80 + 40 * len(names))


def retimed_figure(a: Analysis, before: Replay, after: Replay, label: str) -> go.Figure:
    """Each device stream twice, as recorded and as re-timed by the replay (``after``), over the window;
    short activities merged to screen resolution with the timeline's own level-of-detail merge."""
    g = a.graph
    assert g is not None
    start, end = a.window.start_us, max(a.window.end_us, float(after.end_us), float(before.end_us))
    kinds = a.model.events.kind[g.act_event]
    fig = go.Figure()
    labels: list[str] = []
    for lane in a.model.lanes:
        if lane.kind != LaneKind.STREAM:
            continue
        on = np.flatnonzero(g.act_lane == lane.id)
        if not len(on):
            continue
        for which, rp in (("recorded", before), (label, after)):
            s, e = rp.act_start[on], rp.act_end[on]
            inside = (e > start) & (s < end)
            keys = [EventKind(int(k)).name.lower() for k in kinds[on][inside]]
            groups = lod(s[inside], e[inside], keys, start, end, _ROWS_MAX_ITEMS)
            y = len(labels)
            labels.append(f"{lane.label} · {which}")
            colours = [palette.event_color(keys[int(r)]) for r in groups.rep]
            fig.add_trace(
                go.Bar(
                    orientation="h",
                    base=(groups.start - start) / 1000,
                    x=(groups.end - groups.start) / 1000,
                    y=[y] * len(groups.start),
                    marker={"color": colours, "line": {"width": 0}, "opacity": _opacities(groups)},
                    showlegend=False,
                    hovertext=_hovers(groups, keys, start),
                    hovertemplate=f"{html.escape(labels[-1])}<br>%{{hovertext}}<extra></extra>",
                )
            )
    for x, text in ((before.end_us, "recorded end"), (after.end_us, f"{label} end")):
        fig.add_vline(x=(x - start) / 1000, line={"color": palette.SYNC, "dash": "dot"}, annotation_text=text)
    fig.update_layout(barmode="overlay")
    fig.update_yaxes(
        tickvals=list(range(len(labels))), ticktext=[html.escape(t) for t in labels], autorange="reversed"
    )
    fig.update_xaxes(title={"text": "ms from the window start"})
    return _base(fig, f"Device streams, recorded and re-timed ({label})", 120 + 28 * max(1, len(labels)))


def _opacities(g: Groups) -> list[float]:
    """As the timeline: a merged block as opaque as the share of its span its activities ran."""
    return [
        opacity(int(n), float(b), float(e - s))
        for n, b, s, e in zip(g.count, g.busy, g.start, g.end, strict=True)
    ]


def _hovers(g: Groups, keys: list[str], origin: float) -> list[str]:
    """Start and length; a merged block's count, span, busy time and longest activity, each apart."""
    out = []
    for i in range(len(g.start)):
        s, e, n = float(g.start[i]), float(g.end[i]), int(g.count[i])
        text = f"{(s - origin) / 1000:.3f} ms, {fmt_us(e - s)} long"
        if n > 1:
            kind = html.escape(plural(RowKind.STREAM, keys[int(g.rep[i])]))
            text = (
                f"{n} {kind} at {(s - origin) / 1000:.3f} ms: span {fmt_us(e - s)}, busy {fmt_us(float(g.busy[i]))},"
                f" longest {fmt_us(float(g.longest[i]))}"
            )
        out.append(text)
    return out


def step_distributions(a: Doc, b: Doc, names: tuple[str, str]) -> go.Figure:
    """Per-step wall time, device busy and host sync wait of two traces as box plots (ms)."""
    fig = go.Figure()
    for doc, name, colour in ((a, names[0], palette.MUTED), (b, names[1], palette.DEVICE)):
        for key, label in (
            ("dur_us", "step wall"),
            ("device_busy_us", "device busy"),
            ("host_sync_wait_us", "sync wait"),
        ):
            values = [s[key] / 1000 for s in doc["steps"] if s[key] is not None]  # null: CPU only
            if not values:
                continue
            fig.add_trace(
                go.Box(
                    y=values,
                    x=[label] * len(values),
                    name=html.escape(name),
                    legendgroup=name,
                    showlegend=key == "dur_us",
                    marker={"color": colour},
                    boxpoints="outliers",
                )
            )
    fig.update_layout(boxmode="group")
    fig.update_yaxes(title={"text": "ms per step"})
    return _base(fig, "Per-step distributions", 360)


def run_history(run: Run) -> go.Figure:
    """A run's step time (ms, left axis) and device utilization (%, right axis) at each capture's
    wall-clock time; a flagged capture's point is a red diamond."""
    cs = run.captures
    x = [time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(c.when)) for c in cs]
    hover = [f"capture {c.index}" if c.index is not None else "capture" for c in cs]
    flagged = [c.flag is not None for c in cs]
    step = [None if c.step_us is None else c.step_us / 1000 for c in cs]
    util = [None if c.utilization is None else c.utilization * 100 for c in cs]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=x,
            y=step,
            name="step time (ms)",
            mode="lines+markers",
            line={"color": palette.HOST},
            marker={
                "color": [palette.SYNC if f else palette.HOST for f in flagged],
                "symbol": ["diamond" if f else "circle" for f in flagged],
                "size": [13 if f else 8 for f in flagged],
            },
            hovertext=hover,
            hovertemplate="%{hovertext}<br>%{x}<br>step time %{y:,.2f} ms<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=util,
            visible=any(u is not None for u in util),  # a CPU-only run has none
            name="GPU utilization (%)",
            mode="lines+markers",
            yaxis="y2",
            line={"color": palette.DEVICE, "dash": "dot"},
            hovertext=hover,
            hovertemplate="%{hovertext}<br>%{x}<br>GPU utilization %{y:.1f}%<extra></extra>",
        )
    )
    fig.update_layout(
        yaxis={"title": {"text": "step time (ms)"}, "rangemode": "tozero"},
        yaxis2={
            "title": {"text": "GPU utilization (%)"},
            "overlaying": "y",
            "side": "right",
            "range": [0, 105],
            "tickvals": [0, 25, 50, 75, 100],
        },
        xaxis={"title": {"text": "capture time (UTC)"}, "type": "date"},
        legend={"orientation": "h", "y": -0.25},
    )
    return _base(fig, f"Run {run.run_id}: step time and GPU utilization over time", 360)
