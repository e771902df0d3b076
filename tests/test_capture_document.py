"""A capture's block in the analysis document (``source.capture``), read from the bundle's sidecar."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from stallscope.analyzer.analysis import analyze
from stallscope.analyzer.document.analysis import to_json
from stallscope.analyzer.load.loader import load

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
GOOD = {"run_id": "train-1a2b", "index": 3, "at": "2026-12-02T01:05:00Z", "trigger": "every"}


def _capture_doc(tmp_path: Path, run: dict[str, Any]) -> dict[str, Any]:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    shutil.copy(SAMPLES / "worked_example_serial.pt.trace.json.gz", bundle / "trace.pt.trace.json.gz")
    sidecar = {"schema": "stallscope.sidecar/1", "run": run, "sync_sites": [], "step_timing": {}}
    (bundle / "sidecar.json").write_text(json.dumps(sidecar))
    return to_json(analyze(load(bundle, use_cache=False)))


def test_a_capture_names_its_run_time_and_steps(tmp_path: Path) -> None:
    doc = _capture_doc(tmp_path, {"capture": GOOD, "profiled_steps": [40, 44]})
    assert doc["source"]["capture"] == {**GOOD, "steps": [40, 44]}


@pytest.mark.parametrize(
    "bad",
    [
        {"index": 0},
        {"index": True},
        {"index": "3"},
        {"run_id": ""},
        {"run_id": 7},
        {"trigger": "cron"},
        {"at": None},
    ],
)
def test_a_malformed_capture_block_is_no_capture(tmp_path: Path, bad: dict[str, Any]) -> None:
    doc = _capture_doc(tmp_path, {"capture": {**GOOD, **bad}, "profiled_steps": [40, 44]})
    assert doc["source"]["capture"] is None


def test_a_plain_trace_is_no_capture() -> None:
    doc = to_json(analyze(load(SAMPLES / "worked_example_serial.pt.trace.json.gz")))
    assert doc["source"]["capture"] is None
