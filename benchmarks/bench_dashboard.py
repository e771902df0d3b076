"""Dashboard benchmark: the 1M-event tiled trace in the store, then the overview render and timeline zoom
round-trips as the browser does them (HTTP POSTs to Dash's callback endpoint on a running server).

    python benchmarks/bench_dashboard.py [--events 1000000] [--repeat 5] [--browser]

Prints a table. Measured: the upload into the store, the analysis in the worker's child process (until
the entry is ready), the overview page (the router callback: analysis JSON -> page), the first timeline
view (cold: rebuilds the typed analysis from the stored Parquet model), and warm zoom round-trips at
several zoom levels (the zoom callback: range -> extract -> merged figure -> JSON). ``--browser`` adds the
same two measured in headless chromium (navigation to verdict shown; relayout to status line updated).
Targets (issue: dashboard): overview < 2 s, zoom round-trip < 0.5 s.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_load import DEFAULT_SOURCE, tiled_trace  # noqa: E402

from stallscope.dashboard.app import Running, create_app, open_services  # noqa: E402
from stallscope.dashboard.pages.explorer import full_view  # noqa: E402
from stallscope.dashboard.services import Services  # noqa: E402
from stallscope.dashboard.store import Entry  # noqa: E402


def callback(
    url: str,
    outputs: list[tuple[str, str]],
    inputs: list[dict[str, Any]],
    state: list[dict[str, Any]],
    changed: str,
) -> tuple[float, int]:
    """One Dash callback over HTTP; returns (seconds, response bytes)."""
    out = [{"id": i, "property": p} for i, p in outputs]
    name = (
        f"{outputs[0][0]}.{outputs[0][1]}"
        if len(outputs) == 1
        else ".." + "...".join(f"{i}.{p}" for i, p in outputs) + ".."
    )
    body = {
        "output": name,
        "outputs": out if len(out) > 1 else out[0],
        "inputs": inputs,
        "state": state,
        "changedPropIds": [changed],
    }
    request = urllib.request.Request(
        f"{url}/_dash-update-component",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    t = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        data = response.read()
    return time.perf_counter() - t, len(data)


def overview(url: str, trace_id: str) -> tuple[float, int]:
    inputs = [
        {"id": "shell-url", "property": "pathname", "value": f"/trace/{trace_id}"},
        {"id": "shell-url", "property": "search", "value": ""},
    ]
    return callback(url, [("shell-content", "children")], inputs, [], "shell-url.pathname")


def timeline_page(url: str, trace_id: str) -> tuple[float, int]:
    inputs = [
        {"id": "shell-url", "property": "pathname", "value": f"/trace/{trace_id}/timeline"},
        {"id": "shell-url", "property": "search", "value": ""},
    ]
    return callback(url, [("shell-content", "children")], inputs, [], "shell-url.pathname")


def zoom(url: str, trace_id: str, view: dict[str, float], r0_ms: float, r1_ms: float) -> tuple[float, int]:
    outputs = [("explorer-graph", "figure"), ("explorer-view", "data"), ("explorer-status", "children")]
    inputs = [
        {
            "id": "explorer-range",
            "property": "data",
            "value": {"xaxis.range[0]": r0_ms, "xaxis.range[1]": r1_ms},
        },
        {"id": "explorer-reset", "property": "n_clicks", "value": None},
        {"id": "explorer-zoom-out", "property": "n_clicks", "value": None},
    ]
    state = [
        {"id": "explorer-view", "property": "data", "value": view},
        {"id": "explorer-trace", "property": "data", "value": trace_id},
    ]
    return callback(url, outputs, inputs, state, "explorer-range.data")


_ZOOM_JS = """
const [lo, hi, done] = arguments;
const status = document.querySelector('#explorer-status');
const graph = document.querySelector('#explorer-graph .js-plotly-plot');
const want = 'showing ' + lo.toFixed(2) + ' ms';
const t0 = performance.now();
const check = () => {
  if (status.textContent.startsWith(want) && document.querySelector('#explorer-graph .trace.bars path')) {
    requestAnimationFrame(() => done(performance.now() - t0));  // after the new figure is painted
    return true;
  }
  return false;
};
new MutationObserver((_m, obs) => { if (check()) obs.disconnect(); }).observe(status, {childList: true, subtree: true, characterData: true});
Plotly.relayout(graph, {'xaxis.range': [lo, hi]});
"""


def browser_times(url: str, trace_id: str, repeat: int) -> dict[str, float]:
    """Median seconds in headless chromium: a fresh page load of the overview until the verdict shows,
    and a zoom (relayout) until the status line says the new range and the figure is painted."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from _browser import start_browser

    out: dict[str, list[float]] = {"overview": [], "zoom": []}
    with start_browser() as b:
        b.driver.set_script_timeout(60)
        for i in range(repeat):
            t = time.perf_counter()
            b.open(f"{url}/trace/{trace_id}")
            b.wait_for("return document.querySelector('#overview-verdict')", timeout=60)
            out["overview"].append(time.perf_counter() - t)
            b.open(f"{url}/trace/{trace_id}/timeline")
            b.wait_for(
                "return document.querySelectorAll('#explorer-graph .trace.bars path').length", timeout=120
            )
            time.sleep(0.5)  # let plotly's own first relayout (autosize) settle, as a user would
            lo = 1.0 * (i + 1)
            out["zoom"].append(b.driver.execute_async_script(_ZOOM_JS, lo, lo + 5.0) / 1000)
        assert b.console_errors() == []
    return {k: statistics.median(v) for k, v in out.items()}


