"""Plotly figure of a ``stallscope.dashboard.timeline.TimelineSlice``: one horizontal bar trace per colour,
rows top to bottom as extracted, the syncs as markers, the steps as dotted lines, the counters as lines.

What the figure must never say: idle looks like absence (a pale hatched bar, in no colour that a busy kind
uses), a merged item shows how busy it was (its opacity grows with the share of its span its events ran)
and its label tells span, busy time and longest event apart. Single events carry their name inside the bar
when it fits (``uniformtext`` hides the rest) and, in ``customdata``, their partner (launch call <-> device
event) for the page's script to link on a click (``timeline.js``). The HTML report draws the bars itself
from the same data (``stallscope.dashboard.report_timeline``), with the same styles (``bar_style``).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import plotly.graph_objects as go

from stallscope.dashboard import palette
from stallscope.dashboard.counter_rows import add_counters
from stallscope.dashboard.timeline import RowKind, TimelineSlice, fmt_us, plural

ROW_PX = 26
BAR_HALF = 0.39  # half a row's height
MERGED_MIN_OPACITY = 0.3  # a merged item whose events barely ran; 1 when they ran all its span
TEXT_MIN_SHARE = 0.02  # a single event at least this share of the range wide gets its name inside
HIGHLIGHT = "#111827"  # outline of the events a claim names

_LEGEND = {
    "kernel": "kernel",
    "memcpy": "copy",
    "memset": "memset",
    "cpu_op": "host op",
    "annotation": "annotation",
    "launch_call": "runtime call",
    "sync_call": "blocking call",
}


def legend_and_colour(row: RowKind, key: str) -> tuple[str, str]:
    """(legend group, colour) of an item: critical rows use the kind colours, gap rows the cause colours
    (drawn as hatching over the idle fill, ``bar_style``), event rows the event tints; unknown keys fall
    back to each map's grey."""
    if row == RowKind.CRITICAL:
        return f"critical: {key}", palette.kind_color(key)
    if row == RowKind.GAPS:
        return f"idle: {key}", palette.cause_color(key)
    return _LEGEND.get(key, key), palette.event_color(key)


def bar_style(row: RowKind, colour: str) -> dict[str, object]:
    """The bar marker of a legend group: idle is a pale fill hatched in its cause's colour, every busy kind
    a solid fill."""
    if row == RowKind.GAPS:
        return {
            "color": palette.IDLE_FILL,
            "line": {"width": 0},
            "pattern": {"shape": "/", "fgcolor": colour, "fgopacity": 0.55, "size": 6, "solidity": 0.25},
        }
    return {"color": colour, "line": {"width": 0}}


def opacity(count: int, busy_us: float, span_us: float) -> float:
    """A single event is opaque; a merged item as opaque as the share of its span its events ran."""
    if count <= 1 or span_us <= 0:
        return 1.0
    return round(MERGED_MIN_OPACITY + (1 - MERGED_MIN_OPACITY) * min(busy_us / span_us, 1.0), 3)


def clip(text: str, limit: int = 110) -> str:
    """Shorten long text (C++ kernel names) in the middle so that a hover label fits a laptop screen."""
    return text if len(text) <= limit else f"{text[: limit * 2 // 3]}…{text[-(limit // 3) :]}"


def hover(
    row: RowKind, key: str, name: str, site: str, start: float, end: float, origin: float, n: int,
    busy: float, longest: float,
) -> str:  # fmt: skip
    """Hover text; every trace string is HTML-escaped because plotly renders a subset of HTML in labels.
    A merged item says how many events, its span, their busy time and its longest event, each apart."""
    at = f"at {(start - origin) / 1000:.3f} ms"
    if n == 1:
        text = f"<b>{html.escape(clip(name))}</b><br>{fmt_us(end - start)} {at}"
    else:
        span = end - start
        share = f" ({busy / span:.0%})" if span > 0 else ""
        text = (
            f"<b>{n} {html.escape(plural(row, key))}</b> (merged at this zoom)"
            f"<br>span {fmt_us(span)} {at} · busy {fmt_us(busy)}{share}"
            f"<br>longest {fmt_us(longest)}: {html.escape(clip(name))}"
        )
    return text + (f"<br>{html.escape(clip(site))}" if site else "")


