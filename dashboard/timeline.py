"""Timeline of a time range: host threads and device streams as rows, the critical path, idle gaps by
cause and syncs, with level-of-detail merging so that a row never holds more items than a screen shows.

``extract`` is a pure function of the trace model, its ``Analysis`` and a range; the HTML report calls it
once for the whole window (its page merges again on every zoom), and the dashboard calls it again on every
zoom (server-side windowing). ``stallscope.dashboard.timeline_figure`` draws a ``TimelineSlice`` with
plotly. Nothing here re-derives analysis: the critical path, the gaps and their causes, the syncs and which
calls blocked all come from the ``Analysis``; the model only supplies the events to draw.

Rows are the same at every zoom (``frame``: the rows of the whole window, empty where the range has
nothing), so a row never disappears or moves when zooming. A host thread's operators get one row per
nesting depth (who called whom, as in Perfetto), up to ``MAX_DEPTH_ROWS``.

Level of detail: a row with at most ``max_items_per_lane`` events is drawn as it is. Past that, the range
is cut into ``max_items_per_lane`` bins. An event at least one bin long is kept as it is; shorter events of
the same colour that start in the same bin become one merged item, and consecutive items of one colour
closer than half a bin join. A merged item keeps its span, its count, the time its events were busy and its
longest event, so its label can tell the three apart. A row therefore holds at most about twice
``max_items_per_lane`` items per colour, however many events the range has.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import numpy.typing as npt

from stallscope.analyzer.analysis import Analysis
from stallscope.analyzer.core.arrays import distinct
from stallscope.analyzer.core.model import F64, I64, LaneKind, Mask, TraceModel, of_kind
from stallscope.analyzer.core.names import ACTIVITY_KINDS, EventKind
from stallscope.analyzer.core.numbers import duration_text
from stallscope.analyzer.core.sites import call_site
from stallscope.analyzer.graph.dependency import Blocking
from stallscope.analyzer.passes.critical import Kind
from stallscope.dashboard.counter_rows import CounterRow, counter_rows

DEFAULT_MAX_ITEMS = 400  # per row: one item per ~3 pixels of a laptop-width plot
MAX_DEPTH_ROWS = 6  # operator rows per thread; deeper calls share the last one
_MAX_ANCESTORS = 512  # the same bound the call-site walk uses


class RowKind(str, Enum):
    CRITICAL = "critical"  # the critical path, coloured by segment kind
    OPS = "ops"  # a host thread's operators and annotations at one nesting depth
    API = "api"  # a host thread's CUDA/HIP runtime and driver calls
    STREAM = "stream"  # a device stream's kernels, copies and memsets
    GAPS = "gaps"  # a device's idle gaps, coloured by cause


@dataclass(frozen=True)
class Items:
    """The drawable items of one row, in start order. ``count`` is 1 for a single event; a merged item
    stands for ``count`` events: ``busy_us`` is the time they ran (at most the span ``end - start``),
    ``longest_us``, ``event``, ``name`` and ``site`` are those of its longest one. ``partner`` is, for a
    single launch call, the first device event it launched, and for a single device event its launch call
    (-1 otherwise; ``TimelineSlice.places`` says where it is drawn)."""

    start_us: F64
    end_us: F64
    count: I64
    busy_us: F64
    longest_us: F64
    event: I64  # model event index (-1: a gap, a segment without an event)
    partner: I64
    color: tuple[str, ...]  # palette key: an event kind, a gap cause or a critical-path kind
    name: tuple[str, ...]  # raw trace text: escape before display
    site: tuple[str, ...]  # "file:line in function", or ""

    def __len__(self) -> int:
        return len(self.start_us)


def no_items() -> Items:
    """An empty row's items (a row of the frame with nothing in the range)."""
    f, i = np.zeros(0, dtype=np.float64), np.zeros(0, dtype=np.int64)
    return Items(f, f, i, f, f, i, i, (), (), ())


