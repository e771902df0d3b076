"""``stallscope report TRACE|BUNDLE [-o report.html] [--cdn]``: one self-contained HTML report.

Loads and analyses the trace as ``stallscope analyze`` does (a multi-rank folder: the chosen rank and the
whole job, its ranks one after another), then renders ``stallscope.dashboard.report``. Errors are
raised as ``StallscopeError`` for ``stallscope.commands.main`` to report (one line, exit code 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stallscope.analyzer.core.errors import UsageError
from stallscope.commands.output import check_writable
from stallscope.watchdog import add_input_limits


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="trace file (.json, .json.gz), folder of rank files, or stallscope bundle")
    p.add_argument(
        "-o", "--output", metavar="HTML", help="report file (default <trace name>.report.html here)"
    )
    p.add_argument(
        "--cdn", action="store_true", help="load plotly.js from its CDN: a small file that needs a network"
    )
    p.add_argument(
        "--rank", type=int, default=None, help="rank to report in a multi-rank folder (default: lowest)"
    )
    p.add_argument("--no-cache", action="store_true", help="parse the trace even if a cached model exists")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    add_input_limits(p)


def default_output(trace: str) -> Path:
    """``<trace stem>.report.html`` in the current directory (``run.pt.trace.json.gz`` -> ``run.report.html``)."""
    name = Path(trace.rstrip("/\\")).name or "trace"
    for suffix in (".gz", ".json", ".trace", ".pt"):
        name = name.removesuffix(suffix)
    return Path(f"{name or 'trace'}.report.html")


def run(args: argparse.Namespace) -> int:
    out = Path(args.output) if args.output else default_output(args.trace)
    check_writable(out, "-o")
    from stallscope.analyzer.load.loader import start_decoding

    # a trace file's decode worker decodes while the report's modules are imported (plotly among them)
    start_decoding(args.trace, use_cache=not args.no_cache, max_inflated_mb=args.max_inflated_mb)
    from stallscope.analyzer.job.execute import Execution
    from stallscope.analyzer.load import cache
    from stallscope.dashboard import report
    from stallscope.jobs import load_and_analyse_job, timeline_ranks
    from stallscope.progress import Progress

    progress = Progress(enabled=not args.quiet)
    try:
        how = Execution(use_cache=not args.no_cache)
        result, job = load_and_analyse_job(
            [args.trace], args.rank, how, progress, args.time_limit, args.max_inflated_mb
        )
        ranks = timeline_ranks(job, result, how, progress) if job is not None else None
        try:
            size = report.write(result, out, report.ReportOptions(cdn=args.cdn), progress, job, ranks)
        except OSError as exc:
            raise UsageError(f"-o {out}: cannot write ({exc.strerror or exc})") from None
    finally:
        progress.done()
    print(f"stallscope: report written to {out} ({size / 1e6:.1f} MB)")
    sys.stdout.flush()
    cache.wait()
    return 0
