"""The whole run's step timing (a bundle's sidecar) set against the profiled steps."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stallscope.analyzer.analysis import analyze
from stallscope.analyzer.document.analysis import to_json
from stallscope.analyzer.load.loader import load
from stallscope.analyzer.passes.runtiming import run_timing
from stallscope.commands import main

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def _timing(host_ms: list[object], device_ms: list[object] | None = None, count: int | None = None) -> dict:
    return {
        "count": len(host_ms) if count is None else count,
        "steps": {"host_ms": host_ms, "device_ms": device_ms},
    }


def test_steady_state_leaves_out_the_first_step() -> None:
    # GIVEN a run whose first step (warm-up) took 900 ms and the others 10-14 ms
    timing = _timing([900.0, 10.0, 12.0, 14.0, 12.0])
    # WHEN summarised against profiled steps of 12 ms
    t = run_timing(timing, [12_000.0, 12_000.0])
    # THEN the steady state is steps 2.. and the profiled steps are typical
    assert t is not None and t.steps == 5
    assert (t.host.count, t.host.median_ms, t.host.min_ms, t.host.max_ms) == (4, 12.0, 10.0, 14.0)
    assert t.host.p90_ms == pytest.approx(13.4)
    assert t.device is None
    assert t.profiled_median_ms == 12.0 and t.profiled_ratio == pytest.approx(1.0) and t.typical


def test_a_slow_window_is_not_typical() -> None:
    t = run_timing(_timing([50.0, 10.0, 10.0, 10.0], [None, 8.0, 9.0, 10.0]), [20_000.0])
    assert t is not None and t.profiled_ratio == pytest.approx(2.0) and t.typical is False
    assert t.device is not None and (t.device.count, t.device.median_ms) == (3, 9.0)


def test_truncated_lists_keep_the_run_count_and_junk_is_ignored() -> None:
    t = run_timing(_timing([5.0, "x", None, -1.0, True, 7.0, float("nan")], count=20_000), [])
    assert t is not None and t.steps == 20_000
    assert (t.host.count, t.host.median_ms) == (1, 7.0)
    assert t.profiled_median_ms is None and t.typical is None


def test_nothing_usable_is_none() -> None:
    assert run_timing({}, [1.0]) is None
    assert run_timing({"steps": {"host_ms": "no"}}, [1.0]) is None


def test_bundle_run_steps_in_json_and_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a bundle: a sample trace (3 profiled steps of ~8 ms) and a sidecar timing 6 steps of the run
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    shutil.copy(SAMPLES / "worked_example_serial.pt.trace.json.gz", bundle / "trace.pt.trace.json.gz")
    sidecar = {
        "schema": "stallscope.sidecar/1",
        "run": {},
        "sync_sites": [],
        "step_timing": _timing([400.0, 8.0, 8.0, 16.0, 16.0, 16.0]),
    }
    (bundle / "sidecar.json").write_text(json.dumps(sidecar))
    # WHEN analysed
    doc = to_json(analyze(load(bundle, use_cache=False)))
    code = main(["analyze", "--no-cache", str(bundle)])
    out = capsys.readouterr().out
    # THEN the run's steady state (median 16 ms) shows the profiled 8 ms steps were not typical
    run = doc["run_steps"]
    assert run["steps"] == 6 and run["host_ms"]["median_ms"] == 16.0 and run["typical"] is False
    assert run["profiled_median_ms"] == pytest.approx(8.01, abs=0.01)
    assert code == 0 and "6 steps timed: host median 16.00 ms" in out and "50% faster" in out


def test_plain_trace_has_no_run_steps() -> None:
    doc = to_json(analyze(load(SAMPLES / "worked_example_serial.pt.trace.json.gz")))
    assert doc["run_steps"] is None
