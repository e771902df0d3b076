"""Timeline of a time range: host threads and device streams as rows, the critical path, idle gaps by
cause and syncs, with level-of-detail merging so that a row never holds more items than a screen shows.

``extract`` is a pure function of the trace model, its ``Analysis`` and a range; the HTML report calls it
for a step, and the dashboard calls it again on every zoom (server-side windowing). ``figure`` draws a
``TimelineSlice`` with plotly. Nothing here re-derives analysis: the critical path, the gaps and their
causes, the syncs and which calls blocked all come from the ``Analysis``; the model only supplies the
events to draw.

Level of detail: a row with at most ``max_items_per_lane`` events is drawn as it is. Past that, the range
is cut into ``max_items_per_lane`` bins. An event at least one bin long is kept
as it is; shorter events of the same colour that start in the same bin become one merged item (its
extent, its count, the name of its longest event), and consecutive items of one colour closer than
half a bin join. A row therefore holds at most about twice ``max_items_per_lane`` items per colour,
however many events the range has.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from enum import Enum

import numpy as np
import numpy.typing as npt
import plotly.graph_objects as go

from stallscope.analyzer.analysis import Analysis
from stallscope.analyzer.core.arrays import distinct
from stallscope.analyzer.core.model import F64, I64, LaneKind, Mask, TraceModel, of_kind
from stallscope.analyzer.core.names import ACTIVITY_KINDS, EventKind
from stallscope.analyzer.core.sites import call_site
from stallscope.analyzer.graph.dependency import Blocking
from stallscope.analyzer.passes.critical import Kind
from stallscope.dashboard import palette
from stallscope.dashboard.counter_rows import CounterRow, add_counters, counter_rows

DEFAULT_MAX_ITEMS = 400  # per row: one item per ~3 pixels of a laptop-width plot
_MAX_ANCESTORS = 512  # the same bound the call-site walk uses


class RowKind(str, Enum):
    CRITICAL = "critical"  # the critical path, coloured by segment kind
    OPS = "ops"  # a host thread's outermost operators and annotations
    API = "api"  # a host thread's CUDA/HIP runtime and driver calls
    STREAM = "stream"  # a device stream's kernels, copies and memsets
    GAPS = "gaps"  # a device's idle gaps, coloured by cause


@dataclass(frozen=True)
class Items:
    """The drawable items of one row, in start order. ``count`` is 1 for a single event; a merged item
    carries the number of events it stands for and the name and call site of its longest one."""

    start_us: F64
    end_us: F64
    count: I64
    color: tuple[str, ...]  # palette key: an event kind, a gap cause or a critical-path kind
    name: tuple[str, ...]  # raw trace text: escape before display
    site: tuple[str, ...]  # "file:line in function", or ""

    def __len__(self) -> int:
        return len(self.start_us)


@dataclass(frozen=True)
class Row:
    key: str  # unique within a slice, stable across slices of one trace ("ops:3", "gaps:0")
    label: str  # raw trace text (thread names): escape before display
    kind: RowKind
    lane: int  # model lane, or the device id for GAPS, -1 for CRITICAL
    events: int  # events of the range before merging
    items: Items


@dataclass(frozen=True)
class SyncMark:
    row: str  # key of the API row of the thread that blocked
    start_us: float
    wait_us: float
    bubble_us: float
    kind: str
    api: str
    site: str
    avoidable: bool


@dataclass(frozen=True)
class TimelineSlice:
    start_us: float
    end_us: float
    rows: tuple[Row, ...]
    syncs: tuple[SyncMark, ...]
    steps: tuple[tuple[str, float, float], ...]  # (name, start, end) of the steps overlapping the range
    merged: bool  # whether any row was merged or sampled (the figure says so)
    counters: tuple[CounterRow, ...] = ()  # counter series drawn below the rows

    @property
    def items(self) -> int:
        return sum(len(r.items) for r in self.rows)


def extract(
    model: TraceModel,
    analysis: Analysis,
    start_us: float,
    end_us: float,
    max_items_per_lane: int = DEFAULT_MAX_ITEMS,
) -> TimelineSlice:
    """Everything the timeline draws between ``start_us`` and ``end_us``: a critical-path row, per host
    thread an operator row and an API row, per device its streams and a gaps row, and the syncs. Rows
    without events in the range are left out. ``max_items_per_lane`` bounds the merging bins."""
    if not end_us > start_us:
        raise ValueError(f"empty range {start_us}..{end_us}")
    bins = max(int(max_items_per_lane), 1)
    ev = model.events
    idx = ev.overlapping(start_us, end_us)  # the range's events: nothing below scans the whole table
    kind, lanes = ev.kind[idx], ev.lane[idx]
    blocking = _blocking_events(analysis, idx)
    rows: list[Row] = []
    crit = _critical_row(model, analysis, start_us, end_us, bins)
    if crit is not None:
        rows.append(crit)
    outer = _outermost_ops(model, idx)
    api = of_kind(kind, EventKind.RUNTIME, EventKind.DRIVER)
    act = of_kind(kind, *ACTIVITY_KINDS)
    for lane in model.lanes:
        if lane.kind == LaneKind.HOST:
            on = lanes == lane.id
            for row_kind, mask in ((RowKind.OPS, outer & on), (RowKind.API, api & on)):
                row = _event_row(
                    model, row_kind, lane.id, lane.label, idx[mask], blocking[mask], start_us, end_us, bins
                )
                if row is not None:
                    rows.append(row)
    for device in model.devices:
        for lane in model.lanes:
            if lane.kind == LaneKind.STREAM and lane.device == device.id:
                mask = act & (lanes == lane.id)
                row = _event_row(
                    model,
                    RowKind.STREAM,
                    lane.id,
                    lane.label,
                    idx[mask],
                    blocking[mask],
                    start_us,
                    end_us,
                    bins,
                )
                if row is not None:
                    rows.append(row)
        gaps = _gap_row(analysis, device.id, start_us, end_us, bins)
        if gaps is not None:
            rows.append(gaps)
    syncs = _sync_marks(analysis, {r.lane for r in rows if r.kind == RowKind.API}, start_us, end_us, bins)
    steps = tuple(
        (st.name, st.start_us, st.end_us)
        for st in model.steps
        if st.start_us < end_us and st.end_us > start_us
    )
    merged = any(r.events > len(r.items) for r in rows)
    counters = counter_rows(model, start_us, end_us, bins)
    return TimelineSlice(start_us, end_us, tuple(rows), syncs, steps, merged, counters)


def _sync_marks(
    analysis: Analysis, api_lanes: set[int], start_us: float, end_us: float, limit: int
) -> tuple[SyncMark, ...]:
    """The analysis' syncs starting in the range, on their thread's API row; past ``limit``, the longest
    waits."""
    marks = [
        SyncMark(
            f"api:{s.thread}" if s.thread in api_lanes else f"ops:{s.thread}",
            s.start_us,
            s.wait_us,
            s.bubble_us,
            s.kind.value,
            s.api,
            str(s.call_site) if s.call_site else "",
            s.avoidable,
        )
        for s in analysis.syncs
        if start_us <= s.start_us < end_us
    ]
    if len(marks) > limit:
        marks = sorted(sorted(marks, key=lambda m: -m.wait_us)[:limit], key=lambda m: m.start_us)
    return tuple(marks)


def _blocking_events(analysis: Analysis, idx: I64) -> Mask:
    """Which of the events ``idx`` (ascending) are runtime calls the analysis found blocking (drawn in the
    sync colour)."""
    out = np.zeros(len(idx), dtype=np.bool_)
    g = analysis.graph
    if g is not None and len(g.call_event) and len(idx):
        calls = g.call_event[g.call_blocking != Blocking.NO]
        at = np.minimum(np.searchsorted(idx, calls), len(idx) - 1)
        out[at[idx[at] == calls]] = True
    return out


def _outermost_ops(model: TraceModel, idx: I64) -> Mask:
    """Which of the events ``idx`` are operators and annotations (steps excluded) with no operator or
    annotation above them on their thread: they never overlap one another, so a thread's operator row is
    one level deep."""
    ev = model.events
    steps = np.array([s.event for s in model.steps], dtype=np.int64)
    ops = of_kind(ev.kind[idx], EventKind.CPU_OP, EventKind.ANNOTATION) & ~np.isin(idx, steps)
    which = np.flatnonzero(ops)
    anc = ev.parent[idx[which]]
    covered = np.zeros(len(which), dtype=np.bool_)
    for _ in range(_MAX_ANCESTORS):
        live = anc >= 0
        if not live.any():
            break
        hit = np.zeros(len(which), dtype=np.bool_)
        up = anc[live]
        hit[live] = of_kind(ev.kind[up], EventKind.CPU_OP, EventKind.ANNOTATION) & ~np.isin(up, steps)
        covered |= hit
        anc = np.where(live & ~hit, ev.parent[np.maximum(anc, 0)], -1)
    out = np.zeros(len(idx), dtype=np.bool_)
    out[which[~covered]] = True
    return out


def _event_row(
    model: TraceModel,
    kind: RowKind,
    lane: int,
    label: str,
    idx: I64,
    blocking: Mask,
    start_us: float,
    end_us: float,
    bins: int,
) -> Row | None:
    """The events ``idx`` of one row (``blocking``: which of them are blocking calls), merged to ``bins``."""
    if not len(idx):
        return None
    ev = model.events
    keys = _event_keys(ev.kind[idx], blocking, kind)
    s = np.maximum(ev.ts[idx], start_us)
    e = np.minimum(ev.end[idx], end_us)
    groups = lod(s, e, keys, start_us, end_us, bins)
    names, sites, colors = [], [], []
    for rep, n in zip(groups.rep.tolist(), groups.count.tolist(), strict=True):
        event = int(idx[rep])
        colors.append(keys[rep])
        name = model.name_of(event)
        names.append(name if n == 1 else f"{n} × {_plural(keys[rep])}, longest: {name}")
        at = event if kind != RowKind.STREAM else int(ev.launch[event])
        site = call_site(model, at) if at >= 0 else None
        sites.append(str(site) if site else "")
    items = Items(groups.start, groups.end, groups.count, tuple(colors), tuple(names), tuple(sites))
    return Row(f"{kind.value}:{lane}", label, kind, lane, len(idx), items)


def _event_keys(kinds: npt.NDArray[np.int8], blocking: Mask, row: RowKind) -> list[str]:
    names = {int(k): EventKind(int(k)).name.lower() for k in distinct(kinds)}
    if row == RowKind.API:
        return ["sync_call" if b else "launch_call" for b in blocking.tolist()]
    return [names[int(k)] for k in kinds.tolist()]


def _plural(key: str) -> str:
    return {
        "kernel": "kernels",
        "memcpy": "copies",
        "memset": "memsets",
        "cpu_op": "ops",
        "annotation": "annotations",
        "launch_call": "API calls",
        "sync_call": "blocking calls",
    }.get(key, f"{key} items")


def _critical_row(
    model: TraceModel, analysis: Analysis, start_us: float, end_us: float, bins: int
) -> Row | None:
    """The critical path's segments in the range, clipped, coloured by kind (``Kind`` values)."""
    cp = analysis.critical
    if cp is None:
        return None
    # the segments tile the window in time order: both bounds are binary searches
    inside = np.arange(
        np.searchsorted(cp.end_us, start_us, side="right"), np.searchsorted(cp.start_us, end_us, side="left")
    )
    if not len(inside):
        return None
    kinds = tuple(Kind)
    keys = [kinds[k].value for k in cp.kind[inside].tolist()]
    s = np.maximum(cp.start_us[inside], start_us)
    e = np.minimum(cp.end_us[inside], end_us)
    groups = lod(s, e, keys, start_us, end_us, bins)
    names, sites, colors = [], [], []
    for rep, n in zip(groups.rep.tolist(), groups.count.tolist(), strict=True):
        seg = int(inside[rep])
        event = int(cp.event[seg])
        lane = model.lanes[int(cp.lane[seg])].label
        what = model.name_of(event) if event >= 0 else "host work between calls"
        name = f"{keys[rep]} on {lane}: {what}"
        names.append(name if n == 1 else f"{n} segments, longest: {name}")
        colors.append(keys[rep])
        site = call_site(model, event) if event >= 0 else None
        sites.append(str(site) if site else "")
    items = Items(groups.start, groups.end, groups.count, tuple(colors), tuple(names), tuple(sites))
    return Row("critical", "critical path", RowKind.CRITICAL, -1, len(inside), items)


