"""Findings (one per problem and call site) and the `stallscope check` CI gate."""

from __future__ import annotations

from pathlib import Path

import pytest
from _kineto import SAMPLES

from stallscope.analyzer.analysis import Analysis, analyze
from stallscope.analyzer.findings.base import Severity
from stallscope.analyzer.load.loader import load
from stallscope.analyzer.passes.replay import Scenario
from stallscope.commands import main


def analysed(name: str) -> Analysis:
    return analyze(load(SAMPLES / name))


def rules(a: Analysis) -> list[str]:
    return [f.rule for f in a.findings]


def test_item_in_a_loop_is_the_top_finding_with_its_line_count_and_saving() -> None:
    # GIVEN .item() every step at train.py:42
    a = analysed("item_in_loop.pt.trace.json.gz")
    # THEN the top finding is that sync, at that line, 4 times, high severity, with the replay's saving
    top = a.findings[0]
    assert top.rule == "false_sync_scalar_read" and top.count == 4 and top.severity == Severity.HIGH
    assert str(top.call_site) == "train.py:42 in train_step"
    assert a.whatif is not None
    assert top.est_saving_us == pytest.approx(a.whatif.saving(Scenario.NO_AVOIDABLE_SYNCS))
    assert top.time_us == pytest.approx(sum(s.wait_us + s.bubble_us for s in a.syncs if s.avoidable))
    assert "non_blocking=True" in top.advice and ".item()" in top.advice


def test_pageable_copies_and_blanket_syncs_are_found_with_the_right_kind() -> None:
    pageable = analysed("pageable_copy_loop.pt.trace.json.gz")
    (copy,) = [f for f in pageable.findings if f.rule == "false_sync_pageable_copy"]
    assert (
        copy.count == 4 and str(copy.call_site) == "train.py:30 in train_step" and "pin_memory" in copy.advice
    )
    serial = analysed("worked_example_serial.pt.trace.json.gz")
    (blanket,) = [f for f in serial.findings if f.rule == "false_sync_blanket"]
    assert blanket.count == 3 and blanket.severity == Severity.HIGH
    assert blanket.est_saving_us == pytest.approx(4016.0, abs=5)  # the two 2 ms bubbles


def test_launch_bound_and_input_bound_loops_are_found() -> None:
    launch = analysed("launch_bound.pt.trace.json.gz")
    assert rules(launch)[0] == "launch_bound" and launch.findings[0].severity == Severity.HIGH
    assert "CUDA graph" in launch.findings[0].advice
    loading = analysed("input_bound.pt.trace.json.gz")
    assert rules(loading)[0] == "input_bound"
    assert loading.whatif is not None
    assert loading.findings[0].est_saving_us == pytest.approx(
        loading.whatif.saving(Scenario.INPUT_OVERLAPPED)
    )


@pytest.mark.parametrize(
    "name", ["clean_pipeline.pt.trace.json.gz", "worked_example_pipelined.pt.trace.json.gz"]
)
def test_clean_loops_stay_silent(name: str) -> None:
    # a well pipelined loop with one final synchronize: nothing to fix
    assert analysed(name).findings == ()


def test_real_traces_top_findings(shared_traces: Path) -> None:
    # AlexNet's 16 pageable host-to-device copies make a finding; the device-bound ns trace has none high
    alexnet = analyze(load(shared_traces / "hta_a100_alexnet_cuda_sync.pt.trace.json.gz"))
    (copies,) = [f for f in alexnet.findings if f.rule == "false_sync_pageable_copy"]
    assert copies.count == 16
    busy = analyze(load(shared_traces / "hta_v100_ns_resolution_rank0.pt.trace.json.gz"))
    assert not [f for f in busy.findings if f.severity == Severity.HIGH]


def test_check_on_a_cpu_only_run_counts_would_be_syncs_and_skips_device_limits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN a CPU-only recording of a loop that reads the loss with .item() every step
    bundle = str(SAMPLES / "examples" / "item_logging")
    # WHEN gated on avoidable syncs THEN the would-be syncs count, and fail the gate
    assert main(["check", bundle, "--max-avoidable-syncs", "0"]) == 1
    assert "FAIL would-be syncs 3 (limit 0)" in capsys.readouterr().out
    # WHEN gated on device figures THEN they are skipped with a note, not failed at 100% idle
    assert main(["check", bundle, "--max-idle-frac", "0.05", "--max-sync-wait-frac", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "skip device idle: a CPU-only run has no device (limit 5.0% not applied)" in out
    assert "skip host sync wait" in out and "stallscope check: passed" in out


def test_check_gate_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    item = str(SAMPLES / "item_in_loop.pt.trace.json.gz")
    clean = str(SAMPLES / "clean_pipeline.pt.trace.json.gz")
    # WHEN a limit is exceeded THEN exit 1 and the failing limit is named
    assert main(["check", item, "--max-avoidable-syncs", "0"]) == 1
    out = capsys.readouterr().out
    assert "FAIL avoidable syncs 4 (limit 0)" in out and "stallscope check: failed" in out
    # WHEN every limit holds THEN exit 0
    assert main(["check", clean, "--max-avoidable-syncs", "0", "--max-idle-frac", "0.05"]) == 0
    assert "stallscope check: passed" in capsys.readouterr().out
    assert main(["check", item, "--max-idle-frac", "0.05"]) == 1  # 10% idle
    assert main(["check", item, "--max-sync-wait-frac", "0.9"]) == 0
    # WHEN no limit or a bad one is given, or the trace is bad THEN exit 2 with one line
    assert main(["check", item]) == 2
    assert main(["check", item, "--max-idle-frac", "1.5"]) == 2
    assert main(["check", "/no/such/trace.json", "--max-avoidable-syncs", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("stallscope: error: ") for line in err)


def test_cpu_only_step_table_shows_no_device_columns() -> None:
    # GIVEN a CPU-only recording with profiled steps, WHEN the terminal verdict is rendered
    from stallscope.render.summary import render

    a = analyze(load(SAMPLES / "examples" / "item_logging"))
    lines = render(a).splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("  steps     name"))
    # THEN the steps table has the wall time only: no device busy 0 / device idle = wall
    assert lines[head].split() == ["steps", "name", "wall"]
    row = lines[head + 1].split()
    assert row[0] == a.steps[0].name and len(row) == 3
