"""The event budget holds inside a step, the closing line says what was recorded, a signal during the
trace's writing stops it, a program that crashes at start-up is told so, and Kineto's own lines stay off
stderr."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from stallscope.collector import session  # noqa: E402
from stallscope.collector.bundle import SIDECAR_NAME, bundle_trace  # noqa: E402
from stallscope.commands import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# one step is N tiny ops (about 5 events each): a step far over a small budget
TINY_OPS = """\
import sys
import torch

w = torch.ones(4, requires_grad=True)
opt = torch.optim.SGD([w], lr=1e-6)
for step in range(4):
    x = w * 1.0
    for _ in range({n}):
        x = x * 1.0001
    x.sum().backward()
    opt.step()
    opt.zero_grad()
print("own stderr line", file=sys.stderr)
"""


@pytest.fixture(autouse=True)
def no_leftover_session() -> Any:
    yield
    assert session.active() is None


def _events(bundle: Path) -> list[dict[str, Any]]:
    trace = bundle_trace(bundle)
    assert trace is not None
    with gzip.open(trace, "rt") as f:
        events: list[dict[str, Any]] = json.load(f)["traceEvents"]
    return events


def _run(bundle: Path) -> dict[str, Any]:
    run: dict[str, Any] = json.loads((bundle / SIDECAR_NAME).read_text())["run"]
    return run


def test_budget_holds_inside_one_step(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # GIVEN a program whose every step makes about 20,000 events
    script = tmp_path / "tiny.py"
    script.write_text(TINY_OPS.format(n=4000))
    out = tmp_path / "o"
    # WHEN it is profiled under a budget of 5,000 events (the probe step is over it too)
    args = ["--skip", "1", "--warmup", "0", "--steps", "2", "--max-events", "5000"]
    assert main(["profile", "-o", str(out), *args, str(script)]) == 0
    err = capfd.readouterr().err
    # THEN the trace holds at most the budget, within one step, marked partial everywhere
    events = _events(out)
    assert 1000 < len(events) <= 5000
    steps = sorted({str(e["name"]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#")})
    run = _run(out)
    cut = run["partial_step"]
    assert cut >= 3  # after the skipped (probe) step
    assert steps == [f"ProfilerStep#{cut}"]
    assert run["trace_events"] <= 5000
    note = next(n for n in run["notes"] if f"inside step {cut}" in n)
    assert f"ProfilerStep#{cut}) is partial" in note
    assert note in err
    assert f"the last step ({cut}) partial" in err
    # AND the bundle is analysed, the verdict's notes saying the step is partial
    assert main(["analyze", str(out)]) == 0
    assert f"step {cut} is partial" in capfd.readouterr().out
    assert main(["analyze", "--json", "-", str(out)]) == 0
    doc = json.loads(capfd.readouterr().out)
    assert any(n.startswith(f"step {cut} is partial") for n in doc["source"]["notes"])
    # AND Kineto's USDT lines are not on stderr, the program's own line is
    assert "USDT:" not in err and "own stderr line" in err


def test_program_crashing_at_start_is_told_so(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # GIVEN a program that fails before any step
    script = tmp_path / "crash.py"
    script.write_text("import torch\n\nraise ValueError('bad config 42')\n")
    out = tmp_path / "o"
    # WHEN profiled
    code = main(["profile", "-o", str(out), str(script)])
    err = capfd.readouterr().err
    # THEN its own exit code and traceback stand, with no profiler advice
    assert code == 1
    assert "ValueError: bad config 42" in err and "Traceback" in err
    assert "the program exited with code 1 after 0 step(s), before the profiled window" in err
    assert "--skip 0" not in err


ENDLESS = """\
import sys
import torch

x = torch.ones(2)
for i in range(20000):
    x = x * 1.0001
print("ready", file=sys.stderr, flush=True)
while True:
    x = x * 1.0001