def store_trace(services: Services, trace: Path, rows: list[tuple[str, str, str]]) -> Entry:
    """Upload into the store and analyse in the worker's child process, timing both."""
    t = time.perf_counter()
    entry = services.store.add(trace.name, io.BytesIO(trace.read_bytes()), 1 << 30)
    rows.append(
        ("upload into the store", f"{time.perf_counter() - t:.2f}", f"{entry.size_bytes / 1e6:.1f} MB")
    )
    t = time.perf_counter()
    assert services.worker is not None
    status = services.worker.submit(entry.id).result()
    rows.append(
        ("analysis in the worker (child process) until ready", f"{time.perf_counter() - t:.2f}", status)
    )
    return entry


def zoom_rows(url: str, trace_id: str, view: dict[str, float], repeat: int) -> list[tuple[str, str, str]]:
    """Zoom round-trips at four zoom levels, each moved across the window ``repeat`` times (medians)."""
    span_ms = (view["hi"] - view["lo"]) / 1000
    rows = []
    for share in (0.5, 0.1, 0.01, 0.001):
        runs = []
        for i in range(repeat):
            start = span_ms * (1 - share) * i / max(repeat - 1, 1)
            runs.append(zoom(url, trace_id, view, start, start + span_ms * share))
        median = statistics.median(r[0] for r in runs)
        size = statistics.median(r[1] for r in runs)
        label = f"zoom round-trip to {share:.1%} of the window ({span_ms * share:,.1f} ms)"
        rows.append((label, f"{median:.3f}", f"{size / 1e3:.0f} kB"))
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--browser", action="store_true", help="also measure in headless chromium")
    args = p.parse_args()
    trace = tiled_trace(DEFAULT_SOURCE, args.events)
    store_dir = tempfile.mkdtemp(prefix="stallscope-bench-store-")
    services = open_services(store_dir, max_upload_mb=1024)
    running = Running(create_app(services), "127.0.0.1", 0, quiet=True).start()
    rows: list[tuple[str, str, str]] = []
    try:
        entry = store_trace(services, trace, rows)
        doc = services.store.analysis(entry.id)
        events = doc["source"]["events"]
        times = [overview(running.url, entry.id) for _ in range(args.repeat)]
        rows.append(
            ("overview page (router callback), first", f"{times[0][0]:.3f}", f"{times[0][1] / 1e3:.0f} kB")
        )
        rows.append(
            (f"overview page, median of {args.repeat}", f"{statistics.median(x[0] for x in times):.3f}", "")
        )
        t = time.perf_counter()
        panel = timeline_page(running.url, entry.id)  # the "preparing" panel while the analysis is rebuilt
        services.live.ready(entry.id, wait_s=600)
        drawn = timeline_page(running.url, entry.id)
        first = f"{time.perf_counter() - t:.2f}"
        rows.append(("timeline, first view: progress panel", f"{panel[0]:.3f}", f"{panel[1] / 1e3:.0f} kB"))
        rows.append(
            (
                "timeline, first view: until drawn (rebuilds the typed analysis)",
                first,
                f"{drawn[1] / 1e3:.0f} kB",
            )
        )
        again = timeline_page(running.url, entry.id)
        rows.append(("timeline page, warm (whole window)", f"{again[0]:.3f}", f"{again[1] / 1e3:.0f} kB"))
        rows += zoom_rows(running.url, entry.id, full_view(doc), args.repeat)
        if args.browser:
            b = browser_times(running.url, entry.id, min(args.repeat, 3))
            rows.append(
                ("browser: open overview until the verdict shows", f"{b['overview']:.3f}", "chromium")
            )
            rows.append(("browser: zoom until the status line updates", f"{b['zoom']:.3f}", "chromium"))
    finally:
        running.stop()
        if services.worker is not None:
            services.worker.shutdown()
        shutil.rmtree(store_dir, ignore_errors=True)
    print(
        f"## bench_dashboard.py --events {args.events} --repeat {args.repeat} ({platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; load average {os.getloadavg()[0]:.1f} at the end)\n"
    )
    print(f"trace: {trace.name} ({entry.size_bytes / 1e6:.1f} MB gzip, {events:,} events in the model)\n")
    print("| step | seconds | notes |\n|---|---:|---|")
    for name, secs, note in rows:
        print(f"| {name} | {secs} | {note} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