def tick(label: str, kind: RowKind, depth: int, deepest: bool) -> str:
    """A row's axis label, escaped: a thread's first operator row and its API row name the thread; its
    deeper operator rows say their depth."""
    if kind == RowKind.API:
        return html.escape(f"{label} · CUDA API")
    if kind == RowKind.OPS and depth > 0:
        return f"↳ depth {depth}{'+' if deepest else ''}"
    return html.escape(label)


def figure(
    sl: TimelineSlice,
    title: str = "",
    origin_us: float | None = None,
    origin_name: str = "range",
    highlights: Sequence[tuple[str, float, float]] = (),
) -> go.Figure:
    """Plotly figure of a slice, x in milliseconds from ``origin_us`` (default: the slice start; the
    explorer passes the window's start, so a zoomed view keeps absolute times), named "ms from the start of
    the {origin_name}" under the title. ``highlights``: (row key, start, end) of the events a claim names,
    outlined. Each bar costs the browser an SVG element: the item budget of ``extract`` is what keeps a
    big range quick to draw."""
    origin = sl.start_us if origin_us is None else origin_us
    ypos = {r.key: i for i, r in enumerate(sl.rows)}
    width = sl.end_us - sl.start_us
    traces: dict[str, dict[str, list[object]]] = {}
    styles: dict[str, dict[str, object]] = {}
    for r in sl.rows:
        it = r.items
        for i, (s, e) in enumerate(zip(it.start_us.tolist(), it.end_us.tolist(), strict=True)):
            key, n = it.color[i], int(it.count[i])
            group, colour = legend_and_colour(r.kind, key)
            styles.setdefault(group, bar_style(r.kind, colour))
            t = traces.setdefault(
                group, {"x": [], "base": [], "y": [], "text": [], "label": [], "opacity": [], "custom": []}
            )
            busy, longest = float(it.busy_us[i]), float(it.longest_us[i])
            t["x"].append(round(max(e - s, 0.0) / 1000, 6))
            t["base"].append(round((s - origin) / 1000, 6))
            t["y"].append(ypos[r.key])
            t["text"].append(hover(r.kind, key, it.name[i], it.site[i], s, e, origin, n, busy, longest))
            named = n == 1 and r.kind != RowKind.GAPS and (e - s) >= TEXT_MIN_SHARE * width
            t["label"].append(html.escape(clip(it.name[i], 60)) if named else "")
            t["opacity"].append(opacity(n, busy, e - s))
            t["custom"].append(_partner(sl, ypos, int(it.event[i]), int(it.partner[i]), n, origin))
    fig = go.Figure()
    for group, t in traces.items():
        fig.add_trace(
            go.Bar(
                name=group,
                orientation="h",
                x=t["x"],
                base=t["base"],
                y=t["y"],
                width=2 * BAR_HALF,
                marker={**styles[group], "opacity": t["opacity"]},
                text=t["label"],
                textposition="inside",
                insidetextanchor="start",
                textfont={"size": 10, "color": palette.TEXT},
                customdata=t["custom"],
                hovertext=t["text"],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    _add_syncs(fig, sl, ypos, origin)
    add_counters(fig, sl.counters, len(sl.rows), origin, sl.end_us)
    _layout(fig, sl, title, origin, f"ms from the start of the {origin_name}")
    fig.update_layout(shapes=list(fig.layout.shapes) + highlight_shapes(highlights, ypos, origin))
    return fig


def _partner(
    sl: TimelineSlice, ypos: dict[str, int], event: int, partner: int, n: int, origin: float
) -> list[float]:
    """customdata of a bar: [event, partner row, partner start ms, partner end ms] (row -1: none)."""
    place = sl.places.get(partner) if n == 1 and partner >= 0 else None
    if place is None or place[0] not in ypos:
        return [event, -1, 0, 0]
    row, s, e = place
    return [event, ypos[row], round((s - origin) / 1000, 6), round((e - origin) / 1000, 6)]


def highlight_shapes(
    marks: Sequence[tuple[str, float, float]], ypos: dict[str, int], origin: float
) -> list[dict[str, object]]:
    """Outlines (layout shapes named "highlight") of the events a claim names, on their rows."""
    return [
        {
            "type": "rect",
            "name": "highlight",
            "xref": "x",
            "yref": "y",
            "x0": round((s - origin) / 1000, 6),
            "x1": round((e - origin) / 1000, 6),
            "y0": ypos[row] - 0.48,
            "y1": ypos[row] + 0.48,
            "line": {"color": HIGHLIGHT, "width": 2},
            "fillcolor": "rgba(17, 24, 39, 0.08)",
        }
        for row, s, e in marks
        if row in ypos
    ]


def _add_syncs(fig: go.Figure, sl: TimelineSlice, ypos: dict[str, int], origin: float) -> None:
    marks = [m for m in sl.syncs if m.row in ypos]
    if not marks:
        return
    text = []
    for m in marks:
        verdict = "avoidable" if m.avoidable else "needed"
        line = f"<b>sync ({html.escape(m.kind)}, {verdict})</b><br>{html.escape(m.api)}"
        line += f"<br>wait {fmt_us(m.wait_us)}, device idle charged {fmt_us(m.bubble_us)}"
        text.append(line + (f"<br>{html.escape(m.site)}" if m.site else ""))
    fig.add_trace(
        go.Scatter(
            name="sync",
            mode="markers",
            x=[(m.start_us - origin) / 1000 for m in marks],
            y=[ypos[m.row] - 0.42 for m in marks],
            marker={
                "symbol": "triangle-down",
                "size": 11,
                "color": [palette.SYNC if m.avoidable else palette.BACKGROUND for m in marks],
                "line": {"color": palette.SYNC, "width": 1.5},
            },
            hovertext=text,
            hovertemplate="%{hovertext}<extra></extra>",
        )
    )


def height(rows: int, traces: int) -> int:
    """Figure height: rows, the heading and axis above, and the legend below (it wraps on a narrow page)."""
    return max(160, 124 + ROW_PX * rows + 22 * -(-traces // 4))


def _layout(fig: go.Figure, sl: TimelineSlice, title: str, origin: float, axis: str) -> None:
    n = len(sl.rows) + len(sl.counters)
    step_lines = [  # one layout update for all (add_vline per step relayouts every time)
        {
            "type": "line",
            "name": "step",
            "xref": "x",
            "yref": "paper",
            "x0": (s - origin) / 1000,
            "x1": (s - origin) / 1000,
            "y0": 0,
            "y1": 1,
            "line": {"color": palette.MUTED, "width": 1, "dash": "dot"},
        }
        for _name, s, _e in sl.steps
        if s > origin
    ]
    ticks = [tick(r.label, r.kind, r.depth, r.deepest) for r in sl.rows]
    ticks += [html.escape(clip(c.label, 60)) for c in sl.counters]
    fig.update_layout(layout(title, axis, height(n, len(fig.data))))
    fig.update_layout(
        shapes=step_lines,
        xaxis={"range": [(sl.start_us - origin) / 1000, (sl.end_us - origin) / 1000]},
        yaxis={"tickvals": list(range(n)), "ticktext": ticks, "range": [n - 0.5, -0.5]},
    )


def layout(title: str, axis: str, fig_height: int) -> dict[str, object]:
    """The timeline's layout without its rows: a one-line heading (the title, then the axis' unit; an axis
    title on the top side would overlap the tick labels, and plotly cuts the first line of a two-line
    title anchored at the top in half), fonts, legend below. Whether short events are merged is said by
    the page's status line, not the heading."""
    heading = f"{html.escape(title)} · " if title else ""
    heading += f'<span style="font-size:11px">{html.escape(axis)}</span>'
    return {
        "title": {
            "text": heading,
            "font": {"size": 14},
            "x": 0,
            "xanchor": "left",
            "y": 1,
            "yanchor": "top",
            "pad": {"t": 6},
        },
        "barmode": "overlay",
        "hovermode": "closest",
        "height": fig_height,
        "margin": {"l": 10, "r": 10, "t": 58, "b": 40},
        "font": {"family": palette.FONT_FAMILY, "size": 12, "color": palette.TEXT},
        "plot_bgcolor": palette.BACKGROUND,
        "paper_bgcolor": palette.BACKGROUND,
        "hoverlabel": {"font": {"family": palette.MONO_FAMILY, "size": 11}, "align": "left"},
        "legend": {"orientation": "h", "y": -0.02, "yanchor": "top", "x": 0, "font": {"size": 11}},
        "uniformtext": {"mode": "hide", "minsize": 8},
        "dragmode": "zoom",
        "xaxis": {"gridcolor": palette.GRID, "zeroline": False, "side": "top", "tickformat": ",~r"},
        "yaxis": {"fixedrange": True, "automargin": True, "gridcolor": palette.GRID},
    }