@dataclass(frozen=True)
class RowSpec:
    """A row of the timeline, whatever the range: ``frame`` lists them for a whole window."""

    key: str  # unique within a trace ("ops:3:0", "api:3", "stream:6", "gaps:0", "critical")
    label: str  # raw trace text (thread names): escape before display
    kind: RowKind
    lane: int  # model lane, or the device id for GAPS, -1 for CRITICAL
    depth: int = 0  # OPS: nesting depth (the last row also holds everything deeper)
    deepest: bool = False  # OPS: the last row of its thread, holding deeper calls too


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    kind: RowKind
    lane: int
    events: int  # events of the range before merging
    items: Items
    depth: int = 0
    deepest: bool = False


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
    places: Mapping[int, tuple[str, float, float]] = field(
        default_factory=dict
    )  # partner -> (row, start, end)

    @property
    def items(self) -> int:
        return sum(len(r.items) for r in self.rows)


_PLURAL = {
    "kernel": "kernels",
    "memcpy": "copies",
    "memset": "memsets",
    "cpu_op": "ops",
    "annotation": "annotations",
    "launch_call": "API calls",
    "sync_call": "blocking calls",
}


def plural(row: RowKind, key: str) -> str:
    """What many items of ``key`` in a row of ``row`` are called ("kernels", "gaps", "segments")."""
    if row == RowKind.GAPS:
        return f"gaps ({key})"
    if row == RowKind.CRITICAL:
        return f"{key} segments"
    return _PLURAL.get(key, f"{key} items")


def fmt_us(us: float) -> str:
    """A duration as every view writes it (``stallscope.analyzer.core.numbers.duration_text``)."""
    return duration_text(us)


def describe(row: RowKind, items: Items, i: int) -> str:
    """One item's label, plain text: the event's name, or for a merged item how many events, its span,
    the time they were busy (and the share of the span) and the longest event, each apart."""
    n = int(items.count[i])
    if n == 1:
        return items.name[i]
    span = float(items.end_us[i] - items.start_us[i])
    busy = float(items.busy_us[i])
    share = f" ({busy / span:.0%})" if span > 0 else ""
    return (
        f"{n} {plural(row, items.color[i])}: span {fmt_us(span)}, busy {fmt_us(busy)}{share}, "
        f"longest {fmt_us(float(items.longest_us[i]))}: {items.name[i]}"
    )


def _step_events(model: TraceModel) -> I64:
    return np.array([s.event for s in model.steps], dtype=np.int64)


def op_depths(model: TraceModel, events: I64) -> I64:
    """Nesting depth of each of ``events`` among its thread's operators and annotations (the profiler's
    step annotations and python frames do not count): 0 for an outermost one, 1 for one called by it, ...;
    -1 for an event that is not an operator or annotation."""
    ev = model.events
    steps = _step_events(model)

    def is_op(e: I64) -> Mask:
        return of_kind(ev.kind[e], EventKind.CPU_OP, EventKind.ANNOTATION) & ~np.isin(e, steps)

    ops = is_op(events)
    depth = np.where(ops, 0, -1).astype(np.int64)
    which = np.flatnonzero(ops)
    anc = ev.parent[events[which]]
    count = np.zeros(len(which), dtype=np.int64)
    for _ in range(_MAX_ANCESTORS):
        live = anc >= 0
        if not live.any():
            break
        count[live] += is_op(anc[live])
        anc = np.where(live, ev.parent[np.maximum(anc, 0)], -1)
    depth[which] = count
    return depth


_FRAMES: dict[int, tuple[weakref.ref[Analysis], tuple[RowSpec, ...]]] = {}


def frame(model: TraceModel, analysis: Analysis) -> tuple[RowSpec, ...]:
    """The rows of the analysis' window, top to bottom: the critical path, per host thread its operator
    rows (one per depth) and its API row, per device its streams and its gaps. Rows without anything in
    the window are left out. Computed once per analysis (a pass over the window's events)."""
    key = id(analysis)
    hit = _FRAMES.get(key)
    if hit is not None and hit[0]() is analysis:
        return hit[1]
    specs = _frame(model, analysis)
    _FRAMES[key] = (weakref.ref(analysis, lambda _r: _FRAMES.pop(key, None)), specs)
    return specs


