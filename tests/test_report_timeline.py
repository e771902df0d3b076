"""Timeline extraction (stallscope.dashboard.timeline.extract) on builder traces: rows, merging, syncs, ranges."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from synth import library as sc
from synth.trace import SynthTrace

from stallscope.analyzer.analysis import Analysis, analyze
from stallscope.analyzer.load.loader import load
from stallscope.dashboard.timeline import RowKind, extract, figure, lod


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
    merged = [n for n, c in zip(stream.items.name, stream.items.count, strict=True) if c > 1]
    assert merged and all("kernels, longest:" in n for n in merged)


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
