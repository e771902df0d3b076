"""Counter events (``ph: "C"``) and profiler-range metrics: kept in the model, counted, cached, exported
decimated in the analysis JSON and drawn as counter rows of the timeline (GIVEN / WHEN / THEN)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from _kineto import Event, WriteTrace, document, launch_pair
from test_dashboard_pages import texts

import stallscope.analyzer.load.loader
import stallscope.analyzer.load.raw
import stallscope.analyzer.load.stream
from stallscope.analyzer.analysis import analyze
from stallscope.analyzer.core.model import TraceModel
from stallscope.analyzer.document.analysis import to_json
from stallscope.analyzer.load import cache
from stallscope.analyzer.load import counters as counters_module
from stallscope.analyzer.load.counters import decimate, series_of
from stallscope.analyzer.load.loader import load
from stallscope.dashboard.pages import explorer
from stallscope.dashboard.report import render
from stallscope.dashboard.services import Services
from stallscope.dashboard.store import Store
from stallscope.dashboard.timeline import extract
from stallscope.dashboard.timeline_figure import figure
from stallscope.dashboard.worker import analyse_entry

HOSTILE = "<script>alert(1)</script>"


def counter(name: str, ts: float, pid: Any = 0, **values: float) -> Event:
    return {"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": ts, "args": values}


def counters_doc(samples: int = 5) -> dict[str, Any]:
    events: list[Event] = []
    for i in range(4):
        events += launch_pair(100.0 * i, 10 + i, 100.0 * i + 30, 40, ext=i + 1)
    for i in range(samples):
        events.append(counter("GPU memory", 10.0 * i, allocated=100 + i, reserved=200))
    events.append(counter("Power", 50, pid=0, W=300.0))
    events.append(counter(HOSTILE, 60, pid=100, value=1.0))
    events.append(counter("flags", 70, value=True))  # a boolean is not a counter value: no series
    return document(events)


def loaded(write_trace: WriteTrace, doc: dict[str, Any], **kwargs: Any) -> TraceModel:
    (model,) = load(write_trace(doc), **kwargs).models
    return model


def test_series_names_follow_the_keys() -> None:
    assert series_of("GPU memory", "allocated", False) == ("GPU memory.allocated", None)
    assert series_of("GPU memory", "value", False) == ("GPU memory", None)
    assert series_of("GPU memory", "bytes", False) == ("GPU memory", "bytes")
    assert series_of("kernel_1", "smsp__inst_executed.sum", True) == ("smsp__inst_executed.sum", None)


def test_counter_events_are_kept_one_series_per_key(write_trace: WriteTrace) -> None:
    # GIVEN five two-key memory samples, a power sample with a unit key and a sample under a host pid
    m = loaded(write_trace, counters_doc(), use_cache=False)
    c = m.counters
    # THEN each key is a series, samples in time order; the device pid makes it device 0's
    names = [s.name for s in c.series]
    assert names == ["GPU memory.allocated", "GPU memory.reserved", "Power", HOSTILE]
    assert [(s.unit, s.device) for s in c.series] == [(None, 0), (None, 0), ("W", 0), (None, -1)]
    ts, value = c.of(0)
    assert ts.tolist() == [0.0, 10.0, 20.0, 30.0, 40.0] and value.tolist() == [100, 101, 102, 103, 104]
    # AND they are counted, not reported as an unknown phase, and are no timed events
    assert m.report.counter_samples == len(c) == 12
    assert m.report.unknown_phases == {}
    assert m.event_count == 12  # 4 x (op, launch, kernel)
    # AND the counter event without a number is counted as skipped, not lost silently
    assert m.report.skipped == {"counter event without a numeric time and value": 1}


@pytest.mark.parametrize("stream", [False, True])
def test_counters_of_every_batch_are_read_streamed_or_whole(
    write_trace: WriteTrace, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    # GIVEN 2,000 counter samples between 600 events, cut into many batches
    monkeypatch.setattr(stallscope.analyzer.load.stream, "_BLOCK", 10_000)
    monkeypatch.setattr(stallscope.analyzer.load.stream, "BATCH_BYTES", 30_000)
    monkeypatch.setattr(stallscope.analyzer.load.raw, "BATCH", 100)
    monkeypatch.setattr(stallscope.analyzer.load.loader, "_STREAM_MIN_BYTES", 0 if stream else 1 << 40)
    calls: list[int] = []
    module = stallscope.analyzer.load.stream if stream else stallscope.analyzer.load.raw
    real = module.counter_samples
    monkeypatch.setattr(module, "counter_samples", lambda *a: calls.append(1) or real(*a))
    events: list[Event] = []
    for i in range(200):
        events += launch_pair(100.0 * i, 10 + i, 100.0 * i + 30, 40, ext=i + 1)
        events += [counter("queue", 100.0 * i + k, depth=float(i * 10 + k)) for k in range(10)]
    events.append(counter("queue", 1e6, depth=-1.0))  # the very last event (the stream's tail path)
    m = loaded(write_trace, document(events), use_cache=False)
    # THEN every sample is there, in time order
    ts, value = m.counters.of(0)
    assert len(ts) == m.report.counter_samples == 2001
    assert value[:-1].tolist() == [float(v) for v in range(2000)] and value[-1] == -1.0
    assert np.all(np.diff(ts) > 0)
    assert len(calls) > 5  # read batch by batch, on the path under test


def test_counters_survive_the_cache(write_trace: WriteTrace) -> None:
    first = loaded(write_trace, counters_doc())
    second = loaded(write_trace, counters_doc())  # the same content: read back from the cache
    assert second.counters.series == first.counters.series
    assert np.array_equal(second.counters.ts, first.counters.ts)
    assert np.array_equal(second.counters.value, first.counters.value)
    assert second.report.counter_samples == 12


def test_decimation_keeps_the_extremes_within_the_budget() -> None:
    ts = np.arange(10_000, dtype=np.float64)
    value = np.sin(ts / 100.0)
    value[4321] = 50.0  # one spike
    small_ts, small_value = decimate(ts, value, 200)
    assert len(small_ts) <= 200
    assert float(small_value.max()) == 50.0 and float(small_value.min()) == float(value.min())
    assert np.all(np.diff(small_ts) > 0)
    same = decimate(ts[:10], value[:10], 200)
    assert np.array_equal(same[0], ts[:10])


def test_the_json_has_the_series_in_columns_bounded(
    write_trace: WriteTrace, monkeypatch: Any, tmp_path: Path
) -> None:
    monkeypatch.setattr(counters_module, "MAX_POINTS", 4)
    monkeypatch.setattr(counters_module, "MAX_SERIES", 3)
    a = analyze(load(write_trace(counters_doc(samples=50)), use_cache=False))
    doc = json.loads(json.dumps(to_json(a)))
    assert doc["source"]["counter_samples"] == 50 * 2 + 2
    assert [c["name"] for c in doc["counters"]] == ["GPU memory.allocated", "GPU memory.reserved", "Power"]
    allocated = doc["counters"][0]
    assert allocated["samples"] == 50 and len(allocated["ts_us"]) == len(allocated["value"]) <= 4
    assert min(allocated["value"]) == 100 and max(allocated["value"]) == 149
    assert any("1 more series" in n for n in doc["source"]["notes"])


def test_a_trace_without_counters_has_an_empty_list(write_trace: WriteTrace) -> None:
    events = launch_pair(0, 1, 30, 40, ext=1)
    a = analyze(load(write_trace(document(events)), use_cache=False))
    doc = to_json(a)
    assert doc["counters"] == [] and doc["source"]["counter_samples"] == 0


def test_timeline_draws_counter_rows_and_the_report_escapes_their_names(
    write_trace: WriteTrace, tmp_path: Path
) -> None:
    a = analyze(load(write_trace(counters_doc()), use_cache=False))
    sl = extract(a.model, a, a.window.start_us, a.window.end_us)
    # THEN one row per series with a non-zero value in the range, after the event rows
    labels = [r.label for r in sl.counters]
    assert labels == ["GPU memory.allocated", "GPU memory.reserved", "Power (W)", HOSTILE]
    fig = figure(sl)
    lines = [t for t in fig.data if t.name == "counter"]
    assert len(lines) == 4
    ticks = list(fig.layout.yaxis.ticktext)
    assert len(ticks) == len(sl.rows) + 4 and ticks[-1] == "&lt;script&gt;alert(1)&lt;/script&gt;"
    # AND in the HTML report the hostile series name is text, never markup
    html_text = render(a)
    assert HOSTILE not in html_text


def test_a_model_stored_before_counters_and_stacks_still_reads(
    write_trace: WriteTrace, tmp_path: Path
) -> None:
    # GIVEN a model written the current way, then stripped to the earlier layout (a dashboard store's entry)
    m = loaded(write_trace, counters_doc(), use_cache=False)
    folder = tmp_path / "stored"
    folder.mkdir()
    cache.write_model(folder, m)
    table = pq.read_table(folder / "events.parquet")
    pq.write_table(table.drop_columns(["stack"]), folder / "events.parquet")
    meta = json.loads((folder / "model.json").read_text())
    del meta["counters"]
    del meta["report"]["counter_samples"]
    (folder / "model.json").write_text(json.dumps(meta))
    # WHEN read back
    old = cache.read_model(folder, "old")
    # THEN it has no stacks and no counters, and everything else
    assert old.event_count == m.event_count and np.all(old.events.stack == -1)
    assert len(old.counters) == 0 and old.report.counter_samples == 0


def test_the_dashboard_timeline_draws_and_explains_a_counter(write_trace: WriteTrace, tmp_path: Path) -> None:
    # GIVEN a trace with counters uploaded to a dashboard store and analysed
    services = Services(Store(tmp_path / "store"), None, 64 << 20)
    path = write_trace(counters_doc())
    entry = services.store.add("counters.json", io.BytesIO(path.read_bytes()), 64 << 20)
    assert analyse_entry(str(services.store.root), entry.id) == "ready"
    view = explorer.full_view(services.store.analysis(entry.id))
    # WHEN its timeline is drawn
    fig, _status = explorer.draw(services, entry.id, view)
    lines = [t for t in fig.data if t.name == "counter"]
    assert len(lines) == 4
    # THEN clicking a point of the memory line says the value in force at that time
    first = lines[0]
    click = {"points": [{"x": first.x[2], "y": first.y[2], "customdata": first.customdata[2]}]}
    shown = texts(explorer.details(services, entry.id, view, click))
    assert shown[0] == "counter: GPU memory.allocated"
    assert shown[1].startswith("102 at ")
