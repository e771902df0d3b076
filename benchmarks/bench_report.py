#!/usr/bin/env python3
"""Report benchmark: size of ``stallscope report`` for a 1M-event trace and the time to open it in
headless chromium, against reference pages.

The trace is bench_load's: a real trace from ../shared/traces tiled end to end to at least --events
events (../shared/tools/tile_trace.py, kept in benchmarks/_work). Rows:

  plotly.js basic only an empty page with the plotly.js bundle the report inlines: the floor it pays
  plotly.js full only  the same with the full bundle of the plotly Python package (the usual way)
  small trace report   the report of the source trace itself
  1M-event report      the report of the tiled trace (plotly.js inlined, the default)
  1M-event --cdn       the same with --cdn: its size only (opening it needs a network)

"make s" is ``stallscope report`` as a subprocess (cold: empty model cache; warm: cache filled).
Opening is measured in a fresh headless chromium per repeat (cold: new browser, new profile), then once
more in the same browser (warm). "first screen" is when the plots in the first screen are drawn (the
page shows its verdict), "all drawn" when every plot is; both from navigation start, read from the
marks the report sets (``stallscopeFirstMs`` / ``stallscopeDrawnMs``); the floor page reports its load
event. Targets (issue 6): under 15 MB and open in under 3 s.

usage: python3 benchmarks/bench_report.py [--events N] [--source TRACE] [--repeat K] [--write-results]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT / "tests"), str(ROOT)]

from bench_load import DEFAULT_SOURCE, WORK, tiled_trace  # noqa: E402

READY = (
    "return document.readyState === 'complete' && (!document.querySelector('[data-figure]') || "
    "document.body.getAttribute('data-drawn') === 'all')"
)
MARKS = (
    "const n = performance.getEntriesByType('navigation')[0];"
    "return [window.stallscopeFirstMs || n.loadEventEnd, window.stallscopeDrawnMs || n.loadEventEnd];"
)


def make_report(trace: Path, out: Path, cache_home: Path, *extra: str) -> float:
    """``stallscope report`` in a child process; returns its wall time in seconds."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home), "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "stallscope", "report", "-q", "-o", str(out), *extra, str(trace)],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - t0


def open_times(page: Path, repeat: int) -> dict[str, float]:
    """Median over ``repeat`` fresh browsers of (first screen, all drawn) in ms, then one warm open."""
    from _browser import start_browser

    cold: list[list[float]] = []
    warm: list[float] = []
    for _ in range(repeat):
        with start_browser() as b:
            for i in range(2):
                b.open(page)
                b.wait_for(READY, timeout=120)
                first, drawn = b.js(MARKS)
                errors = b.console_errors()
                if errors:
                    raise SystemExit(f"bench_report: console errors in {page.name}: {errors[:3]}")
                (cold.append([first, drawn]) if i == 0 else warm.append(drawn))
    return {
        "first_ms": statistics.median(c[0] for c in cold),
        "drawn_ms": statistics.median(c[1] for c in cold),
        "warm_ms": statistics.median(warm),
    }


def floor_pages(folder: Path) -> list[tuple[str, Path]]:
    """Empty pages holding only plotly.js: the basic bundle the report inlines, and the full bundle the
    plotly Python package ships (what a report built with ``fig.to_html`` would carry)."""
    from plotly.offline import get_plotlyjs

    from stallscope.dashboard.report import _plotly_js

    out = []
    for name, js in (
        ("plotly.js basic only (inlined by the report)", str(_plotly_js())),
        ("plotly.js full only", get_plotlyjs()),
    ):
        page = folder / f"{name.split()[1]}.html"
        page.write_text(f"<!DOCTYPE html><html><head><script>{js}</script></head><body></body></html>")
        out.append((name, page))
    return out


def measure(source: Path, trace: Path, repeat: int, folder: Path) -> list[dict[str, Any]]:
    cache_home = folder / "cache"
    rows: list[dict[str, Any]] = []
    rows.extend({"name": name, "page": page} for name, page in floor_pages(folder))
    small = folder / "small.html"
    rows.append({"name": f"small trace report ({source.name})", "page": small})
    rows[-1]["make_cold_s"] = make_report(source, small, cache_home)
    big = folder / "big.html"
    rows.append({"name": "1M-event report", "page": big, "make_cold_s": make_report(trace, big, cache_home)})
    rows[-1]["make_warm_s"] = make_report(trace, big, cache_home)
    cdn = folder / "big-cdn.html"
    rows.append({"name": "1M-event report --cdn", "page": cdn, "open": False})
    rows[-1]["make_warm_s"] = make_report(trace, cdn, cache_home, "--cdn")
    for row in rows:
        row["mb"] = row["page"].stat().st_size / 1e6
        if row.get("open", True):
            print(f"opening {row['name']} ...", flush=True)
            row |= open_times(row["page"], repeat)
    return rows


def table(rows: list[dict[str, Any]], trace: Path, events: int) -> str:
    def f(row: dict[str, Any], key: str, scale: float = 1.0, fmt: str = "{:.2f}") -> str:
        return fmt.format(row[key] * scale) if key in row else "-"

    lines = [
        f"trace: {trace.name} ({trace.stat().st_size / 1e6:.1f} MB gzip, >= {events:,} trace events)",
        "",
        "| page | size MB | make s (cold / warm cache) | open: first screen s | all drawn s | warm open s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        make = f"{f(r, 'make_cold_s')} / {f(r, 'make_warm_s')}"
        lines.append(
            f"| {r['name']} | {r['mb']:.1f} | {make} | {f(r, 'first_ms', 1e-3)} | {f(r, 'drawn_ms', 1e-3)} "
            f"| {f(r, 'warm_ms', 1e-3)} |"
        )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=3, help="fresh browsers per page; the median is kept")
    p.add_argument(
        "--write-results",
        action="store_true",
        help="also print a heading (command, machine) for the table, to paste into docs/performance.md",
    )
    a = p.parse_args()
    if not a.source.exists():
        print(f"bench_report: {a.source}: not found (the benchmark needs ../shared/traces)", file=sys.stderr)
        return 2
    WORK.mkdir(exist_ok=True)
    trace = tiled_trace(a.source, a.events)
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        try:
            rows = measure(a.source, trace, a.repeat, Path(tmp))
        except BaseException as exc:  # pytest's skip/fail outcomes when chromium is missing
            if type(exc).__name__ in ("Skipped", "Failed"):
                print(f"bench_report: {exc}", file=sys.stderr)
                return 2
            raise
    text = table(rows, trace, a.events)
    print(text)
    if a.write_results:
        machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        load = os.getloadavg()[0]
        print("\nTo paste into docs/performance.md (replacing the table there):\n")
        print(f"bench_report.py --events {a.events} --repeat {a.repeat} ({machine}", end="")
        print(f", load average {load:.1f} at the end)\n\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
