"""The CLI's watchdog: loading and analysing that run far past the time the input warrants stop with one
line naming the stage and the pass (exit code 2), never a silent hang."""

from __future__ import annotations

import gzip
import signal
import time
from pathlib import Path

import pytest
from fuzzing import CORPUS

import stallscope.analyzer.passes.critical
from stallscope.commands import main
from stallscope.watchdog import BASE_S, PER_MB_S, budget_s


def test_a_pass_that_never_ends_is_stopped_and_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a critical-path walk that never ends (as it did on the inputs of issue 14)
    def forever(self: object, state: object) -> None:
        while True:
            time.sleep(0.001)

    monkeypatch.setattr(stallscope.analyzer.passes.critical._Walk, "run", forever)
    trace = CORPUS / "superscript_step.json"
    # WHEN analysed with a 1 s limit
    start = time.monotonic()
    code = main(["analyze", str(trace), "--no-cache", "-q", "--time-limit", "1"])
    # THEN it stops about then, with one line naming the stage and the pass, and leaves no timer behind
    assert code == 2 and time.monotonic() - start < 10
    assert capsys.readouterr().err == (
        f"stallscope: error: {trace}: stopped after 1 s while analysing: critical path "
        "(in stallscope.analyzer.passes.critical.critical_path), "
        "far past the expected time for its size (--time-limit S to allow more)\n"
    )
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)


def test_the_budget_grows_with_the_json_size(tmp_path: Path) -> None:
    # GIVEN a 2 MB JSON file and a gzip file whose trailer says it inflates to 50 MB
    plain = tmp_path / "a.json"
    plain.write_bytes(b" " * 2_000_000)
    packed = tmp_path / "b.json.gz"
    packed.write_bytes(gzip.compress(b" " * 50_000_000, mtime=0))
    # THEN the budget is the base plus the per-MB allowance of each
    assert budget_s(plain) == pytest.approx(BASE_S + PER_MB_S * 2.0)
    assert budget_s(packed) == pytest.approx(BASE_S + PER_MB_S * 50.0)
    assert budget_s(tmp_path) == pytest.approx(BASE_S + PER_MB_S * 52.0)  # a folder: all its files
