"""Summary charts of an analysis: idle by cause, critical path by kind, per-step stacked bars and the
pipeline model (serial vs pipelined). Shared by the HTML report and the Dash dashboard.

Every function takes the analysis JSON (``stallscope.analyzer.document.analysis.to_json``, schema ``stallscope.analysis/3``), so
a chart draws exactly the numbers the JSON holds and works on an uploaded analysis as well as on a live
one. Colours come from ``stallscope.dashboard.palette``. Trace text (step names) is HTML-escaped before plotly sees
it: plotly renders a subset of HTML in labels.
"""

from __future__ import annotations

import html
from typing import Any

import plotly.graph_objects as go

from stallscope.dashboard import palette
from stallscope.display.units import duration

Doc = dict[str, Any]


def _ms(us: float) -> float:
    return us / 1000


def _base_layout(fig: go.Figure, title: str, height: int) -> go.Figure:
    fig.update_layout(
        title={"text": title, "font": {"size": 14}, "x": 0, "xanchor": "left"},
        height=height,
        margin={"l": 10, "r": 10, "t": 36, "b": 36},
        font={"family": palette.FONT_FAMILY, "size": 12, "color": palette.TEXT},
        plot_bgcolor=palette.BACKGROUND,
        paper_bgcolor=palette.BACKGROUND,
        hoverlabel={"font": {"family": palette.FONT_FAMILY, "size": 12}},
    )
    fig.update_xaxes(gridcolor=palette.GRID, zeroline=False)
    fig.update_yaxes(gridcolor=palette.GRID, zeroline=False, automargin=True)
    return fig


def _share_bars(
    values: dict[str, float], order: tuple[str, ...], color: dict[str, str], total: float
) -> go.Bar:
    names = [k for k in order if values.get(k, 0.0) > 0] or list(order[:1])
    ms = [_ms(values.get(k, 0.0)) for k in names]
    share = [values.get(k, 0.0) / total if total > 0 else 0.0 for k in names]
    return go.Bar(
        orientation="h",
        x=ms,
        y=names,
        marker={"color": [color[k] for k in names]},
        # the label reads as every view writes a time (stallscope.display.units); the axis is in ms
        text=[f"{duration(values.get(k, 0.0))} ({s:.0%})" for k, s in zip(names, share, strict=True)],
        textposition="auto",
        cliponaxis=False,
        hovertemplate="%{y}: %{x:,.3f} ms<extra></extra>",
    )


def _empty(title: str) -> go.Figure:
    """A titled figure without data (a chart that has nothing to show says so instead of empty axes)."""
    fig = go.Figure()
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _base_layout(fig, title, 80)


def idle_by_cause(doc: Doc) -> go.Figure:
    """Main device's gap time per cause (``idle_by_cause_us``), largest cause on top."""
    values: dict[str, float] = doc.get("idle_by_cause_us") or {}
    total = sum(values.values())
    if total <= 0:
        why = "no device in this trace" if not doc.get("devices") else "no idle gap of the minimum length"
        return _empty(f"Device idle by cause: {why}")
    order = tuple(sorted(palette.CAUSES, key=lambda c: -values.get(c, 0.0)))
    fig = go.Figure(_share_bars(values, order, dict(palette.CAUSE_COLORS), total))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title={"text": "ms of device idle (gaps ≥ min gap)", "font": {"size": 11}})
    return _base_layout(fig, "Device idle by cause", 60 + 34 * max(1, sum(v > 0 for v in values.values())))


def critical_by_kind(doc: Doc) -> go.Figure:
    """The critical path's length per segment kind (``critical_path.breakdown_us``), largest on top."""
    cp = doc.get("critical_path") or {}
    values: dict[str, float] = cp.get("breakdown_us") or {}
    total = float(cp.get("length_us") or sum(values.values()))
    order = tuple(sorted(palette.KINDS, key=lambda k: -values.get(k, 0.0)))
    fig = go.Figure(_share_bars(values, order, dict(palette.KIND_COLORS), total))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title={"text": "ms of the critical path", "font": {"size": 11}})
    return _base_layout(fig, "Critical path by kind", 60 + 34 * max(1, sum(v > 0 for v in values.values())))


