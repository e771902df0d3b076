"""Collector: the trace clock, exact sync call sites (SyncSiteRecorder) and per-step timing (StepTimer)."""

from __future__ import annotations

import inspect
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from stallscope.analyzer.load.sidecar import SCHEMA, read_sidecar  # noqa: E402
from stallscope.collector.clock import (  # noqa: E402
    base_ns_for,
    rebase_us,
    to_trace_us,
    trace_base_ns,
    trace_clock_us,
)
from stallscope.collector.sites import SyncSiteRecorder  # noqa: E402
from stallscope.collector.steptiming import StepTimer, _quantile  # noqa: E402

HERE = os.path.abspath(__file__)


def next_line() -> int:
    """The line after the caller's current line (where the call under test is written)."""
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno + 1


def profile_cpu() -> Any:
    return torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])


def export(prof: Any, tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def by_site(records: list[dict[str, Any]]) -> dict[tuple[int, str], dict[str, Any]]:
    return {(r["line"], r["op"]): r for r in records}


# --- the trace clock ---------------------------------------------------------------------------------------


def test_trace_clock_is_the_profilers_ts_scale(tmp_path: Path) -> None:
    before: list[float] = []
    with profile_cpu() as prof:
        with torch.profiler.record_function("stallscope-warmup"):
            pass
        for i in range(5):
            before.append(trace_clock_us())
            with torch.profiler.record_function(f"stallscope-marker-{i}"):
                torch.ones(4).sum()
            time.sleep(0.002)
    doc = export(prof, tmp_path)
    # ts is relative to baseTimeNanoseconds, the epoch floored to Kineto's trimonth
    assert doc["baseTimeNanoseconds"] == trace_base_ns() == base_ns_for(time.time_ns())
    marks = {e["name"]: e for e in doc["traceEvents"] if e.get("name", "").startswith("stallscope-marker")}
    assert len(marks) == 5
    lags = [float(marks[f"stallscope-marker-{i}"]["ts"]) - t for i, t in enumerate(before)]
    assert all(lag >= 0.0 for lag in lags), lags  # the marker never starts before the clock read
    # the clocks agree: the closest marker starts within 0.3 ms of its read; the others within 20 ms (a
    # busy machine can deschedule the thread between the read and the marker for a millisecond or more)
    assert all(lag < 20_000.0 for lag in lags), lags
    assert min(lags) < 300.0, lags
    # the trace's tid is the OS thread id
    assert {e["tid"] for e in marks.values()} == {threading.get_native_id()}


def test_perf_counter_maps_onto_the_trace_clock() -> None:
    a = trace_clock_us()
    b = to_trace_us(time.perf_counter_ns())
    c = trace_clock_us()
    assert a - 50.0 <= b <= c + 50.0
    assert rebase_us(10.0, trace_base_ns()) == 10.0
    assert rebase_us(10.0, trace_base_ns() - 1_000_000) == 1010.0


@pytest.mark.parametrize("strategy", ["mode", "patch"])
def test_recorded_times_join_the_aten_ops_of_the_trace(tmp_path: Path, strategy: str) -> None:
    x = torch.arange(8.0)
    with profile_cpu() as prof, SyncSiteRecorder(strategy=strategy) as rec:
        for _ in range(3):
            line = next_line()
            x[3].item()
            time.sleep(0.001)
    doc = export(prof, tmp_path)
    (record,) = [r for r in rec.records() if r["op"] == "Tensor.item"]
    assert record["line"] == line and record["count"] == 3
    items = sorted(
        (float(e["ts"]), float(e["dur"]), str(e["tid"]))
        for e in doc["traceEvents"]
        if e.get("name") == "aten::item" and e.get("ph") == "X"
    )
    assert len(items) == 3
    for t, (ts, _dur, tid) in zip(record["times_us"], items, strict=True):
        assert tid == record["thread"]
        assert 0.0 <= ts - t <= 200.0, (t, ts)  # within the analyzer's join lead (LEAD_US)
    # the analyzer's sidecar join finds this exact line for each aten::item
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    sidecar = {"schema": SCHEMA, "run": {}, "sync_sites": rec.records(), "step_timing": {}}
    (bundle / "sidecar.json").write_text(json.dumps(sidecar))
    parsed, note = read_sidecar(bundle)
    assert parsed is not None and note is None
    for ts, dur, tid in items:
        site = parsed.exact_site(tid, ts, ts + dur)
        assert site is not None and (site.file, site.line, site.function) == (
            HERE,
            line,
            "test_recorded_times_join_the_aten_ops_of_the_trace",
        )


# --- SyncSiteRecorder ----------------------------------------------------------------------------------------


STRATEGIES = pytest.mark.parametrize("strategy", ["mode", "patch"])


@STRATEGIES
def test_sync_prone_calls_are_recorded_at_their_exact_lines(strategy: str) -> None:
    x = torch.arange(10.0)
    mask = x > 4
    t = torch.tensor(1.0)
    grid = torch.ones(2, 10)
    expected: dict[tuple[int, str], int] = {}

    def expect(line: int, op: str) -> None:
        expected[(line, op)] = expected.get((line, op), 0) + 1

    with SyncSiteRecorder(strategy=strategy) as rec:
        for _ in range(3):
            expect(next_line(), "Tensor.item")
            t.item()
            expect(next_line(), "Tensor.tolist")
            x.tolist()
            expect(next_line(), "Tensor.nonzero")
            x.nonzero()
            expect(next_line(), "Tensor.__getitem__")
            x[mask]
            expect(next_line(), "Tensor.__bool__")
            bool(t)
            expect(next_line(), "Tensor.__bool__")
            if t:
                pass
        expect(next_line(), "Tensor.cpu")
        x.cpu()
        expect(next_line(), "Tensor.to")
        x.to("cpu")
        expect(next_line(), "Tensor.to")
        x.to(device=torch.device("cpu"), dtype=torch.float64)
        expect(next_line(), "Tensor.numpy")
        x.numpy()
        expect(next_line(), "Tensor.masked_select")
        x.masked_select(mask)
        expect(next_line(), "torch.nonzero")
        torch.nonzero(x)
        expect(next_line(), "torch.unique")
        torch.unique(x)
        expect(next_line(), "Tensor.unique")
        x.unique()
        expect(next_line(), "Tensor.repeat_interleave")
        x.repeat_interleave(torch.ones(10, dtype=torch.long))
        expect(next_line(), "torch.where")
        torch.where(mask)
        expect(next_line(), "Tensor.__getitem__")
        grid[:, mask]
        expect(next_line(), "Tensor.__float__")
        float(t)
    records = rec.records()
    got = {(r["line"], r["op"]): r["count"] for r in records}
    assert got == expected
    me = str(threading.get_native_id())
    for r in records:
        assert r["file"] == HERE
        assert r["function"] == "test_sync_prone_calls_are_recorded_at_their_exact_lines"
        assert r["thread"] == me
        assert r["first_us"] == r["times_us"][0] and len(r["times_us"]) == r["count"]
        assert r["times_us"] == sorted(r["times_us"])
    assert [r["first_us"] for r in records] == sorted(r["first_us"] for r in records)


@STRATEGIES
def test_non_sync_ops_are_not_recorded(strategy: str) -> None:
    x = torch.arange(10.0)
    idx = torch.tensor([1, 2])
    dst = torch.empty(10)
    with SyncSiteRecorder(strategy=strategy) as rec:
        for _ in range(100):
            y = x + 1
            y = x.sum()
            y = x[0]
            y = x[idx]
            y = x[1:3]
            y = x.to(torch.float64)
            y = x.repeat_interleave(2)
            y = torch.where(x > 3, x, 0.0)
            dst.copy_(x)  # CPU to CPU: an ordinary copy, not towards the host
            x[x > 3] = 0.0  # masked_fill: no sync
    assert y is not None
    assert rec.records() == []


def helper_reads(t: Any) -> tuple[int, float]:
    line = next_line()
    value = t.item()
    return line, value


@STRATEGIES
def test_the_site_is_the_innermost_user_frame(strategy: str) -> None:
    t = torch.tensor(2.0)
    with SyncSiteRecorder(strategy=strategy) as rec:
        line, _ = helper_reads(t)
    (r,) = rec.records()
    assert (r["file"], r["line"], r["function"], r["op"]) == (HERE, line, "helper_reads", "Tensor.item")


@STRATEGIES
def test_frames_inside_torch_are_skipped(strategy: str) -> None:
    t = torch.tensor(3.0)
    fake = os.path.join(os.path.dirname(torch.__file__), "stallscope_fake_module.py")
    code = compile("def read(t):\n    return t.item()\n", fake, "exec")
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    probs = torch.tensor([0.25, 0.75])
    with SyncSiteRecorder(strategy=strategy) as rec:
        line_fake = next_line()
        namespace["read"](t)
        line_dist = next_line()
        torch.distributions.Categorical(probs=probs, validate_args=True)
    sites = by_site(rec.records())
    assert sites[(line_fake, "Tensor.item")]["file"] == HERE
    # torch.distributions validates with ``if not valid.all()`` inside torch: charged to the user's line
    assert any(line == line_dist for line, _op in sites)
    assert all(r["file"] == HERE for r in sites.values())
    # ... and the record names the library that made the read and the call of the user's line
    checks = [r for (line, _op), r in sites.items() if line == line_dist]
    assert checks and {(r["library"], r["library_call"]) for r in checks} == {
        ("torch.distributions.distribution", "torch.distributions.categorical.Categorical.__init__")
    }
    # ... which a call the user's own line made has not (a module without a name: no library)
    assert "library" not in sites[(line_fake, "Tensor.item")]
    direct = next_line()
    with SyncSiteRecorder(strategy=strategy) as rec:
        t.item()
    (r,) = [r for r in rec.records() if r["line"] == direct + 1]
    assert "library" not in r and "library_call" not in r


@STRATEGIES
def test_recorder_restores_everything_after_an_exception(strategy: str) -> None:
    originals = (
        torch.cuda.synchronize,
        torch.cuda.Stream.synchronize,
        torch.cuda.Event.synchronize,
        torch.cpu.synchronize,
    )
    methods = {name: vars(torch.Tensor).get(name) for name in ("item", "__getitem__", "__bool__", "unique")}
    functions = (torch.nonzero, torch.unique, torch.where)
    rec = SyncSiteRecorder(strategy=strategy)
    with pytest.raises(ValueError, match="boom"), rec:
        assert torch.cuda.synchronize is not originals[0]
        assert torch.cuda.Event.synchronize is not originals[2]
        assert torch.cpu.synchronize is not originals[3]
        raise ValueError("boom")
    assert (
        torch.cuda.synchronize,
        torch.cuda.Stream.synchronize,
        torch.cuda.Event.synchronize,
        torch.cpu.synchronize,
    ) == originals
    assert len(torch.overrides._get_current_function_mode_stack()) == 0
    assert {name: vars(torch.Tensor).get(name) for name in methods} == methods
    assert (torch.nonzero, torch.unique, torch.where) == functions
    assert not rec.active
    torch.tensor(1.0).item()  # no longer recorded
    assert rec.records() == []


def test_synchronize_wrappers_record_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    # stand-ins for the real calls, which need a GPU; the recorder wraps whatever is there
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append("device"))
    monkeypatch.setattr(torch.cuda.Stream, "synchronize", lambda self: calls.append("stream"))
    monkeypatch.setattr(torch.cuda.Event, "synchronize", lambda self: calls.append("event"))
    stand_in = torch.cuda.synchronize
    with SyncSiteRecorder() as rec:
        for _ in range(2):
            line_device = next_line()
            torch.cuda.synchronize()
        line_stream = next_line()
        torch.cuda.Stream.synchronize(object())
        line_event = next_line()
        torch.cuda.Event.synchronize(object())
        line_cpu = next_line()
        torch.get_device_module("cpu").synchronize()  # device-agnostic code on a CPU: the real call
    assert calls == ["device", "device", "stream", "event"]
    assert torch.cuda.synchronize is stand_in
    sites = by_site(rec.records())
    assert sites[(line_device, "torch.cuda.synchronize")]["count"] == 2
    assert sites[(line_stream, "torch.cuda.Stream.synchronize")]["count"] == 1
    assert sites[(line_event, "torch.cuda.Event.synchronize")]["count"] == 1
    assert sites[(line_cpu, "torch.cpu.synchronize")]["count"] == 1


