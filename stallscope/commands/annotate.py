"""``stallscope annotate TRACE [-o OUT.json.gz]``: the trace with the analysis added as extra tracks, for
Perfetto UI or chrome://tracing.

Loads and analyses the trace as ``stallscope analyze`` does (one rank: ``--rank`` in a multi-rank folder),
then copies that rank's trace file through ``stallscope.analyzer.document.annotate``: every original event
as it was, plus the critical path, the idle gaps, the syncs, the findings and "waited for" arrows. Errors
are raised as ``StallscopeError`` for ``stallscope.commands.main`` to report (one line, exit code 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stallscope.analyzer.core.errors import UsageError
from stallscope.commands.output import check_writable
from stallscope.watchdog import add_input_limits

SUFFIXES = (".json", ".json.gz")
HINT = "open it in https://ui.perfetto.dev (Open trace file) or chrome://tracing (Load)"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="trace file (.json, .json.gz), folder of rank files, or stallscope bundle")
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="annotated trace, .json or .json.gz (gzip) by its name (default <trace name>.annotated.json.gz here)",
    )
    p.add_argument(
        "--rank", type=int, default=None, help="rank to annotate in a multi-rank folder (default: lowest)"
    )
    p.add_argument("--no-cache", action="store_true", help="parse the trace even if a cached model exists")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    add_input_limits(p)


def run(args: argparse.Namespace) -> int:
    from stallscope.analyzer.document.annotate import annotated_name

    out = Path(args.output) if args.output else Path(annotated_name(args.trace))
    if not out.name.endswith(SUFFIXES):
        raise UsageError(f"-o {out}: give a .json or .json.gz file name")
    check_writable(out, "-o")
    _refuse_input(Path(args.trace), out)
    from stallscope.analysing import load_and_analyse
    from stallscope.analyzer.document.analysis import to_json
    from stallscope.analyzer.document.annotate import anchors_of, awaited_by_sync, write_annotated
    from stallscope.analyzer.load import cache
    from stallscope.progress import Progress

    progress = Progress(enabled=not args.quiet)
    try:
        result = load_and_analyse(
            args.trace, args.rank, not args.no_cache, progress, args.time_limit, args.max_inflated_mb
        )
        source, lanes, doc = Path(result.model.path), result.model.lanes, to_json(result)
        awaited = awaited_by_sync(result)
        anchors = anchors_of(doc, result.model.events, awaited)
        del result  # the model's columns go before the copy (the peak of large traces)
        _refuse_input(source, out)
        progress("writing the annotated trace")
        try:
            limit = int(args.max_inflated_mb * 1e6)
            written = write_annotated(source, doc, lanes, out, limit, awaited, anchors)
        except OSError as exc:
            raise UsageError(f"-o {out}: cannot write ({exc.strerror or exc})") from None
    finally:
        progress.done()
    added = written.added
    size = out.stat().st_size
    findings = f"{added.instants} finding" + ("" if added.instants == 1 else "s")
    print(
        f"stallscope: annotated trace written to {out} ({size / 1e6:.1f} MB): {written.original_events:,}"
        f" original events; added {sum(added.slices.values()):,} slices (critical path, idle gaps, syncs),"
        f" {findings}, {added.flows:,} waited-for arrows"
    )
    print(f"  {HINT}")
    sys.stdout.flush()
    cache.wait()
    return 0


def _refuse_input(trace: Path, out: Path) -> None:
    """Never write over the trace being read."""
    try:
        same = out.exists() and trace.exists() and out.samefile(trace)
    except OSError:
        same = False
    if same:
        raise UsageError(f"-o {out}: is the input trace; give another file name")