def _gap_row(analysis: Analysis, device: int, start_us: float, end_us: float, bins: int) -> Row | None:
    """A device's idle gaps (>= ``min_gap_us``) in the range, coloured by cause."""
    gaps = [g for g in analysis.gaps if g.device == device and g.start_us < end_us and g.end_us > start_us]
    if not gaps:
        return None
    keys = [g.cause.value for g in gaps]
    s = np.maximum(np.array([g.start_us for g in gaps]), start_us)
    e = np.minimum(np.array([g.end_us for g in gaps]), end_us)
    groups = lod(s, e, keys, start_us, end_us, bins)
    names, sites, colors = [], [], []
    for rep, n in zip(groups.rep.tolist(), groups.count.tolist(), strict=True):
        g = gaps[rep]
        name = f"idle ({g.cause.value}): {g.detail}" if g.detail else f"idle ({g.cause.value})"
        names.append(name if n == 1 else f"{n} gaps, longest: {name}")
        colors.append(keys[rep])
        sites.append(str(g.call_site) if g.call_site else "")
    items = Items(groups.start, groups.end, groups.count, tuple(colors), tuple(names), tuple(sites))
    return Row(f"gaps:{device}", f"GPU {device} idle", RowKind.GAPS, device, len(gaps), items)


@dataclass(frozen=True)
class Groups:
    """Result of ``lod``: one entry per drawn item; ``rep`` indexes the longest input of each item."""

    start: F64
    end: F64
    count: I64
    rep: I64


