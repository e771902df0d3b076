"""``stallscope diff BEFORE AFTER [--json OUT] [--report HTML]``: what changed between two runs.

Each side is a trace, folder of rank files, bundle, or an analysis saved by ``analyze --json``
(``stallscope.diffing``); the comparison is ``stallscope.analyzer.document.diff``; the views only render it: the terminal
(``stallscope.render.diff``), the ``stallscope.diff/1`` JSON and the HTML report
(``stallscope.dashboard.diff_report``). Errors are ``StallscopeError`` for ``stallscope.commands.main`` (exit code 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stallscope.analyzer.core.errors import UsageError
from stallscope.commands.output import check_writable, write_json
from stallscope.watchdog import add_input_limits


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "before", help="the run before: trace, folder of rank files, bundle, or analyze --json output"
    )
    p.add_argument("after", help="the run after, in any of the same forms")
    p.add_argument(
        "--json",
        metavar="OUT",
        help="write the comparison (schema stallscope.diff/1) to OUT ('-' for stdout)",
    )
    p.add_argument("--report", metavar="HTML", help="write the comparison as a standalone HTML page")
    p.add_argument(
        "--rank", type=int, default=None, help="rank to compare in multi-rank folders (default: lowest)"
    )
    p.add_argument("--top", type=int, default=5, metavar="N", help="changed rows per table (default 5)")
    p.add_argument("--no-cache", action="store_true", help="parse the traces even if cached models exist")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary on stdout, no progress on stderr")
    add_input_limits(p)


def run(args: argparse.Namespace) -> int:
    from stallscope.analyzer.document.diff import ROWS, compare, diff_json
    from stallscope.diffing import load_side
    from stallscope.progress import Progress
    from stallscope.render.diff import render_diff

    if args.top < 0:
        raise UsageError(f"--top {args.top}: give 0 or more rows")
    if args.report:
        check_writable(Path(args.report), "--report")
    progress = Progress(enabled=not args.quiet)
    try:
        sides = [
            load_side(path, args.rank, not args.no_cache, progress, args.time_limit, args.max_inflated_mb)
            for path in (args.before, args.after)
        ]
    finally:
        progress.done()
    d = compare(sides[0], sides[1], max(args.top, ROWS))
    doc = diff_json(d)
    if args.json:
        write_json(args.json, doc)
    if args.report:
        from stallscope.dashboard import diff_report

        try:
            size = diff_report.write(doc, args.report)
        except OSError as exc:
            raise UsageError(f"--report {args.report}: cannot write ({exc.strerror or exc})") from None
    if not args.quiet and args.json != "-":
        print(render_diff(d, args.top))
        if args.json:
            print(f"  json      {args.json}")
        if args.report:
            print(f"  report    {args.report} ({size / 1e3:.0f} kB)")
    sys.stdout.flush()
    return 0
