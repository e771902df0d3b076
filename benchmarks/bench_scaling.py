"""Scaling table: time per stage of ``analyze --json`` for 0.1M, 1M, 3M (and 10M) events.

The real V100 trace that bench_load.py uses is tiled end to end (``../shared/tools/tile_trace.py``) to each
size; each size runs in a fresh child process: decode + build (no cache), then every analysis pass (the
stage names ``analyze_model`` reports), then the output (the JSON document and its encoding). The last
columns divide each stage's time by the 1M row's, scaled by the events: a linear stage reads about 1.0 at
every size, a superlinear one grows.

    .venv/bin/python benchmarks/bench_scaling.py [--events 100000,1000000,3000000] [--source TRACE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_load import DEFAULT_SOURCE, child, tiled_trace  # noqa: E402

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from analyzer.analysis import analyze_model
from analyzer.loader import load_file
from analyzer.output import encode_json, to_json
times = {}
t = time.perf_counter()
model = load_file(Path(sys.argv[1]), use_cache=False)
times["decode+build"] = time.perf_counter() - t
last = ["", time.perf_counter()]
def stage(name):
    now = time.perf_counter()
    if last[0]:
        times[last[0]] = times.get(last[0], 0.0) + now - last[1]
    last[0], last[1] = name, now
result = analyze_model(model, stage=stage)
stage("output")
encode_json(to_json(result))
stage("")
print(json.dumps({"events": len(model.events), "times": times,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

STAGES = (
    "decode+build",
    "window and devices",
    "graph",
    "critical path",
    "gaps",
    "syncs",
    "what-if",
    "findings",
    "self-check",
    "output",
)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", default="100000,1000000,3000000")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.events.split(",")]
    rows = {}
    for n in sizes:
        trace = tiled_trace(args.source, n)
        print(f"analysing {trace.name} ...", file=sys.stderr, flush=True)
        rows[n] = child(sys.executable, CHILD, str(trace))
    ref = rows.get(1_000_000, rows[sizes[0]])  # per event, against the 1M-event row
    print(
        "| trace events | timed events | "
        + " | ".join(STAGES)
        + " | total s | peak RSS MB | per event vs 1M |"
    )
    print("|---:|---:|" + "---:|" * (len(STAGES) + 3))
    for n, r in rows.items():
        times = r["times"]
        total = sum(times.values())
        ref_total = sum(ref["times"].values())
        ratio = (total / r["events"]) / (ref_total / ref["events"])
        cells = " | ".join(f"{times.get(s, 0.0):.2f}" for s in STAGES)
        print(f"| {n:,} | {r['events']:,} | {cells} | {total:.2f} | {r['peak_rss_mb']:,.0f} | {ratio:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
