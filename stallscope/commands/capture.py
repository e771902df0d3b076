"""``stallscope capture PID``: ask a program run with ``stallscope profile --on-demand`` (or every rank of a
``torchrun`` job on this machine: a rank's PID or the launcher's) to record its next steps, wait for the
bundle, print its verdict, and with ``--upload`` send it to the team dashboard tagged with the run's id.
See ``stallscope.collector.ondemand``."""

from __future__ import annotations

import argparse
import sys

from stallscope.analyzer.core.errors import StallscopeError, UsageError


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("pid", help="the program's PID (a torchrun job: the launcher's, or any rank's)")
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        metavar="N",
        help="whole steps to record (default: the run's --steps)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="give up when the program makes no step for S seconds (default 120)",
    )
    p.add_argument("--no-analyze", action="store_true", help="print the bundle's path, not its verdict")
    p.add_argument(
        "--upload",
        metavar="URL",
        help="send the capture to a stallscope dashboard (default: the run's own --upload, if it has one)",
    )
    p.add_argument(
        "--token",
        default=None,
        help="the dashboard's token (default: $STALLSCOPE_DASHBOARD_TOKEN)",
    )


def run(args: argparse.Namespace) -> int:
    from stallscope.analyzer.core.numbers import parse_uint
    from stallscope.collector.ondemand import capture, find_targets

    pid = parse_uint(args.pid)
    if pid is None or pid == 0:
        raise UsageError(f"capture {args.pid}: give a process id (a positive number)")
    if args.steps is not None and args.steps < 1:
        raise UsageError(f"--steps must be 1 or more, not {args.steps}")
    if not args.timeout > 0:
        raise UsageError(f"--timeout must be a positive number of seconds, not {args.timeout}")

    def say(message: str) -> None:
        print(f"stallscope: {message}", file=sys.stderr, flush=True)

    programs = find_targets(pid)
    if len(programs) > 1:
        say(f"a job of {len(programs)} ranks on this machine: pids {', '.join(str(p.pid) for p in programs)}")
    outcome = capture(programs, args.steps, timeout=args.timeout, progress=say)
    for note in outcome.notes:
        say(note)
    if not args.no_analyze:
        _verdict(str(outcome.bundle))
    print(f"  bundle    {outcome.bundle}")
    print(f"  run       {outcome.run_id} (capture {outcome.index})")
    url = args.upload or outcome.upload
    if url:
        from stallscope.dashboard.client import upload

        try:
            answer = upload(outcome.bundle, url, tags=(f"run:{outcome.run_id}",), token=args.token)
        except StallscopeError as exc:
            print(f"stallscope: error: upload to {url} failed: {exc}", file=sys.stderr)
            return 2
        print(f"  uploaded  {answer.get('url') or answer.get('id')}")
    print(f"  next      stallscope report {outcome.bundle}")
    return 0


def _verdict(path: str) -> None:
    """The capture's verdict, as ``stallscope analyze`` prints it (a job's first)."""
    from stallscope.analyzer.job.execute import Execution
    from stallscope.jobs import load_and_analyse_job
    from stallscope.render.job import with_job
    from stallscope.render.summary import render

    try:
        result, job = load_and_analyse_job([path], None, Execution(None, None, False))
    except StallscopeError as exc:  # the bundle stands; the verdict is extra
        print(f"stallscope: could not analyse the capture: {exc}", file=sys.stderr)
        return
    print(with_job(render(result), job))
