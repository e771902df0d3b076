"""Regression inputs in ``tests/corpus/``: each once crashed or hung stallscope (issue 14, and anything
``benchmarks/fuzz.py`` saves there). Every one must meet the contract of ``tests/fuzzing.py``: exit 0 or
2, one line and no traceback, within its time bound, the same JSON bytes every time. A few carry the
exact answer they must now give.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fuzzing import CORPUS, check_contract

from stallscope.commands import main

ENTRIES = sorted(p for p in CORPUS.iterdir() if not p.name.startswith((".", "README")))


@pytest.mark.parametrize("path", ENTRIES, ids=[p.name for p in ENTRIES])
def test_corpus_input_meets_the_contract(path: Path, tmp_path: Path) -> None:
    # GIVEN an input that once broke stallscope WHEN analysed THEN it meets the contract
    check_contract(path, tmp_path)


def _analyse(name: str, tmp_path: Path) -> dict[str, object]:
    out = tmp_path / "a.json"
    assert main(["analyze", str(CORPUS / name), "--json", str(out), "--no-cache", "-q"]) == 0
    doc = json.loads(out.read_text())
    assert isinstance(doc, dict)
    return doc


def test_hang_second_launch_recorded_first_gives_a_path_that_tiles_the_window(tmp_path: Path) -> None:
    # GIVEN 5 events whose second launch is recorded before everything else (the walk used to loop)
    doc = _analyse("hang_second_launch_recorded_first.json", tmp_path)
    # THEN the critical path still spans the window exactly
    path, window = doc["critical_path"], doc["window"]
    assert isinstance(path, dict) and isinstance(window, dict)
    assert path["length_us"] == pytest.approx(window["dur_us"])
    assert window["dur_us"] == pytest.approx(1035.0)


def test_superscript_step_number_keeps_the_step(tmp_path: Path) -> None:
    # GIVEN ``ProfilerStep#²`` (str.isdigit accepts it, int() does not) THEN it is a step, numbered by order
    doc = _analyse("superscript_step.json", tmp_path)
    assert doc["steps"] == [
        {
            "name": "ProfilerStep#²",
            "start_us": 0.0,
            "dur_us": 100.0,
            "device_busy_us": 20.0,
            "device_idle_us": 80.0,
            "host_sync_wait_us": 0.0,
        }
    ]


def test_superscript_ids_are_absent_ids(tmp_path: Path) -> None:
    # GIVEN a launch and kernel whose correlation is "²" THEN the id is absent and the ac2g flow links them
    doc = _analyse("superscript_ids.json", tmp_path)
    source, summary = doc["source"], doc["summary"]
    assert isinstance(source, dict) and isinstance(summary, dict)
    assert source["events"] == 6 and source["unlinked_device_events"] == 0
    assert summary["device_busy_us"] == 20.0


def test_only_device_events(tmp_path: Path) -> None:
    # GIVEN two kernels and no host event THEN the device figures are computed and the path is device/idle
    doc = _analyse("only_device_events.json", tmp_path)
    summary, path = doc["summary"], doc["critical_path"]
    assert isinstance(summary, dict) and isinstance(path, dict)
    assert summary["device_busy_us"] == 20.0 and summary["device_idle_us"] == 10.0
    assert path["breakdown_us"] == {
        "host": 0.0,
        "input": 0.0,
        "device": 20.0,
        "launch": 0.0,
        "sync": 0.0,
        "idle": 10.0,
        "communication": 0.0,
        "untraced": 0.0,
    }


def test_huge_frame_line_is_not_a_call_site(tmp_path: Path) -> None:
    # GIVEN a python frame with a 5,000-digit line number THEN no call site names it
    doc = _analyse("huge_frame_line.json", tmp_path)
    text = json.dumps(doc)
    assert "99999" not in text


@pytest.mark.parametrize("name", ["sidecar_line_1e400", "sidecar_infinity", "sidecar_400_digit_times"])
def test_bad_sidecar_values_are_dropped(name: str, tmp_path: Path) -> None:
    # GIVEN a sidecar with a record whose line or times are impossible, then a good record (line 7)
    doc = _analyse(name, tmp_path)
    # THEN the bad record is dropped and the sync takes the good record's exact line
    syncs = doc["syncs"]
    assert isinstance(syncs, list) and len(syncs) == 1
    assert syncs[0]["call_site"] == {"file": "t.py", "line": 7, "function": "f", "library": False}
    assert syncs[0]["wait_us"] == 25.0  # from the call's start to the end of the kernel it waited for


def test_check_exits_2_not_1_when_it_cannot_analyse(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN an analysis that fails with a bug on some input
    def broken(*_args: object, **_kwargs: object) -> object:
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr("stallscope.analyzer.analysis.analyze", broken)
    monkeypatch.setattr("stallscope.analysing.analyze", broken)
    trace = str(CORPUS / "superscript_step.json")
    # WHEN checked THEN exit 2 (1 means "a limit failed") and one line, no traceback
    assert main(["check", trace, "--max-idle-frac", "0.5", "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"stallscope: internal error on {trace}: ZeroDivisionError: float division by zero "
        "(set STALLSCOPE_TRACEBACK=1 for details; please report it)\n"
    )


def test_subnormal_kernel_duration_gives_no_tensor_core_finding(tmp_path: Path) -> None:
    # GIVEN one non-GEMM kernel lasting 5e-324 µs on a compute-capability 8 device: busy time is positive
    # and its 10% rounds to 0 (the tensor-core rule used to take the min of an empty set of GEMM names)
    doc = _analyse("subnormal_kernel_duration.json", tmp_path)
    summary, findings = doc["summary"], doc["findings"]
    assert isinstance(summary, dict) and isinstance(findings, list)
    # THEN the busy time is that subnormal duration and no rule speaks of tensor cores
    assert summary["device_busy_us"] == 5e-324
    assert [f["rule"] for f in findings] == ["low_utilization"]


def test_superscript_counter_pid_is_no_device(tmp_path: Path) -> None:
    # GIVEN counter samples under pid "²" (str.isdigit accepts it, int() does not) and a device label "MTIA ²"
    doc = _analyse("superscript_counter_pid.json", tmp_path)
    counters = doc["counters"]
    assert isinstance(counters, list)
    # THEN the series is kept, on no device, and the one under pid 0 belongs to device 0
    assert [(c["name"], c["pid"], c["device"], c["samples"]) for c in counters] == [
        ("SM occupancy", "²", -1, 2),
        ("power", "0", 0, 1),
    ]
