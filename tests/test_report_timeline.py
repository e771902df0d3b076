"""Timeline extraction (stallscope.dashboard.timeline.extract) on builder traces: rows, merging, syncs, ranges."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from synth import library as sc
from synth.trace import SynthTrace

from stallscope.analyzer.analysis import Analysis, analyze
from stallscope.analyzer.core.names import ACTIVITY_KINDS, EventKind
from stallscope.analyzer.load.loader import load
from stallscope.dashboard import palette
from stallscope.dashboard.timeline import Items, RowKind, describe, extract, lod, op_depths
from stallscope.dashboard.timeline_figure import figure


def analysed(s: SynthTrace, tmp_path: Path) -> Analysis:
    return analyze(load(s.write(tmp_path / f"{s.name}.pt.trace.json.gz"), use_cache=False))


def test_rows_hold_every_event_of_a_small_trace_and_the_syncs(tmp_path: Path) -> None:
    # GIVEN a 4-step loop with loss.item() every step (6 kernels a step)
    a = analysed(sc.item_in_loop(steps=4), tmp_path)
    # WHEN the whole window is extracted with room for every event
    sl = extract(a.model, a, a.window.start_us, a.window.end_us)
    # THEN nothing is merged: the stream row holds the 24 kernels and 4 copies, one item each
    kinds = {r.kind for r in sl.rows}
    assert {RowKind.CRITICAL, RowKind.OPS, RowKind.API, RowKind.STREAM, RowKind.GAPS} <= kinds
    stream = next(r for r in sl.rows if r.kind == RowKind.STREAM)
    assert len(stream.items) == stream.events == 28
    assert stream.items.color.count("kernel") == 24 and stream.items.color.count("memcpy") == 4
    assert not sl.merged and all(int(c) == 1 for c in stream.items.count)
    # and kernels carry the launching line; the syncs are the analysis' syncs, at their call site
    assert "train.py:42 in train_step" in stream.items.site
    assert len(sl.syncs) == len(a.syncs)
    assert {m.site for m in sl.syncs} == {str(s.call_site) if s.call_site else "" for s in a.syncs}
    assert {m.row for m in sl.syncs} <= {r.key for r in sl.rows}
    # and the API row colours exactly the blocking calls as syncs
    api = next(r for r in sl.rows if r.kind == RowKind.API)
    assert api.items.color.count("sync_call") >= len(a.syncs)
    # and the gap row shows the analysis' gaps with their causes
    gaps = next(r for r in sl.rows if r.kind == RowKind.GAPS)
    assert sorted(gaps.items.color) == sorted(g.cause.value for g in a.gaps if g.device == 0)


def test_critical_row_tiles_the_range_by_kind(tmp_path: Path) -> None:
    a = analysed(sc.item_in_loop(steps=3), tmp_path)
    assert a.critical is not None
    sl = extract(a.model, a, a.window.start_us, a.window.end_us)
    crit = sl.rows[0]
    assert crit.kind == RowKind.CRITICAL
    covered = float(np.sum(crit.items.end_us - crit.items.start_us))
    assert abs(covered - a.critical.length_us) < 1e-6 * a.critical.length_us + 1e-6
    assert set(crit.items.color) <= {k.value for k in a.critical.breakdown_us}


def test_many_events_merge_to_the_item_budget_and_keep_every_event_counted(tmp_path: Path) -> None:
    # GIVEN 10 steps of 40 tiny kernels (400 kernels)
    a = analysed(sc.launch_bound_loop(steps=10, kernels_per_step=40), tmp_path)
    # WHEN extracted with a budget of 20 items a row
    sl = extract(a.model, a, a.window.start_us, a.window.end_us, max_items_per_lane=20)
    stream = next(r for r in sl.rows if r.kind == RowKind.STREAM)
    # THEN the row is merged, within about twice the budget, and the counts add up to the events
    assert sl.merged
    assert stream.events == 400
    assert len(stream.items) <= 2 * 20
    assert int(stream.items.count.sum()) == 400
    it = stream.items
    merged = [i for i in range(len(it)) if it.count[i] > 1]
    assert merged and all(
        describe(stream.kind, it, i).startswith(f"{it.count[i]} kernels: span") for i in merged
    )


def test_a_step_range_clips_items_to_the_range(tmp_path: Path) -> None:
    a = analysed(sc.item_in_loop(steps=4), tmp_path)
    step = a.steps[1]
    lo, hi = step.start_us, step.start_us + step.dur_us
    sl = extract(a.model, a, lo, hi)
    assert step.name in [s[0] for s in sl.steps]
    for r in sl.rows:
        assert float(r.items.start_us.min()) >= lo and float(r.items.end_us.max()) <= hi
    assert all(lo <= m.start_us < hi for m in sl.syncs)
    assert len(sl.syncs) == sum(1 for s in a.syncs if lo <= s.start_us < hi) == 1


def test_lod_merges_short_items_per_bin_and_key() -> None:
    start = np.array([0.0, 1.0, 2.0, 50.0, 85.0, 86.0])
    end = start + np.array([0.5, 0.5, 0.5, 30.0, 0.5, 0.5])
    keys = ["a", "a", "b", "a", "a", "a"]
    g = lod(start, end, keys, 0.0, 100.0, bins=5)  # bins of 20 µs
    # [0, 1] merge (a, bin 0); 2 stays alone (b); 50 is long; [85, 86] merge (a, bin 4), and that item
    # then joins the long one: the 5 µs between them is under half a bin (10 µs), invisible at this zoom
    assert g.count.tolist() == [2, 1, 3]
    assert g.start.tolist() == [0.0, 2.0, 50.0]
    assert g.end.tolist() == [1.5, 2.5, 86.5]
    assert g.rep.tolist()[2] == 3  # the longest event names the joined item
    # a gap of half a bin or more keeps items apart
    far = lod(
        start + np.array([0, 0, 0, 0, 10, 10.0]), end + np.array([0, 0, 0, 0, 10, 10.0]), keys, 0.0, 100.0, 5
    )
    assert far.count.tolist() == [2, 1, 1, 2]
    # a row that fits the budget is left alone
    assert lod(start, end, keys, 0.0, 100.0, bins=6).count.tolist() == [1] * 6


def test_figure_draws_one_trace_per_colour_and_escapes_names(tmp_path: Path) -> None:
    a = analysed(sc.item_in_loop(steps=2), tmp_path)
    sl = extract(a.model, a, a.window.start_us, a.window.end_us)
    fig = figure(sl, "whole <window>")
    names = [t.name for t in fig.data]
    assert len(names) == len(set(names))
    assert "sync" in names and "kernel" in names
    bars = sum(len(t.x) for t in fig.data if t.type == "bar")
    assert bars == sl.items
    assert "&lt;window&gt;" in fig.layout.title.text
    # the heading is one line (plotly cuts the first of two lines of a title anchored at the top in half),
    # also when events are merged (the page's status line says so)
    assert "<br>" not in fig.layout.title.text and "ms from the start of the range" in fig.layout.title.text
    merged = extract(a.model, a, a.window.start_us, a.window.end_us, max_items_per_lane=2)
    assert merged.merged and "<br>" not in figure(merged, "t").layout.title.text


def test_a_merged_item_tells_its_span_its_busy_time_and_its_longest_event_apart() -> None:
    # GIVEN six 1 µs events and one of 3 µs, 10 µs apart, in a range cut into 2 bins of 50 µs
    start = np.array([0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0])
    dur = np.array([1.0, 1.0, 3.0, 1.0, 1.0, 1.0, 1.0])
    g = lod(start, start + dur, ["kernel"] * 7, 0.0, 100.0, bins=2)
    # WHEN merged: one block from 0 to 61 µs
    assert g.count.tolist() == [7] and g.start.tolist() == [0.0] and g.end.tolist() == [61.0]
    # THEN its busy time is what its events ran (9 µs), not its span (61 µs), and its longest is 3 µs
    assert g.busy.tolist() == [9.0] and g.longest.tolist() == [3.0] and int(g.rep[0]) == 2
    # AND a row's label says the three apart
    items = Items(
        g.start,
        g.end,
        g.count,
        g.busy,
        g.longest,
        np.array([5]),
        np.array([-1]),
        ("kernel",),
        ("gemm",),
        ("",),
    )
    assert (
        describe(RowKind.STREAM, items, 0)
        == "7 kernels: span 61.0 µs, busy 9.0 µs (15%), longest 3.0 µs: gemm"
    )


def test_merged_items_of_a_real_row_keep_the_busy_time_of_their_events(tmp_path: Path) -> None:
    a = analysed(sc.launch_bound_loop(steps=10, kernels_per_step=40), tmp_path)
    sl = extract(a.model, a, a.window.start_us, a.window.end_us, max_items_per_lane=20)
    it = next(r for r in sl.rows if r.kind == RowKind.STREAM).items
    ev = a.model.events
    kernels = np.flatnonzero(ev.is_kind(*ACTIVITY_KINDS))
    # the busy times add up to the kernels' durations; each is at most its span, strictly less when merged
    assert abs(float(it.busy_us.sum()) - float(ev.dur[kernels].sum())) < 1e-6 * float(ev.dur[kernels].sum())
    span = it.end_us - it.start_us
    assert (it.busy_us <= span + 1e-9).all() and (it.busy_us[it.count > 1] < span[it.count > 1]).all()
    # and the longest is one of the kernels' durations, never the span
    assert set(np.round(it.longest_us, 6).tolist()) <= set(np.round(ev.dur[kernels], 6).tolist())


def test_idle_is_drawn_as_absence_in_no_busy_colour_and_merged_blocks_by_how_busy(tmp_path: Path) -> None:
    a = analysed(sc.launch_bound_loop(steps=10, kernels_per_step=40), tmp_path)
    sl = extract(a.model, a, a.window.start_us, a.window.end_us, max_items_per_lane=20)
    fig = figure(sl)
    bars = [t for t in fig.data if t.type == "bar"]
    idle = [t for t in bars if t.name.startswith("idle:")]
    busy = [t for t in bars if not t.name.startswith("idle:")]
    assert idle and busy
    busy_colours = {t.marker.color for t in busy} | set(palette.KIND_COLORS.values())
    busy_colours |= set(palette.EVENT_COLORS.values())
    for t in idle:  # a pale fill that no busy kind uses, hatched
        assert t.marker.color not in busy_colours and t.marker.pattern.shape == "/"
    for t in busy:
        assert t.marker.pattern.shape in (None, "")
    # a merged block is as opaque as the share of its span its events ran; a single event is opaque
    stream = next(r for r in sl.rows if r.kind == RowKind.STREAM)
    kernel = next(t for t in bars if t.name == "kernel")
    it = stream.items
    want = [
        1.0 if c == 1 else round(0.3 + 0.7 * b / (e - s), 3)
        for c, b, s, e in zip(it.count, it.busy_us, it.start_us, it.end_us, strict=True)
    ]
    assert list(kernel.marker.opacity) == want and min(want) < 1.0
    # and the hover of a merged block says span, busy and longest apart
    text = kernel.hovertext[int(np.argmax(it.count))]
    assert "span " in text and "busy " in text and "longest " in text


def test_host_ops_get_a_row_per_nesting_depth_and_rows_stay_when_zoomed(tmp_path: Path) -> None:
    # GIVEN a loop whose aten::linear calls aten::addmm (under python frames and the profiler step)
    a = analysed(sc.item_in_loop(steps=3), tmp_path)
    m = a.model
    names = np.array([m.name_of(i) for i in range(m.event_count)])
    linear, addmm = np.flatnonzero(names == "aten::linear"), np.flatnonzero(names == "aten::addmm")
    # THEN linear is outermost (python frames and steps do not count) and addmm one deeper
    assert set(op_depths(m, linear).tolist()) == {0} and set(op_depths(m, addmm).tolist()) == {1}
    # AND the timeline draws them on the thread's depth-0 and depth-1 rows
    sl = extract(m, a, a.window.start_us, a.window.end_us)
    lane = int(m.events.lane[linear[0]])
    rows = {r.key: r for r in sl.rows}
    assert set(rows[f"ops:{lane}:0"].items.name) >= {"aten::linear"}
    assert "aten::addmm" in rows[f"ops:{lane}:1"].items.name
    assert "aten::addmm" not in rows[f"ops:{lane}:0"].items.name
    # AND a zoom onto one kernel keeps every row, empty ones included, in the same order
    k = int(np.flatnonzero(m.events.is_kind(EventKind.KERNEL))[0])
    zoom = extract(m, a, float(m.events.ts[k]), float(m.events.end[k]))
    assert [r.key for r in zoom.rows] == [r.key for r in sl.rows]
    assert any(len(r.items) == 0 for r in zoom.rows)


def test_a_launch_and_its_kernel_point_at_each_other(tmp_path: Path) -> None:
    a = analysed(sc.item_in_loop(steps=2), tmp_path)
    sl = extract(a.model, a, a.window.start_us, a.window.end_us)
    ev = a.model.events
    stream = next(r for r in sl.rows if r.kind == RowKind.STREAM)
    api = next(r for r in sl.rows if r.kind == RowKind.API)
    k = 0
    launch = int(stream.items.partner[k])
    assert launch == int(ev.launch[int(stream.items.event[k])]) >= 0
    assert sl.places[launch][0] == api.key
    i = int(np.flatnonzero(api.items.event == launch)[0])
    assert int(api.items.partner[i]) == int(stream.items.event[k])
    # the figure hands the partner's row and times to the page's script
    fig = figure(sl)
    kernel = next(t for t in fig.data if t.name == "kernel")
    ypos = {r.key: n for n, r in enumerate(sl.rows)}
    assert kernel.customdata[0][1] == ypos[api.key]
