"""``stallscope`` command line. ``main(argv) -> int`` is the whole CLI and is testable in-process;
only it prints errors and chooses exit codes."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import stallscope.dashboard_cmd as dashboard_cmd
from stallscope import __version__, answers, diff_cmd, profile_cmd, report_cmd
from stallscope.analyzer.errors import StallscopeError, UsageError
from stallscope.watchdog import add_input_limits

if TYPE_CHECKING:
    from stallscope.analyzer.diff import Side


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _configure_analyze(p: argparse.ArgumentParser) -> None:
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
        help="write the analysis (schema stallscope.analysis/2) to OUT ('-' for stdout)",
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


def _run_analyze(args: argparse.Namespace) -> int:
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
    from stallscope.analyzer import cache

    cache.wait()  # the model cache was being written while we analysed; finish it before returning
    return 0


def _decode_early(args: argparse.Namespace) -> None:
    """One trace file analysed here: its decode worker starts now, decoding while this process imports
    the analysis (``stallscope.analyzer.loader.start_decoding``)."""
    if len(args.trace) != 1 or args.workers is not None or args.scheduler:
        return
    from stallscope.analyzer.loader import start_decoding

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
    from stallscope.analyzer.job.execute import Execution, default_workers
    from stallscope.analyzer.job.output import job_json
    from stallscope.analyzer.output import encode_json, encoded_document
    from stallscope.job_terminal import render_job
    from stallscope.jobs import load_and_analyse_job
    from stallscope.progress import Progress
    from stallscope.terminal import render

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
        text = render(result, args.top, args.top_ops)
        if job:
            text += "\n" + render_job(job, args.top)
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


def write_json(target: str, doc: object) -> None:
    """Encode ``doc`` as JSON and write it to ``target`` ('-': stdout)."""
    from stallscope.analyzer.output import encode_json

    write_document(target, encode_json(doc))


def write_document(target: str, document: bytes | Path) -> None:
    """Write a JSON document (its bytes, or a file that holds them with their final newline) to ``target``
    ('-': stdout); ``UsageError`` when it cannot be written."""
    if target == "-":
        if isinstance(document, Path):
            with document.open("rb") as f:
                shutil.copyfileobj(f, sys.stdout.buffer, 1 << 20)
        else:
            sys.stdout.buffer.write(document)
            sys.stdout.buffer.write(b"\n")
        return
    try:
        if isinstance(document, Path):
            shutil.copyfile(document, target)  # a copy in the kernel: the cached file is never shared
        else:
            with Path(target).open("wb") as f:  # not document + newline: a copy of a document of GBs
                f.write(document)
                f.write(b"\n")
    except OSError as exc:
        raise UsageError(f"--json {target}: cannot write ({exc.strerror or exc})") from None


def _configure_check(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "trace", help="trace file, folder of rank files, stallscope bundle, or analyze --json output"
    )
    p.add_argument(
        "--rank", type=int, default=None, help="rank to check in a multi-rank folder (default: lowest)"
    )
    p.add_argument(
        "--max-idle-frac",
        type=float,
        metavar="F",
        help="fail if the device is idle more than F of the window",
    )
    p.add_argument(
        "--max-avoidable-syncs", type=int, metavar="N", help="fail if more than N syncs are avoidable"
    )
    p.add_argument(
        "--max-sync-wait-frac",
        type=float,
        metavar="F",
        help="fail if the host is blocked in syncs more than F of the window",
    )
    p.add_argument(
        "--baseline",
        metavar="OLD",
        help="the run to compare with (trace, folder, bundle or analyze --json output); needs --max-regression",
    )
    p.add_argument(
        "--max-regression",
        type=float,
        metavar="PCT",
        help="fail if the wall or the median step time grew more than PCT percent over --baseline",
    )
    p.add_argument("--no-cache", action="store_true", help="parse the trace even if a cached model exists")
    add_input_limits(p)


def _check_usage(args: argparse.Namespace) -> None:
    if (args.baseline is None) != (args.max_regression is None):
        raise UsageError("check: --baseline and --max-regression go together (give both)")
    limits = (args.max_idle_frac, args.max_avoidable_syncs, args.max_sync_wait_frac, args.max_regression)
    if all(v is None for v in limits):
        raise UsageError(
            "check: give at least one of --max-idle-frac, --max-avoidable-syncs, --max-sync-wait-frac, "
            "--max-regression"
        )
    for name, value in (
        ("--max-idle-frac", args.max_idle_frac),
        ("--max-sync-wait-frac", args.max_sync_wait_frac),
    ):
        if value is not None and not 0.0 <= value <= 1.0:
            raise UsageError(f"check: {name} must be a fraction between 0 and 1, not {value}")
    if args.max_regression is not None and not 0.0 <= args.max_regression < float("inf"):
        raise UsageError(f"check: --max-regression is a percentage of 0 or more, not {args.max_regression}")


def _run_check(args: argparse.Namespace) -> int:
    """CI performance gate: exit 1 when a threshold is exceeded (a limit, or a regression over the
    baseline), 0 when all hold, 2 on bad input."""
    from stallscope.analyzer.diff import compare, gate, side_of
    from stallscope.diff_terminal import render_gates
    from stallscope.diffing import load_doc, load_side

    _check_usage(args)
    limits = (args.time_limit, args.max_inflated_mb)
    # the gate compares walls and steps only: the new run's top tables need not be complete
    doc, cut = load_doc(args.trace, args.rank, not args.no_cache, None, *limits, full_tops=False)
    new = side_of(doc, args.trace, tops_cut=cut)  # checks a saved analysis is complete
    failed = 0
    lines = []
    for name, value, limit, fmt in _check_measures(new, args):
        if limit is None:
            continue
        if value is None:
            lines.append(f"skip {name}: a CPU-only run has no device (limit {fmt.format(limit)} not applied)")
            continue
        ok = value <= limit
        failed += not ok
        lines.append(f"{'ok  ' if ok else 'FAIL'} {name} {fmt.format(value)} (limit {fmt.format(limit)})")
    if args.baseline is not None:
        old = load_side(args.baseline, args.rank, not args.no_cache, None, *limits)
        gates = gate(compare(old, new), args.max_regression)
        failed += sum(g.regressed for g in gates)
        lines += render_gates(gates, args.max_regression)
    print("\n".join(lines))
    print(f"stallscope check: {'failed' if failed else 'passed'} ({args.trace})")
    return 1 if failed else 0


def _check_measures(new: Side, args: argparse.Namespace) -> list[tuple[str, float | None, Any, str]]:
    """(name, value or None when it does not apply, limit, format) for each limit of ``check``, from the
    figures a diff reads of the run (``stallscope.analyzer.diff.Side``). On a CPU-only run the device limits do not
    apply, and the avoidable syncs are the would-be syncs: the sync-prone calls in the loop whose tensors
    would be on the accelerator."""
    wall = new.wall_us or 1.0
    if new.cpu_only:
        return [
            ("device idle", None, args.max_idle_frac, "{:.1%}"),
            ("would-be syncs", float(new.would_sync_count or 0), args.max_avoidable_syncs, "{:.0f}"),
            ("host sync wait", None, args.max_sync_wait_frac, "{:.1%}"),
        ]
    return [
        ("device idle", (new.device_idle_us or 0.0) / wall, args.max_idle_frac, "{:.1%}"),
        ("avoidable syncs", float(new.avoidable_sync_count), args.max_avoidable_syncs, "{:.0f}"),
        ("host sync wait", (new.host_sync_wait_us or 0.0) / wall, args.max_sync_wait_frac, "{:.1%}"),
    ]


COMMANDS: tuple[Command, ...] = (
    Command("analyze", "analyse a trace and print the verdict", _configure_analyze, _run_analyze),
    Command(
        "check",
        "fail (exit 1) when a trace exceeds performance limits (for CI)",
        _configure_check,
        _run_check,
    ),
    Command(
        "dashboard",
        "serve the dashboard: upload traces, browse them, explore timelines, compare runs",
        dashboard_cmd.configure_dashboard,
        dashboard_cmd.run_dashboard,
    ),
    Command(
        "upload",
        "send a trace or bundle to a running dashboard",
        dashboard_cmd.configure_upload,
        dashboard_cmd.run_upload,
    ),
    Command(
        "profile",
        "run a Python program under the profiler, write a bundle and print the verdict",
        profile_cmd.configure,
        profile_cmd.run,
    ),
    Command("report", "write a standalone HTML report of a trace", report_cmd.configure, report_cmd.run),
    Command(
        "diff",
        "compare two runs (before, after): wall, verdict, steps, syncs, ops, what-if",
        diff_cmd.configure,
        diff_cmd.run,
    ),
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="stallscope", description="Who could have gone ahead, and who had to wait?"
    )
    p.add_argument("--version", action="version", version=f"stallscope {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for cmd in COMMANDS:
        sp = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.configure(sp)
        sp.set_defaults(run=cmd.run)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:  # argparse has printed its usage message
        return int(exc.code or 0)
    if not getattr(args, "run", None):
        p.print_help()
        return 2
    try:
        return int(args.run(args))
    except StallscopeError as exc:
        print(f"stallscope: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("stallscope: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `stallscope analyze ... | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except MemoryError:
        print("stallscope: error: out of memory", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug met on some input: one line and exit 2, never 1 (check's "failed")
        if os.environ.get("STALLSCOPE_TRACEBACK"):
            raise
        where = f" on {args.trace}" if isinstance(getattr(args, "trace", None), str) else ""
        print(
            f"stallscope: internal error{where}: {type(exc).__name__}: {' '.join(str(exc).split())}"[:500]
            + " (set STALLSCOPE_TRACEBACK=1 for details; please report it)",
            file=sys.stderr,
        )
        return 2


def entry() -> None:
    sys.exit(main())
