"""``stallscope`` command line: the registry of commands and ``main(argv) -> int``, the whole CLI, testable
in-process. Each command is a module here with ``configure(parser)`` and ``run(args) -> int``; only
``main`` prints errors and chooses exit codes."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from stallscope import __version__
from stallscope.analyzer.core.errors import StallscopeError
from stallscope.commands import analyze, annotate, capture, check, dashboard, diff, profile, report, upload


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


COMMANDS: tuple[Command, ...] = (
    Command("analyze", "analyse a trace and print the verdict", analyze.configure, analyze.run),
    Command(
        "check",
        "fail (exit 1) when a trace exceeds performance limits (for CI)",
        check.configure,
        check.run,
    ),
    Command(
        "dashboard",
        "serve the dashboard: upload traces, browse them, explore timelines, compare runs",
        dashboard.configure,
        dashboard.run,
    ),
    Command(
        "upload",
        "send a trace or bundle to a running dashboard",
        upload.configure,
        upload.run,
    ),
    Command(
        "profile",
        "run a Python program under the profiler, write a bundle and print the verdict",
        profile.configure,
        profile.run,
    ),
    Command(
        "capture",
        "record the next steps of a program run with `profile --on-demand` (or of a torchrun job's ranks)",
        capture.configure,
        capture.run,
    ),
    Command("report", "write a standalone HTML report of a trace", report.configure, report.run),
    Command(
        "annotate",
        "write the trace with the analysis as extra tracks, for Perfetto UI or chrome://tracing",
        annotate.configure,
        annotate.run,
    ),
    Command(
        "diff",
        "compare two runs (before, after): wall, verdict, steps, syncs, ops, what-if",
        diff.configure,
        diff.run,
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
    code = main()
    # the command is done: a SIGTERM or SIGHUP in the interpreter's teardown (torch's takes a while after
    # `profile`) must not turn its exit code into death by the signal
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    sys.exit(code)
