"""Rendering from a finished analysis, at several trace sizes: what the report and the dashboard overview
cost once the analysis is done (the analysis itself grows with the events; bench_scaling.py has it).

For each size the tiled trace (bench_load.py's) is loaded through the model cache and analysed once in a
fresh child process; then, fastest of ``--repeat``, in CPU seconds of the child:

  report render      ``stallscope.dashboard.report.render``: the HTML page (timelines of two steps, charts, tables)
  overview document  what the dashboard overview reads: ``overview.json`` as the store writes it (the
                     analysis without the critical path's segments), parsed
  whole document     ``analysis.json`` parsed, as the overview did before (and as the API still serves)

    .venv/bin/python benchmarks/bench_render.py [--events 1000000,10000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_load import DEFAULT_SOURCE, child, tiled_trace  # noqa: E402

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from stallscope.analyzer.analysis import analyze_model
from stallscope.analyzer.load.loader import load_file
from stallscope.analyzer.document.analysis import to_json
from stallscope.dashboard import report
from stallscope.dashboard.store import overview_doc
repeat = int(sys.argv[2])
a = analyze_model(load_file(Path(sys.argv[1]), use_cache=True))
def fastest(fn):
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()  # CPU seconds: steadier than wall time on a shared machine
        out = fn()
        best = min(best, time.process_time() - t)
    return best, out
render_s, page = fastest(lambda: report.render(a))
doc = to_json(a)
whole = json.dumps(doc, allow_nan=False)
small = json.dumps(overview_doc(doc), allow_nan=False)
overview_s, _ = fastest(lambda: json.loads(small))
whole_s, _ = fastest(lambda: json.loads(whole))
print(json.dumps({"events": len(a.model.events), "render_s": render_s, "page_mb": len(page.encode()) / 2**20,
                  "overview_s": overview_s, "overview_mb": len(small) / 2**20,
                  "whole_s": whole_s, "whole_mb": len(whole) / 2**20}))
"""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", default="1000000,10000000")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="bench-render-") as cache:
        env = {**os.environ, "XDG_CACHE_HOME": cache}
        for n in (int(x) for x in args.events.split(",")):
            trace = tiled_trace(args.source, n)
            child(sys.executable, CHILD, str(trace), "1", env=env)  # fills the model cache, untimed
            print(f"rendering {trace.name} ...", file=sys.stderr, flush=True)
            rows[n] = child(sys.executable, CHILD, str(trace), str(args.repeat), env=env)
    ref = rows.get(1_000_000, next(iter(rows.values())))
    load = os.getloadavg()
    print(
        f"CPU seconds, fastest of {args.repeat}; load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}"
    )
    print()
    print(
        "| trace events | report render s | vs 1M | report MB | overview parse s | vs 1M | overview MB "
        "| whole analysis.json parse s | vs 1M | analysis.json MB |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, r in rows.items():
        print(
            f"| {n:,} | {r['render_s']:.3f} | {r['render_s'] / ref['render_s']:.2f}x | {r['page_mb']:.1f} | "
            f"{r['overview_s']:.4f} | {r['overview_s'] / ref['overview_s']:.2f}x | {r['overview_mb']:.2f} | "
            f"{r['whole_s']:.2f} | {r['whole_s'] / ref['whole_s']:.2f}x | {r['whole_mb']:.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
