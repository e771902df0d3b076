"""Golden checks on the real traces in ``../shared/traces`` (see its MANIFEST.tsv); skipped when absent.

The pinned numbers were measured with the loader and checked against the raw JSON with the stdlib
(``test_golden_numbers_agree_with_the_raw_json`` keeps checking that).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stallscope.analyzer.analysis import analyze, analyze_model
from stallscope.analyzer.core.model import LaneKind, TraceModel
from stallscope.analyzer.load.loader import load
from stallscope.commands import main

pytestmark = pytest.mark.shared

DLRM = "param_dlrm_v100_8rank"
A100 = "NVIDIA A100-PG509-200"
V100 = "Tesla V100-SXM2-32GB"


@dataclass(frozen=True)
class Golden:
    events: int  # timed events kept in the model ('X' and instants)
    host_lanes: int
    stream_lanes: int
    devices: tuple[str, ...]
    steps: int  # ProfilerStep#N spans on host threads
    rank: int | None
    activities: int  # kernels + memcpy + memset
    linked: int  # activities whose launch call is in the trace
    basis: str
    window_us: float
    busy_us: float  # of the main device, inside the window


GOLDEN: dict[str, Golden] = {
    "hta_a100_alexnet_cuda_sync.pt.trace.json.gz": Golden(
        870, 1, 3, (A100,), 0, 0, 98, 98, "trace", 43425365.0, 66141.0
    ),
    "hta_a100_alexnet_overlaid_critical_path.pt.trace.json.gz": Golden(
        840, 1, 3, (A100,), 0, 0, 98, 98, "trace", 41579901.0, 49758.0
    ),
    "hta_a100_item_event_sync.pt.trace.json.gz": Golden(35, 1, 1, (A100,), 1, 0, 5, 5, "steps", 3154.0, 51.0),
    "hta_a100_multistream_event_sync.pt.trace.json.gz": Golden(
        59, 1, 3, (A100,), 0, 0, 6, 6, "trace", 19930.0, 372.0
    ),
    "hta_a100_nccl_2rank_rank0.pt.trace.json.gz": Golden(
        26935, 3, 2, (A100,), 3, 0, 3774, 3774, "steps", 667225.9580078125, 157500.078125
    ),
    "hta_v100_ns_resolution_rank0.pt.trace.json.gz": Golden(
        45422, 3, 1, (V100,), 5, 0, 6095, 6095, "steps", 394279.5, 384196.0
    ),
    "tracelens_b300_moe_small.pt.trace.json.gz": Golden(
        272, 1, 1, ("NVIDIA B300 SXM6 AC",), 0, None, 36, 36, "trace", 2450.5712890625, 231.45361328125
    ),
    "tracelens_h100_bert_small_pystack.pt.trace.json.gz": Golden(
        2298, 2, 1, ("NVIDIA H100 80GB HBM3",), 1, None, 61, 61, "steps", 4426.114013671875, 309.437744140625
    ),
    f"{DLRM}/worker0_step_12.1694128201545.pt.trace.json.gz": Golden(
        2462, 2, 4, (V100,), 1, 0, 261, 261, "steps", 14455.0, 6590.0
    ),
    f"{DLRM}/worker1_step_12.1694128201556.pt.trace.json.gz": Golden(
        2529, 2, 4, (V100,), 1, 1, 326, 262, "steps", 19901.0, 12321.0
    ),
    f"{DLRM}/worker3_step_12.1694128201557.pt.trace.json.gz": Golden(
        2554, 2, 4, (V100,), 1, 3, 337, 273, "steps", 19313.0, 10708.0
    ),
}

#: DLRM: utilization differs by rank; ranks 1 and 3 ran 64 kernels launched before the profiler started
DLRM_UNLINKED = [0, 64, 0, 64, 0, 0, 0, 0]


@pytest.fixture(params=sorted(GOLDEN))
def golden_trace(request: pytest.FixtureRequest, shared_traces: Path) -> tuple[Path, Golden]:
    return shared_traces / request.param, GOLDEN[request.param]


@cache
def model_of(path: Path) -> TraceModel:
    (model,) = load(path, use_cache=False).models
    return model


def test_every_trace_in_the_folder_has_a_golden_entry(shared_traces: Path) -> None:
    # (the field/ traces have their own tests, on their MANIFEST's expectations: test_field_traces.py)
    files = {str(p.relative_to(shared_traces)) for p in shared_traces.rglob("*.json.gz")}
    singles = {f for f in files if not f.startswith((DLRM, "field/"))}
    assert singles <= set(GOLDEN)
    assert len([f for f in files if f.startswith(DLRM)]) == 8


def test_golden_trace_loads_with_the_pinned_shape(golden_trace: tuple[Path, Golden]) -> None:
    path, want = golden_trace
    m = model_of(path)
    ev = m.events
    assert m.event_count == want.events
    assert len(m.lanes_of(LaneKind.HOST)) == want.host_lanes
    assert len(m.lanes_of(LaneKind.STREAM)) == want.stream_lanes
    assert tuple(d.name for d in m.devices) == want.devices
    assert len(m.steps) == want.steps
    assert m.rank == want.rank
    act = ev.activity_mask()
    assert int(np.count_nonzero(act)) == want.activities
    assert int(np.count_nonzero(act & (ev.launch >= 0))) == want.linked
    assert m.report.unlinked_device_events == want.activities - want.linked
    assert m.report.skipped == {}
    assert m.report.unknown_categories == {}
    assert m.report.unknown_phases == {}


def test_golden_trace_window_and_device_figures(golden_trace: tuple[Path, Golden]) -> None:
    path, want = golden_trace
    a = analyze_model(model_of(path))
    assert a.window.basis.value == want.basis
    assert a.window.dur_us == pytest.approx(want.window_us, abs=1e-6)
    assert a.summary.device_busy_us == pytest.approx(want.busy_us, abs=1e-6)
    for d in a.devices:
        assert 0 < d.busy_us <= a.window.dur_us
        assert d.busy_us + d.idle_us == pytest.approx(a.window.dur_us)
        assert 0.0 <= d.utilization <= 1.0
    for s in a.steps:
        assert 0 <= s.device_busy_us <= s.dur_us
        assert a.window.start_us <= s.start_us and s.start_us + s.dur_us <= a.window.end_us


def test_launch_links_are_consistent(golden_trace: tuple[Path, Golden]) -> None:
    # every linked device activity points at an API call with its correlation, issued before it ran
    # (up to clock rounding), and every op link points at an enclosing op on the same thread
    m = model_of(golden_trace[0])
    ev = m.events
    kids = np.flatnonzero(ev.activity_mask() & (ev.launch >= 0))
    calls = ev.launch[kids]
    assert np.all(ev.api[calls] != 0)
    assert np.array_equal(ev.correlation[calls], ev.correlation[kids])
    assert np.all(ev.ts[calls] <= ev.ts[kids] + 1.0)
    with_op = np.flatnonzero(ev.op >= 0)
    ops = ev.op[with_op]
    assert np.array_equal(ev.lane[ops], ev.lane[with_op])
    assert np.all((ev.ts[ops] <= ev.ts[with_op]) & (ev.end[ops] >= ev.end[with_op]))
    has_parent = np.flatnonzero(ev.parent >= 0)
    parents = ev.parent[has_parent]
    assert np.all(ev.ts[parents] <= ev.ts[has_parent]) and np.all(ev.end[parents] > ev.ts[has_parent])


# ----- cross-check of the pinned numbers against the raw JSON (stdlib only) ------------------------------

ACTIVITY_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
DEVICE_CATS = ACTIVITY_CATS | {"cuda_sync", "gpu_user_annotation"}
NOT_HOST_WORK = {"Trace", "overhead", "cpu_instant_event"}


def raw_facts(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    timed = [e for e in doc["traceEvents"] if e.get("ph") in ("X", "i", "I")]
    acts = [e for e in timed if e.get("cat") in ACTIVITY_CATS]
    calls = {
        e["args"]["correlation"]
        for e in timed
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    streams = set()
    for e in timed:
        if e.get("cat") in DEVICE_CATS:
            args = e.get("args", {})
            stream = args.get("stream", -1 if e.get("cat") == "cuda_sync" else e["tid"])
            if stream >= 0:
                streams.add((args.get("device", e["pid"]), stream))
    host_threads = {
        (e["pid"], e["tid"])
        for e in timed
        if e.get("ph") == "X" and e.get("cat") not in DEVICE_CATS | NOT_HOST_WORK
    }
    used = {d for d, _ in streams}
    return {
        "events": len(timed),
        "activities": len(acts),
        "linked": sum(1 for e in acts if e["args"].get("correlation") in calls),
        "steps": sum(
            1
            for e in timed
            if e["name"].startswith("ProfilerStep#") and e.get("cat") in ("user_annotation", "cpu_op")
        ),
        "rank": doc.get("distributedInfo", {}).get("rank"),
        "stream_lanes": len(streams),
        "host_lanes": len(host_threads),
        "devices": tuple(p["name"] for p in doc.get("deviceProperties", []) if p["id"] in used),
    }


def test_golden_numbers_agree_with_the_raw_json(golden_trace: tuple[Path, Golden]) -> None:
    path, want = golden_trace
    raw = raw_facts(path)
    assert raw == {
        "events": want.events,
        "activities": want.activities,
        "linked": want.linked,
        "steps": want.steps,
        "rank": want.rank,
        "stream_lanes": want.stream_lanes,
        "host_lanes": want.host_lanes,
        "devices": want.devices,
    }


# ----- particular traces --------------------------------------------------------------------------------


def test_critical_path_flows_are_not_unknown_categories(shared_traces: Path) -> None:
    # GIVEN HTA's overlaid critical-path output: the input trace plus 384 'critical_path' flow events
    m = model_of(shared_traces / "hta_a100_alexnet_overlaid_critical_path.pt.trace.json.gz")
    # THEN flows are not timed events, so nothing is reported unknown; only ac2g flows count as unpaired
    assert m.report.unknown_categories == {}
    assert m.report.unknown_phases == {}
    assert "critical_path" not in m.strings
    assert m.report.unpaired_flows == 192  # launch flows with one end only: 'f' on calls with no device side


def test_ns_resolution_trace_keeps_fractional_times(shared_traces: Path) -> None:
    m = model_of(shared_traces / "hta_v100_ns_resolution_rank0.pt.trace.json.gz")
    assert m.display_time_unit == "ns"
    assert np.count_nonzero(m.events.dur != np.round(m.events.dur)) > 1000
    assert (m.rank, m.world_size) == (0, 1)


def test_python_stack_trace_links_python_frames(shared_traces: Path) -> None:
    m = model_of(shared_traces / "tracelens_h100_bert_small_pystack.pt.trace.json.gz")
    python = m.events.kind == 3  # EventKind.PYTHON
    assert int(np.count_nonzero(python)) == 1385
    with_parent = python & (m.events.py_parent >= 0)
    assert np.count_nonzero(with_parent) > 1000
    assert np.all(m.events.kind[m.events.py_parent[with_parent]] == 3)


def test_dlrm_folder_has_eight_ranks(shared_traces: Path, tmp_path: Path) -> None:
    # GIVEN the 8 rank files of one DLRM step
    folder = shared_traces / DLRM
    traces = load(folder, use_cache=False)
    # THEN one model per rank, in rank order, each from its own worker file
    assert traces.ranks == list(range(8))
    assert [Path(m.path).name.split("_")[0] for m in traces.models] == [f"worker{r}" for r in range(8)]
    assert [m.report.unlinked_device_events for m in traces.models] == DLRM_UNLINKED
    assert all(m.world_size == 8 for m in traces.models)
    a = analyze(traces, 3)
    assert a.model.rank == 3 and sorted(a.per_rank) == list(range(8))
    # ... and the CLI's JSON has every rank's summary
    out = tmp_path / "dlrm.json"
    assert main(["analyze", str(folder), "--json", str(out), "-q", "--no-cache"]) == 0
    doc = json.loads(out.read_text())
    assert doc["source"]["ranks"] == list(range(8))
    assert doc["source"]["rank"] == 0
    assert [r["rank"] for r in doc["per_rank"]] == list(range(8))
    per_rank_busy = [r["summary"]["device_busy_us"] for r in doc["per_rank"]]
    assert per_rank_busy[0] == doc["summary"]["device_busy_us"] == 6590.0
    assert per_rank_busy[1] == 12321.0 and per_rank_busy[3] == 10708.0
    assert all(0 <= r["summary"]["device_utilization"] <= 1 for r in doc["per_rank"])