def _frame(model: TraceModel, analysis: Analysis) -> tuple[RowSpec, ...]:
    ev = model.events
    idx = ev.overlapping(analysis.window.start_us, analysis.window.end_us)
    kind, lanes = ev.kind[idx], ev.lane[idx]
    depth = op_depths(model, idx)
    api = of_kind(kind, EventKind.RUNTIME, EventKind.DRIVER)
    act = of_kind(kind, *ACTIVITY_KINDS)
    out: list[RowSpec] = []
    cp = analysis.critical
    if cp is not None and len(cp.kind):
        out.append(RowSpec("critical", "critical path", RowKind.CRITICAL, -1))
    for lane in model.lanes:
        if lane.kind != LaneKind.HOST:
            continue
        on = lanes == lane.id
        deepest = int(depth[on].max(initial=-1))
        rows = min(deepest + 1, MAX_DEPTH_ROWS)
        for d in range(rows):
            last = d == rows - 1 and deepest >= MAX_DEPTH_ROWS
            out.append(RowSpec(f"ops:{lane.id}:{d}", lane.label, RowKind.OPS, lane.id, d, last))
        if (api & on).any():
            out.append(RowSpec(f"api:{lane.id}", lane.label, RowKind.API, lane.id))
    for device in model.devices:
        for lane in model.lanes:
            if lane.kind == LaneKind.STREAM and lane.device == device.id and (act & (lanes == lane.id)).any():
                out.append(RowSpec(f"stream:{lane.id}", lane.label, RowKind.STREAM, lane.id))
        if any(g.device == device.id for g in analysis.gaps):
            out.append(RowSpec(f"gaps:{device.id}", f"GPU {device.id} idle", RowKind.GAPS, device.id))
    return tuple(out)


def row_of(model: TraceModel, specs: tuple[RowSpec, ...], events: I64) -> list[str]:
    """The key of the row each of ``events`` is drawn in ("" for an event no row shows)."""
    ev = model.events
    keys = {s.key for s in specs}
    depth = op_depths(model, events)
    out = []
    for e, d in zip(events.tolist(), depth.tolist(), strict=True):
        lane, k = int(ev.lane[e]), EventKind(int(ev.kind[e]))
        if d >= 0:
            key = f"ops:{lane}:{min(d, MAX_DEPTH_ROWS - 1)}"
        elif k in (EventKind.RUNTIME, EventKind.DRIVER):
            key = f"api:{lane}"
        else:
            key = f"stream:{lane}"
        out.append(key if key in keys else "")
    return out


def extract(
    model: TraceModel,
    analysis: Analysis,
    start_us: float,
    end_us: float,
    max_items_per_lane: int = DEFAULT_MAX_ITEMS,
) -> TimelineSlice:
    """Everything the timeline draws between ``start_us`` and ``end_us``: the rows of ``frame`` (empty
    where the range has nothing) and the syncs. ``max_items_per_lane`` bounds the merging bins."""
    if not end_us > start_us:
        raise ValueError(f"empty range {start_us}..{end_us}")
    bins = max(int(max_items_per_lane), 1)
    ev = model.events
    idx = ev.overlapping(start_us, end_us)  # the range's events: nothing below scans the whole table
    kind, lanes = ev.kind[idx], ev.lane[idx]
    blocking = _blocking_events(analysis, idx)
    depth = np.minimum(op_depths(model, idx), MAX_DEPTH_ROWS - 1)
    api = of_kind(kind, EventKind.RUNTIME, EventKind.DRIVER)
    act = of_kind(kind, *ACTIVITY_KINDS)
    rows: list[Row] = []
    for spec in frame(model, analysis):
        row: Row | None = None
        if spec.kind == RowKind.CRITICAL:
            row = _critical_row(model, analysis, start_us, end_us, bins)
        elif spec.kind == RowKind.GAPS:
            row = _gap_row(analysis, spec.lane, start_us, end_us, bins)
        else:
            on = lanes == spec.lane
            mask = on & {RowKind.OPS: depth == spec.depth, RowKind.API: api, RowKind.STREAM: act}[spec.kind]
            row = _event_row(model, spec.kind, idx[mask], blocking[mask], start_us, end_us, bins)
        items = row.items if row is not None else no_items()
        events = row.events if row is not None else 0
        rows.append(Row(spec.key, spec.label, spec.kind, spec.lane, events, items, spec.depth, spec.deepest))
    syncs = _sync_marks(analysis, {r.lane for r in rows if r.kind == RowKind.API}, start_us, end_us, bins)
    steps = tuple(
        (st.name, st.start_us, st.end_us)
        for st in model.steps
        if st.start_us < end_us and st.end_us > start_us
    )
    merged = any(r.events > len(r.items) for r in rows)
    counters = counter_rows(model, start_us, end_us, bins)
    places = _places(model, rows)
    return TimelineSlice(start_us, end_us, tuple(rows), syncs, steps, merged, counters, places)


