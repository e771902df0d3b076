"""Scaling of the loader alone: decode + build of the model (no cache) for each size, in a fresh process.

The real V100 trace bench_load.py uses is tiled end to end (``../shared/tools/tile_trace.py``) to each size.
Each row reports wall time and the process's CPU time (on a shared machine, CPU time is the steadier
measure of work: wall time grows with the other work on the machine), and the peak RSS. The per-event
columns divide by the first size's row (1M by default) scaled by the events: a linear stage reads ~1.0.

    .venv/bin/python benchmarks/bench_decode_scaling.py [--events 1000000,3000000,10000000] [--repeat K]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_load import DEFAULT_SOURCE, best, child, tiled_trace  # noqa: E402

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from stallscope.analyzer.load.loader import load_file
t, c = time.perf_counter(), time.process_time()
model = load_file(Path(sys.argv[1]), use_cache=False)
print(json.dumps({"load_s": time.perf_counter() - t, "cpu_s": time.process_time() - c,
                  "events": len(model.events),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", default="1000000,3000000,10000000")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--repeat", type=int, default=1, help="runs per size; the least CPU time is kept")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.events.split(",")]
    rows = {}
    load = [os.getloadavg()[0]]
    for n in sizes:
        trace = tiled_trace(args.source, n)
        print(f"loading {trace.name} ...", file=sys.stderr, flush=True)
        runs = [child(sys.executable, CHILD, str(trace)) for _ in range(args.repeat)]
        rows[n] = min(runs, key=lambda r: r["cpu_s"]) if args.repeat > 1 else best(runs)
        load.append(os.getloadavg()[0])
    ref = rows[sizes[0]]
    print(
        "| trace events | timed events | decode+build wall s | CPU s | peak RSS MB | wall per event | CPU per event |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n, r in rows.items():
        scale = r["events"] / ref["events"]
        print(
            f"| {n:,} | {int(r['events']):,} | {r['load_s']:.2f} | {r['cpu_s']:.2f} | {r['peak_rss_mb']:,.0f} "
            f"| {r['load_s'] / ref['load_s'] / scale:.2f} | {r['cpu_s'] / ref['cpu_s'] / scale:.2f} |"
        )
    print(f"\nload average (1 min) during the run: {', '.join(f'{x:.1f}' for x in load)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