def lod(start: F64, end: F64, keys: list[str], lo: float, hi: float, bins: int) -> Groups:
    """Level-of-detail merge. Items at least one bin long stay single; shorter items sharing a bin and a
    key merge into one spanning them. A row of at most ``bins`` items is not merged at all: every
    event stays visible when zooming the static figure. Output is in start order."""
    n = len(start)
    if n <= bins:
        order = np.argsort(start, kind="stable").astype(np.int64)
        return Groups(start[order], end[order], np.ones(n, dtype=np.int64), order)
    width = (hi - lo) / bins
    dur = end - start
    codes = {k: i for i, k in enumerate(sorted(set(keys)))}
    key = np.array([codes[k] for k in keys], dtype=np.int64)
    bucket = np.clip(((start - lo) // width).astype(np.int64), 0, bins - 1)
    long = dur >= width
    # a long item gets a group of its own; short ones share (bucket, key)
    group = np.where(long, -1 - np.arange(n), bucket * len(codes) + key)
    order = np.lexsort((-dur, group))
    g = group[order]
    first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    s = np.minimum.reduceat(start[order], first)
    e = np.maximum.reduceat(end[order], first)
    count = np.diff(np.r_[first, n]).astype(np.int64)
    rep = order[first].astype(np.int64)
    by_start = np.argsort(s, kind="stable")
    return _coalesce(Groups(s[by_start], e[by_start], count[by_start], rep[by_start]), key, dur, width / 2)


def _coalesce(g: Groups, key: I64, dur: F64, gap: float) -> Groups:
    """Join consecutive items of one key separated by less than ``gap`` (invisible at this zoom): a busy
    stream becomes a few long blocks instead of hundreds of touching ones, which the browser draws
    faster. ``rep`` stays the longest input event."""
    keep = np.ones(len(g.start), dtype=np.bool_)
    end, count, rep = g.end.copy(), g.count.copy(), g.rep.copy()
    last = 0
    for i in range(1, len(g.start)):
        if key[rep[i]] == key[rep[last]] and g.start[i] - end[last] < gap:
            end[last] = max(end[last], end[i])
            count[last] += count[i]
            if dur[rep[i]] > dur[rep[last]]:
                rep[last] = rep[i]
            keep[i] = False
        else:
            last = i
    return Groups(g.start[keep], end[keep], count[keep], rep[keep])


_ROW_PX = 26
_BAR_HALF = 0.39  # half a row's height
_LEGEND = {
    **{k: f"critical: {k}" for k in palette.KINDS},
    **{c: f"idle: {c}" for c in palette.CAUSES},
    "kernel": "kernel",
    "memcpy": "copy",
    "memset": "memset",
    "cpu_op": "host op",
    "annotation": "annotation",
    "launch_call": "runtime call",
    "sync_call": "blocking call",
}


def _colour(row: RowKind, key: str) -> tuple[str, str]:
    """(legend group, colour) of an item: critical and gap rows use the shared kind/cause colours."""
    if row == RowKind.CRITICAL:
        return f"critical: {key}", palette.kind_color(key)
    if row == RowKind.GAPS:
        return f"idle: {key}", palette.cause_color(key)
    return _LEGEND.get(key, key), palette.event_color(key)


def _clip(text: str, limit: int = 110) -> str:
    """Shorten long text (C++ kernel names) in the middle so that a hover label fits a laptop screen."""
    return text if len(text) <= limit else f"{text[: limit * 2 // 3]}…{text[-(limit // 3) :]}"


def _hover(name: str, start: float, end: float, origin: float, site: str) -> str:
    """Hover text; every trace string is HTML-escaped because plotly renders a subset of HTML in labels."""
    text = f"<b>{html.escape(_clip(name))}</b><br>{_fmt_us(end - start)} at {(start - origin) / 1000:.3f} ms"
    return text + (f"<br>{html.escape(_clip(site))}" if site else "")


def _fmt_us(us: float) -> str:
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.1f} µs"


def figure(
    sl: TimelineSlice, title: str = "", origin_us: float | None = None, origin_name: str = "range"
) -> go.Figure:
    """Plotly figure of a slice: one horizontal bar trace per colour, rows top to bottom as extracted,
    x in milliseconds from ``origin_us`` (default: the slice start; the explorer passes the window's start,
    so a zoomed view keeps absolute times), named "ms from the start of the {origin_name}" under the title;
    syncs as markers, steps as dotted boundaries. Each bar costs
    the browser an SVG element: the item budget of ``extract`` is what keeps a big report quick to open
    (filled polygons draw no faster in plotly once they carry hover points)."""
    origin = sl.start_us if origin_us is None else origin_us
    ypos = {r.key: i for i, r in enumerate(sl.rows)}
    traces: dict[str, dict[str, list[object]]] = {}
    colours: dict[str, str] = {}
    for r in sl.rows:
        it = r.items
        for s, e, key, name, site in zip(
            it.start_us.tolist(), it.end_us.tolist(), it.color, it.name, it.site, strict=True
        ):
            group, colour = _colour(r.kind, key)
            colours[group] = colour
            t = traces.setdefault(group, {"x": [], "base": [], "y": [], "text": []})
            t["x"].append(round(max(e - s, 0.0) / 1000, 6))
            t["base"].append(round((s - origin) / 1000, 6))
            t["y"].append(ypos[r.key])
            t["text"].append(_hover(name, s, e, origin, site))
    fig = go.Figure()
    for group, t in traces.items():
        fig.add_trace(
            go.Bar(
                name=group,
                orientation="h",
                x=t["x"],
                base=t["base"],
                y=t["y"],
                width=2 * _BAR_HALF,
                marker={"color": colours[group], "line": {"width": 0}},
                hovertext=t["text"],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    _add_syncs(fig, sl, ypos, origin)
    add_counters(fig, sl.counters, len(sl.rows), origin, sl.end_us)
    _layout(fig, sl, title, origin, f"ms from the start of the {origin_name}")
    return fig


def _add_syncs(fig: go.Figure, sl: TimelineSlice, ypos: dict[str, int], origin: float) -> None:
    marks = [m for m in sl.syncs if m.row in ypos]
    if not marks:
        return
    text = []
    for m in marks:
        verdict = "avoidable" if m.avoidable else "needed"
        line = f"<b>sync ({html.escape(m.kind)}, {verdict})</b><br>{html.escape(m.api)}"
        line += f"<br>wait {_fmt_us(m.wait_us)}, device idle charged {_fmt_us(m.bubble_us)}"
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


def _layout(fig: go.Figure, sl: TimelineSlice, title: str, origin: float, axis: str) -> None:
    n = len(sl.rows) + len(sl.counters)
    step_lines = [  # one layout update for all (add_vline per step relayouts every time)
        {
            "type": "line",
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
    ticks = [html.escape(r.label if r.kind != RowKind.API else f"{r.label} · CUDA API") for r in sl.rows]
    ticks += [html.escape(_clip(c.label, 60)) for c in sl.counters]
    if sl.merged:
        title += " (short events merged at this zoom)"
    # the axis's unit is a line of its own under the title: an axis title on the top side would share the
    # title's line and overlap it on a narrow page
    heading = f"{html.escape(title)}<br>" if title else ""
    heading += f'<span style="font-size:11px">{html.escape(axis)}</span>'
    fig.update_layout(
        title={"text": heading, "font": {"size": 14}, "x": 0, "xanchor": "left", "y": 1, "yanchor": "top"},
        barmode="overlay",
        hovermode="closest",
        # rows, the axis and title above, and the legend below (it wraps on a narrow page or on paper)
        height=max(160, (128 if title else 110) + _ROW_PX * n + 22 * -(-len(fig.data) // 4)),
        margin={"l": 10, "r": 10, "t": 62 if title else 44, "b": 40},
        font={"family": palette.FONT_FAMILY, "size": 12, "color": palette.TEXT},
        plot_bgcolor=palette.BACKGROUND,
        paper_bgcolor=palette.BACKGROUND,
        hoverlabel={"font": {"family": palette.MONO_FAMILY, "size": 11}, "align": "left"},
        legend={"orientation": "h", "y": -0.02, "yanchor": "top", "x": 0, "font": {"size": 11}},
        dragmode="zoom",
        shapes=step_lines,
        xaxis={
            "range": [(sl.start_us - origin) / 1000, (sl.end_us - origin) / 1000],
            "gridcolor": palette.GRID,
            "zeroline": False,
            "side": "top",
            "tickformat": ",~r",
        },
        yaxis={
            "tickvals": list(range(n)),
            "ticktext": ticks,
            "range": [n - 0.5, -0.5],
            "fixedrange": True,
            "automargin": True,
            "gridcolor": palette.GRID,
        },
    )