def _places(model: TraceModel, rows: list[Row]) -> dict[int, tuple[str, float, float]]:
    """Where each partner of the rows' single items is drawn: (row key, start, end)."""
    partners = np.unique(np.concatenate([r.items.partner for r in rows] + [np.zeros(0, dtype=np.int64)]))
    partners = partners[partners >= 0]
    if not len(partners):
        return {}
    ev = model.events
    specs = tuple(RowSpec(r.key, r.label, r.kind, r.lane, r.depth) for r in rows)
    keys = row_of(model, specs, partners)
    return {
        int(e): (k, float(ev.ts[e]), float(ev.end[e]))
        for e, k in zip(partners.tolist(), keys, strict=True)
        if k
    }


def _sync_marks(
    analysis: Analysis, api_lanes: set[int], start_us: float, end_us: float, limit: int
) -> tuple[SyncMark, ...]:
    """The analysis' syncs starting in the range, on their thread's API row; past ``limit``, the longest
    waits."""
    marks = [
        SyncMark(
            f"api:{s.thread}" if s.thread in api_lanes else f"ops:{s.thread}:0",
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


def _launched(model: TraceModel, calls: I64) -> I64:
    """For each launch call of ``calls``, the first device event it launched (-1: none in the trace)."""
    ev = model.events
    out = np.full(len(calls), -1, dtype=np.int64)
    if not len(calls):
        return out
    order = np.argsort(calls)
    device = np.flatnonzero(np.isin(ev.launch, calls) & of_kind(ev.kind, *ACTIVITY_KINDS))
    if not len(device):
        return out
    device = device[np.argsort(ev.ts[device], kind="stable")]
    first_of, first = np.unique(ev.launch[device], return_index=True)  # earliest per call
    at = np.searchsorted(calls[order], first_of)
    out[order[at]] = device[first]
    return out


def _event_row(
    model: TraceModel,
    kind: RowKind,
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
    event = idx[groups.rep]
    single = groups.count == 1
    partner = np.full(len(event), -1, dtype=np.int64)
    if kind == RowKind.STREAM:
        partner[single] = ev.launch[event[single]]
    elif kind == RowKind.API:
        partner[single] = _launched(model, event[single])
    names, sites = [], []
    for at in event.tolist():
        names.append(model.name_of(at))
        where = at if kind != RowKind.STREAM else int(ev.launch[at])
        site = call_site(model, where) if where >= 0 else None
        sites.append(str(site) if site else "")
    colors = tuple(keys[r] for r in groups.rep.tolist())
    items = Items(
        groups.start, groups.end, groups.count, groups.busy, groups.longest, event, partner, colors,
        tuple(names), tuple(sites),
    )  # fmt: skip
    return Row("", "", kind, -1, len(idx), items)


def _event_keys(kinds: npt.NDArray[np.int8], blocking: Mask, row: RowKind) -> list[str]:
    names = {int(k): EventKind(int(k)).name.lower() for k in distinct(kinds)}
    if row == RowKind.API:
        return ["sync_call" if b else "launch_call" for b in blocking.tolist()]
    return [names[int(k)] for k in kinds.tolist()]


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
    names, sites, colors, events = [], [], [], []
    for rep in groups.rep.tolist():
        seg = int(inside[rep])
        event = int(cp.event[seg])
        lane = model.lanes[int(cp.lane[seg])].label
        what = model.name_of(event) if event >= 0 else "host work between calls"
        names.append(f"{keys[rep]} on {lane}: {what}")
        colors.append(keys[rep])
        events.append(event)
        site = call_site(model, event) if event >= 0 else None
        sites.append(str(site) if site else "")
    none = np.full(len(events), -1, dtype=np.int64)
    items = Items(
        groups.start, groups.end, groups.count, groups.busy, groups.longest, np.array(events, dtype=np.int64),
        none, tuple(colors), tuple(names), tuple(sites),
    )  # fmt: skip
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
    for rep in groups.rep.tolist():
        g = gaps[rep]
        names.append(f"idle ({g.cause.value}): {g.detail}" if g.detail else f"idle ({g.cause.value})")
        colors.append(keys[rep])
        sites.append(str(g.call_site) if g.call_site else "")
    none = np.full(len(names), -1, dtype=np.int64)
    items = Items(
        groups.start, groups.end, groups.count, groups.busy, groups.longest, none, none, tuple(colors),
        tuple(names), tuple(sites),
    )  # fmt: skip
    return Row(f"gaps:{device}", f"GPU {device} idle", RowKind.GAPS, device, len(gaps), items)


@dataclass(frozen=True)
class Groups:
    """Result of ``lod``: one entry per drawn item; ``rep`` indexes the longest input of each item,
    ``busy`` sums its inputs' durations (at most its span), ``longest`` is its longest input's."""

    start: F64
    end: F64
    count: I64
    rep: I64
    busy: F64
    longest: F64


def lod(start: F64, end: F64, keys: list[str], lo: float, hi: float, bins: int) -> Groups:
    """Level-of-detail merge. Items at least one bin long stay single; shorter items sharing a bin and a
    key merge into one spanning them. A row of at most ``bins`` items is not merged at all: every
    event stays visible when zooming the static figure. Output is in start order."""
    n = len(start)
    dur = end - start
    if n <= bins:
        order = np.argsort(start, kind="stable").astype(np.int64)
        return Groups(start[order], end[order], np.ones(n, dtype=np.int64), order, dur[order], dur[order])
    width = (hi - lo) / bins
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
    busy = np.add.reduceat(dur[order], first)
    count = np.diff(np.r_[first, n]).astype(np.int64)
    rep = order[first].astype(np.int64)
    by = np.argsort(s, kind="stable")
    merged = Groups(s[by], e[by], count[by], rep[by], busy[by], dur[rep[by]])
    return _coalesce(merged, key, dur, width / 2)


def _coalesce(g: Groups, key: I64, dur: F64, gap: float) -> Groups:
    """Join consecutive items of one key separated by less than ``gap`` (invisible at this zoom): a busy
    stream becomes a few long blocks instead of hundreds of touching ones, which the browser draws
    faster. ``rep`` stays the longest input event; the busy time adds up, capped at the span."""
    keep = np.ones(len(g.start), dtype=np.bool_)
    end, count, rep, busy = g.end.copy(), g.count.copy(), g.rep.copy(), g.busy.copy()
    last = 0
    for i in range(1, len(g.start)):
        if key[rep[i]] == key[rep[last]] and g.start[i] - end[last] < gap:
            end[last] = max(end[last], end[i])
            count[last] += count[i]
            busy[last] += busy[i]
            if dur[rep[i]] > dur[rep[last]]:
                rep[last] = rep[i]
            keep[i] = False
        else:
            last = i
    span = end[keep] - g.start[keep]
    return Groups(
        g.start[keep], end[keep], count[keep], rep[keep], np.minimum(busy[keep], span), dur[rep[keep]]
    )
