"""Real traces from the field (``../shared/traces/field``, see its MANIFEST.tsv): the loader, call sites,
counters and folders; skipped when absent (the verdicts are in test_field_traces.py).

Each test checks what the manifest's ``expect`` column asks of the loader, the call sites and the folder
handling, against counts taken from the raw JSON with the standard library.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stallscope.analyzer.analysis import Analysis, analyze
from stallscope.analyzer.core.names import ApiKind, EventKind
from stallscope.analyzer.document.analysis import to_json
from stallscope.analyzer.load.loader import load
from stallscope.dashboard.timeline import extract

pytestmark = pytest.mark.shared

MTIA = "hta_mtia_inference_rank0.pt.trace.json.gz"
RANGES = "hta_a100_cupti_range_profiler.pt.trace.json.gz"
NW0 = "kineto_v100_resnet50_nw0.pt.trace.json.gz"


@pytest.fixture
def field(shared_traces: Path) -> Path:
    folder = shared_traces / "field"
    if not folder.is_dir():
        pytest.skip("../shared/traces/field not present")
    return folder


@cache
def raw_events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path) as f:
        events: list[dict[str, Any]] = json.load(f)["traceEvents"]
    return events


@cache
def analysed(path: Path) -> Analysis:
    return analyze(load(path, use_cache=False))


def test_mtia_activity_is_device_work(field: Path) -> None:
    # GIVEN an MTIA inference trace: command-processor events on the device's process, runtime calls
    path = field / MTIA
    raw = Counter(e["name"] for e in raw_events(path) if e.get("cat") == "mtia_ccp_events")
    a = analysed(path)
    ev = a.model.events
    # THEN execution and DMA commands are device activity on MTIA 17's stream lanes; waits are not
    acts = ev.activity_mask()
    assert int(np.count_nonzero(acts)) == raw["pe_exe"] + raw["merge"] + raw["remote"] + raw["dma_request"]
    assert int(np.count_nonzero(ev.kind == EventKind.MEMCPY)) == raw["dma_request"]
    assert {a.model.lanes[int(lane)].device for lane in np.unique(ev.lane[acts])} == {17}
    assert [d.name for d in a.model.devices] == ["ARTEMIS"]
    # ... linked to their runtime calls wherever the command carries a correlation
    with_corr = sum(
        1
        for e in raw_events(path)
        if e.get("cat") == "mtia_ccp_events" and e["name"] in ("merge", "remote", "dma_request")
        if "correlation" in e.get("args", {})
    )
    assert int(np.count_nonzero(acts & (ev.launch >= 0))) == with_corr
    # ... runtime calls are launches, copies and syncs
    api = Counter(ApiKind(int(k)).name for k in ev.api[ev.api > 0])
    assert api["SYNC_STREAM"] == 113 and api["EVENT_RECORD"] == 224 and api["LAUNCH"] == 74
    # AND the analysis is not CPU-only: the device was busy most of the window
    assert a.summary.device_utilization > 0.5
    assert a.summary.host_sync_wait_us > 0


def test_range_profiler_ranges_are_device_time(field: Path) -> None:
    path = field / RANGES
    ranges = [e for e in raw_events(path) if e.get("cat") == "cuda_profiler_range"]
    a = analysed(path)
    ev = a.model.events
    assert int(np.count_nonzero(ev.kind == EventKind.KERNEL)) == len(ranges) == 77
    # the ranges tile the profiled region back to back: their union is their sum
    assert a.summary.device_busy_us == pytest.approx(sum(e["dur"] for e in ranges))
    assert a.summary.device_utilization > 0.5
    assert [d.id for d in a.devices] == [0]


def test_legacy_call_stacks_name_the_syncs_of_resnet50(field: Path) -> None:
    a = analysed(field / NW0)
    assert a.syncs
    assert {str(s.call_site) for s in a.syncs} == {"resnet50_profiler_api.py:44 in <module>"}
    assert not any(s.op and s.op.startswith("ProfilerStep") for s in a.syncs)
    titles = [f.title for f in a.findings]
    assert not any("no python stack" in t or "ProfilerStep" in t for t in titles)
    pageable = [f for f in a.findings if f.rule == "false_sync_pageable_copy"]
    assert len(pageable) == 1 and pageable[0].count == len(a.syncs)


def test_two_runs_of_one_worker_are_not_two_ranks(field: Path, tmp_path: Path) -> None:
    # GIVEN a folder holding two traces without distributedInfo (links to the field traces)
    for name in ("tracelens_mi210_gpu_only.pt.trace.json.gz", MTIA):
        (tmp_path / name).symlink_to(field / name)
    # WHEN it is loaded
    traces = load(tmp_path, use_cache=False)
    # THEN the first is analysed as the only "rank", and a note says the other is a separate run
    assert traces.ranks == [0]
    assert Path(traces.models[0].path).name == MTIA
    (note,) = traces.notes
    assert "separate run, not ranks" in note and "tracelens_mi210_gpu_only" in note


def test_range_profiler_counters_are_kept_exported_and_drawn(field: Path) -> None:
    path = field / RANGES
    ranges = [e for e in raw_events(path) if e.get("cat") == "cuda_profiler_range"]
    metrics = sorted({k for e in ranges for k in e["args"]})
    a = analysed(path)
    c = a.model.counters
    # THEN every metric of every range is a sample, one series per metric, on GPU 0
    assert sorted(s.name for s in c.series) == metrics
    assert a.model.report.counter_samples == sum(len(e["args"]) for e in ranges)
    assert {s.device for s in c.series} == {0}
    doc = to_json(a)
    ffma = next(s for s in doc["counters"] if s["name"].endswith("ffma_pred_on.sum"))
    assert ffma["samples"] == 77
    assert ffma["value"] == [float(e["args"][ffma["name"]]) for e in sorted(ranges, key=lambda e: e["ts"])]
    # AND the timeline shows the series that are not zero throughout
    sl = extract(a.model, a, a.window.start_us, a.window.end_us)
    nonzero = {k for k in metrics if any(e["args"][k] for e in ranges)}
    assert {r.label for r in sl.counters} == nonzero