def test_each_thread_gets_its_own_id() -> None:
    out: dict[str, Any] = {}

    def work() -> None:
        with SyncSiteRecorder() as rec:
            out["line"] = next_line()
            torch.tensor(1.0).item()
        out["records"] = rec.records()
        out["tid"] = threading.get_native_id()

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    (r,) = out["records"]
    assert r["thread"] == str(out["tid"]) != str(threading.get_native_id())
    assert (r["line"], r["function"]) == (out["line"], "work")


def test_records_can_keep_only_a_window_of_times() -> None:
    t = torch.tensor(1.0)
    with SyncSiteRecorder() as rec:
        for i in range(4):
            t.item()
            if i == 1:
                cut = trace_clock_us()
    (r,) = rec.records(since_us=cut)
    assert r["count"] == 4 and len(r["times_us"]) == 2 and r["first_us"] < cut


def test_cpu_only_sites_learnt_while_tracked_keep_their_verdict_when_not() -> None:
    from stallscope.collector.origin import OriginTracker

    # GIVEN a CPU-only recorder in its learning step (origin tracking on): a token computed from a
    # parameter is device-bound, a tensor made on the host is not
    w = torch.ones(3, requires_grad=True)
    host = torch.tensor([3])
    lines: dict[str, int] = {}

    def step(window: bool) -> None:
        with torch.no_grad():
            tok = (w * 2).argmax()  # marked only while origin tracking is on
        lines["tok"] = next_line()
        tok.item()
        lines["host"] = next_line()
        host.item()
        if window:
            lines["new"] = next_line()
            w.sum().item()  # a site first seen untracked: the tensor itself (it requires grad) says it

    rec = SyncSiteRecorder(strategy="patch", latent=True)
    rec.tracked = rec.learning = True
    tracker = OriginTracker()
    with rec:
        tracker.install()
        try:
            step(window=False)
        finally:
            tracker.remove()
        # WHEN the window's steps run with origin tracking off
        rec.tracked = rec.learning = False
        step(window=True)
        step(window=True)
    # THEN the learning step logged nothing, and each site has the verdict a GPU run would give it
    got = {(r["line"], r["on_device"]): r["count"] for r in rec.records()}
    assert got == {(lines["tok"], True): 2, (lines["host"], False): 2, (lines["new"], True): 2}