"""


def test_second_sigterm_stops_the_write(tmp_path: Path) -> None:
    # GIVEN a program recording a whole run without a budget (a trace that takes seconds to write)
    script = tmp_path / "endless.py"
    script.write_text(ENDLESS)
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "stallscope", "profile", "--no-analyze", "--max-events", "0", "-o", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([*cmd, str(script)], stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    assert proc.stderr is not None
    while "ready" not in proc.stderr.readline():
        pass
    time.sleep(1.0)
    # WHEN it gets SIGTERM, and a second one while the bundle is written
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    code = proc.wait(timeout=60)
    took = time.monotonic() - t0
    err = proc.stderr.read()
    # THEN it ends within seconds, 143 (not killed by the signal), one line saying what was kept
    assert code == 143, err
    assert took < 10
    lines = [line for line in err.splitlines() if "stopped while writing the trace" in line]
    assert len(lines) == 1 and "kept the sidecar (step timing)" in lines[0]
    assert bundle_trace(out) is None and (out / SIDECAR_NAME).is_file()
    assert _run(out)["trace_write_stopped"] is True
    assert _run(out)["no_trace"] == "a signal stopped the trace's writing (the partial trace was removed)"
    assert not list(tmp_path.rglob("*.part"))


def test_sigterm_in_the_window_prints_the_verdict_and_bundle(tmp_path: Path) -> None:
    # GIVEN a program recording its whole run
    script = tmp_path / "endless.py"
    script.write_text(ENDLESS)
    out = tmp_path / "o"
    cmd = [
        sys.executable,
        "-m",
        "stallscope",
        "profile",
        "--max-events",
        "50000",
        "-o",
        str(out),
        str(script),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    assert proc.stderr is not None
    while "ready" not in proc.stderr.readline():
        pass
    # WHEN it gets one SIGTERM
    proc.send_signal(signal.SIGTERM)
    stdout, rest = proc.communicate(timeout=120)
    # THEN 143, one closing line from what was written, then the verdict and the bundle
    assert proc.returncode == 143, rest
    (closing,) = [line for line in rest.splitlines() if "interrupted" in line]
    events = len(_events(out))
    assert closing.startswith("stallscope: interrupted (exit code 143): traced ")
    assert "nothing was traced" not in rest
    assert 0 < _run(out)["trace_events"] <= events <= 50000 + 100
    assert "verdict" in stdout and f"  bundle    {out}" in stdout


def test_signal_during_the_write_in_the_run_removes_the_partial_trace(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a training loop whose window's trace write is stopped by a signal (SystemExit(143) from
    # the handler) after torch wrote part of it
    def stopped(prof: Any, path: Path) -> int:
        path.write_text("partial")
        raise SystemExit(143)

    monkeypatch.setattr(session, "write_trace", stopped)
    script = tmp_path / "tiny.py"
    script.write_text(TINY_OPS.format(n=10))
    out = tmp_path / "o"
    # WHEN profiled
    code = main(["profile", "-o", str(out), "--skip", "1", "--warmup", "0", "--steps", "1", str(script)])
    err = capfd.readouterr().err
    # THEN 143, no trace in the bundle, the sidecar says why, and one closing line agrees
    assert code == 143
    assert bundle_trace(out) is None
    assert _run(out)["trace_write_stopped"] is True
    (closing,) = [line for line in err.splitlines() if "interrupted" in line]
    assert "stopped while the trace was being written; the partial trace was removed" in closing
    assert "nothing was traced" not in err


def test_stderr_filter_drops_only_kinetos_lines(capfd: pytest.CaptureFixture[str]) -> None:
    from stallscope.collector.window import stderr_filtered

    # GIVEN lines written to descriptor 2 while torch starts or stops its profiler (Kineto's and others)
    with stderr_filtered():
        os.write(2, b"USDT:2026-01-01 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
        os.write(2, b"a thread of the program says this\n")
        os.write(2, b"STAGE:2026-01-01 1:1 Completed Stage: Collection\n")
    # THEN only Kineto's lines are dropped, the rest comes out after the block
    assert capfd.readouterr().err == "a thread of the program says this\n"


@pytest.mark.parametrize("delay", [0.05, 0.2, 0.5])
def test_a_second_sigterm_soon_after_the_first_still_ends_143_with_the_verdict(
    tmp_path: Path, delay: float
) -> None:
    # GIVEN a small program recording its whole run (a budget: the trace is written in well under a second)
    script = tmp_path / "endless.py"
    script.write_text(ENDLESS)
    out = tmp_path / "o"
    cmd = [
        sys.executable,
        "-m",
        "stallscope",
        "profile",
        "--max-events",
        "50000",
        "-o",
        str(out),
        str(script),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    assert proc.stderr is not None
    while "ready" not in proc.stderr.readline():
        pass
    # WHEN it gets SIGTERM, then a second one this long after, while the bundle is written
    proc.send_signal(signal.SIGTERM)
    time.sleep(delay)
    proc.send_signal(signal.SIGTERM)
    stdout, rest = proc.communicate(timeout=120)
    # THEN 143 (not death by the signal), one closing line, and the verdict of what was kept
    assert proc.returncode == 143, (stdout, rest)
    assert len([line for line in rest.splitlines() if "interrupted" in line]) == 1, rest
    assert "verdict" in stdout, (stdout, rest)
    assert (out / SIDECAR_NAME).is_file()