def steps_stacked(doc: Doc) -> go.Figure | None:
    """Where each step's time went: device busy and device idle stacked to the step's wall time, with the
    host's time blocked in syncs as a marker. None without steps."""
    steps: list[Doc] = doc.get("steps") or []
    if not steps:
        return None
    names = [html.escape(str(s["name"])) for s in steps]
    x = list(range(1, len(steps) + 1))
    fig = go.Figure()
    for key, label, colour in (
        ("device_busy_us", "device busy", palette.DEVICE),
        ("device_idle_us", "device idle", palette.IDLE),
    ):
        fig.add_trace(
            go.Bar(
                name=label,
                x=x,
                y=[_ms(s[key]) for s in steps],
                marker={"color": colour},
                customdata=names,
                hovertemplate="%{customdata}<br>" + label + ": %{y:,.3f} ms<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            name="host blocked in syncs",
            x=x,
            y=[_ms(s["host_sync_wait_us"]) for s in steps],
            mode="markers",
            marker={"symbol": "diamond", "size": 9, "color": palette.SYNC},
            customdata=names,
            hovertemplate="%{customdata}<br>host blocked in syncs: %{y:,.3f} ms<extra></extra>",
        )
    )
    fig.update_layout(barmode="stack", bargap=0.25, legend={"orientation": "h", "y": -0.2})
    if len(steps) <= 16:
        fig.update_xaxes(tickvals=x, ticktext=names)
    else:  # names would overlap: number the steps, names are in the hover
        fig.update_xaxes(title={"text": "step, in trace order", "font": {"size": 11}})
    fig.update_yaxes(title={"text": "ms", "font": {"size": 11}})
    return _base_layout(fig, "Where each step's time went", 300)


def pipeline(doc: Doc) -> go.Figure | None:
    """The two-stage pipeline model drawn as two schedules of n batches: serial (prep, then compute, then
    the next prep) and pipelined (the host preps batch i+1 while the device computes batch i). The drawn
    ends are ``serial_us`` and ``pipelined_us``. None when the analysis has no pipeline model."""
    p: Doc | None = doc.get("pipeline")
    if not p or int(p.get("batches") or 0) < 1:
        return None
    prep, comp, n = float(p["host_prep_us"]), float(p["device_us"]), int(p["batches"])
    shown = min(n, 12)  # a long run would only repeat the pattern
    rows = _schedules(prep, comp, shown)
    fig = go.Figure()
    for stage, colour in (("host", palette.HOST), ("device", palette.DEVICE)):
        xs, bases, ys, text = [], [], [], []
        for row, bars in rows.items():
            if not row.endswith(stage):
                continue
            for start, dur, i in bars:
                xs.append(_ms(dur))
                bases.append(_ms(start))
                ys.append(row)
                text.append(f"batch {i + 1}")
        fig.add_trace(
            go.Bar(
                name="host prep (P)" if stage == "host" else "device compute (G)",
                orientation="h",
                x=xs,
                base=bases,
                y=ys,
                text=text,
                textposition="inside",
                insidetextanchor="middle",
                marker={"color": colour, "line": {"color": palette.BACKGROUND, "width": 1}},
                hovertemplate="%{y}, %{text}: starts at %{base:,.3f} ms, %{x:,.3f} ms long<extra></extra>",
            )
        )
    ends = (
        ("serial", float(p["serial_us"]), "serial · device"),
        ("pipelined", float(p["pipelined_us"]), "pipelined · device"),
    )
    for label, end, row in ends:
        if shown == n:
            fig.add_annotation(
                x=_ms(end),
                y=row,
                text=f"{label} {duration(end)}",
                showarrow=False,
                xanchor="left",
                xshift=6,
                font={"size": 11, "color": palette.MUTED},
            )
    more = f" (first {shown} of {n} batches)" if shown < n else ""
    fig.update_layout(barmode="overlay", legend={"orientation": "h", "y": -0.25})
    fig.update_yaxes(categoryorder="array", categoryarray=list(rows)[::-1])
    fig.update_xaxes(title={"text": "ms", "font": {"size": 11}})
    return _base_layout(fig, f"Pipeline model: serial vs pipelined{more}", 260)


def _schedules(prep: float, comp: float, n: int) -> dict[str, list[tuple[float, float, int]]]:
    """(start, duration, batch) of every stage of n batches: serial (prep, compute, next prep...) and
    pipelined (the host preps back to back; the device computes batch i once it is prepped and batch
    i-1 is done), which ends at P + G + (n-1) max(P, G)."""
    rows: dict[str, list[tuple[float, float, int]]] = {
        "serial · host": [],
        "serial · device": [],
        "pipelined · host": [],
        "pipelined · device": [],
    }
    device_end = 0.0
    for i in range(n):
        rows["serial · host"].append((i * (prep + comp), prep, i))
        rows["serial · device"].append((i * (prep + comp) + prep, comp, i))
        rows["pipelined · host"].append((i * prep, prep, i))
        begin = max((i + 1) * prep, device_end)
        rows["pipelined · device"].append((begin, comp, i))
        device_end = begin + comp
    return rows
