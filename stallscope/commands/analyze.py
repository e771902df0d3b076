"""``stallscope analyze``: load and analyse a trace (a file, a rank folder, a bundle or a whole job), print
the verdict and write the JSON document; a second run of the same trace is answered from the cache."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stallscope import answers
from stallscope.analyzer.core.errors import UsageError
from stallscope.commands.output import write_document
from stallscope.watchdog import add_input_limits


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "trace",
        nargs="+",
        help="trace file (.json, .json.gz), folder of rank files, stallscope bundle, or several / a glob (a job)",
    )
    p.add_argument(
        "--workers",
        type=int,
        nargs="?",
        const=0,
        default=None,
        metavar="N",
        help="analyse a job's ranks on a local Dask cluster of N worker processes (default: one per core)",
    )
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="analyse a job's ranks on an existing Dask cluster (tcp://HOST:8786)",
    )
    p.add_argument(
        "--json",
        metavar="OUT",
        help="write the analysis (schema stallscope.analysis/3) to OUT ('-' for stdout)",
    )
    p.add_argument(
        "--rank", type=int, default=None, help="rank to analyse in a multi-rank folder (default: lowest)"
    )
    p.add_argument("--no-cache", action="store_true", help="parse the trace even if a cached model exists")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary on stdout, no progress on stderr")
    p.add_argument("--top", type=int, default=3, metavar="N", help="findings to list (default 3)")
    p.add_argument(
        "--top-ops",
        type=int,
        default=None,
        metavar="N",
        help="list the N ops with the most self time and the N kernels with the most device time "
        "(default: 5 ops on a CPU-only run, none otherwise; all 20 of each are in --json)",
    )
    add_input_limits(p)


def run(args: argparse.Namespace) -> int:
    if args.workers is not None and args.workers < 0:
        raise UsageError(f"--workers {args.workers}: give a number of worker processes (1 or more)")
    if args.workers is not None and args.scheduler:
        raise UsageError("--workers and --scheduler: give one (a new local cluster, or an existing one)")
    key = _answer_key(args)
    want_summary = not args.quiet and args.json != "-"
    if key is not None:  # every run that stores an answer stores its summary; the JSON when it made it
        cached = answers.lookup(key)
        if cached.summary is not None and (cached.json is not None or not args.json):
            _emit(args, cached.summary, cached.json)  # the same answer, without loading the trace
            return 0
    _decode_early(args)
    summary, document = _analyse(args, want_summary or key is not None)
    if key is not None:
        answers.store(key, summary, document)
    _emit(args, summary if want_summary else None, document)
    from stallscope.analyzer.load import cache

    cache.wait()  # the model cache was being written while we analysed; finish it before returning
    return 0


def _decode_early(args: argparse.Namespace) -> None:
    """One trace file analysed here: its decode worker starts now, decoding while this process imports
    the analysis (``stallscope.analyzer.load.loader.start_decoding``)."""
    if len(args.trace) != 1 or args.workers is not None or args.scheduler:
        return
    from stallscope.analyzer.load.loader import start_decoding

    start_decoding(args.trace[0], use_cache=not args.no_cache, max_inflated_mb=args.max_inflated_mb)


def _answer_key(args: argparse.Namespace) -> str | None:
    """The answer cache's key for this ``analyze``, or None when it is not cached: ``--no-cache``, a
    folder, a job of several files, a cluster run."""
    if args.no_cache or len(args.trace) != 1 or args.workers is not None or args.scheduler:
        return None
    if not Path(args.trace[0]).is_file():
        return None
    options = {
        "rank": args.rank,
        "top": args.top,
        "top_ops": args.top_ops,
        "max_inflated_mb": args.max_inflated_mb,
    }
    return answers.answer_key(args.trace[0], options)


def _analyse(args: argparse.Namespace, summary: bool) -> tuple[str | None, bytes | None]:
    """Load and analyse: the terminal summary (when ``summary``) and the JSON document (with ``--json``)."""
    from stallscope.analyzer.document.analysis import encoded_document
    from stallscope.analyzer.document.encoding import encode_json
    from stallscope.analyzer.document.job import job_json
    from stallscope.analyzer.job.execute import Execution, default_workers
    from stallscope.jobs import load_and_analyse_job
    from stallscope.progress import Progress
    from stallscope.render.job import with_job
    from stallscope.render.summary import render

    workers = (args.workers or default_workers()) if args.workers is not None else None
    how = Execution(workers, args.scheduler, not args.no_cache)
    progress = Progress(enabled=not args.quiet)
    try:
        result, job = load_and_analyse_job(
            args.trace, args.rank, how, progress, args.time_limit, args.max_inflated_mb
        )
    finally:
        progress.done()
    text = None
    if summary:
        text = with_job(render(result, args.top, args.top_ops), job, args.top)
    doc = encoded_document(result, {"job": job_json(job) if job else None}) if args.json else None
    del result, job  # the model and the analysis go before the text is made (the peak of large traces)
    return text, encode_json(doc) if doc is not None else None


def _emit(args: argparse.Namespace, summary: str | None, document: bytes | Path | None) -> None:
    """Write the JSON document (``--json``: its bytes, or the cached file that holds them) and print the
    summary, as ``analyze`` does."""
    if args.json and document is not None:
        write_document(args.json, document)
    if summary is not None and not args.quiet and args.json != "-":
        print(summary)
        if args.json:
            print(f"  json      {args.json}")
    sys.stdout.flush()