# --- StepTimer ----------------------------------------------------------------------------------------------


def test_step_timer_on_cpu() -> None:
    timer = StepTimer()
    for k in range(5):
        time.sleep(0.002 * (k + 1))
        timer.step()
    timer.close()
    timer.step()  # after close: ignored
    s = timer.summary()
    assert s["count"] == 5 and not s["truncated"]
    assert s["device"] is None and s["device_ms"] is None and s["steps"]["device_ms"] is None
    host = s["steps"]["host_ms"]
    assert len(host) == 5 and all(h >= 2.0 * (k + 1) * 0.9 for k, h in enumerate(host))
    starts = s["steps"]["start_us"]
    assert starts == sorted(starts) and abs(starts[0] - trace_clock_us()) < 5e6
    stats = s["host_ms"]
    assert stats["count"] == 5
    assert stats["min"] <= stats["median"] <= stats["p90"] <= stats["max"]
    assert stats["median"] == pytest.approx(float(np.median(host)))
    assert stats["p90"] == pytest.approx(float(np.percentile(host, 90)))
    json.dumps(s)  # sidecar-ready


def test_step_timer_without_steps_and_quantiles() -> None:
    s = StepTimer().summary()
    assert s["count"] == 0 and s["host_ms"]["median"] is None
    values = sorted([5.0, 1.0, 3.0, 2.0])
    for q in (0.0, 0.5, 0.9, 1.0):
        assert _quantile(values, q) == pytest.approx(float(np.quantile(values, q)))
