"""``stallscope profile [options] script.py [args...]`` / ``-m module [args...]``: run an unmodified
program under the collector, write a bundle, print the analyzer's verdict. Errors are raised as
``StallscopeError`` for ``stallscope.commands.main`` to report."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from stallscope.analyzer.core.errors import StallscopeError, UsageError
from stallscope.analyzer.core.numbers import parse_uint
from stallscope.collector.options import Capture
from stallscope.collector.window import DEFAULT_MAX_EVENTS

if TYPE_CHECKING:
    from stallscope.collector.options import ProfileOptions
    from stallscope.collector.recording import Recording

_PY_SUFFIXES = (".py", ".pyw")
_SIGNAL_CODES = (129, 130, 143)  # SIGHUP, SIGINT, SIGTERM


def configure(p: argparse.ArgumentParser) -> None:
    p.usage = "stallscope profile [options] (script.py | -m module) [args...]"
    p.add_argument(
        "-o", "--output", metavar="DIR", help="bundle folder (default stallscope_out/<script>-<time>)"
    )
    p.add_argument("-m", dest="module", action="store_true", help="run a library module as a script")
    p.add_argument(
        "--skip", type=int, default=5, metavar="N", help="steps to run before profiling (default 5)"
    )
    p.add_argument("--warmup", type=int, default=2, metavar="N", help="profiler warm-up steps (default 2)")
    p.add_argument("--steps", type=int, default=5, metavar="N", help="steps to profile (default 5)")
    p.add_argument(
        "--duration",
        type=float,
        metavar="SECONDS",
        help="profile the first SECONDS of the run instead of counting steps",
    )
    p.add_argument("--shapes", action="store_true", help="record input shapes of ops")
    p.add_argument("--memory", action="store_true", help="record memory allocations")
    p.add_argument(
        "--stacks",
        action="store_true",
        help="record Python stacks (costly: an event per Python call; sync lines are exact without them)",
    )
    p.add_argument(
        "--max-events",
        type=int,
        default=DEFAULT_MAX_EVENTS,
        metavar="N",
        help=f"event budget: profile fewer steps when a measured step shows more would exceed N events, "
        f"end a window without steps (whole run, --duration) at about N, and stop inside a step bigger "
        f"than N (the last step partial) (default {DEFAULT_MAX_EVENTS:,}; 0: no limit)",
    )
    p.add_argument("--no-analyze", action="store_true", help="write the bundle, do not print the verdict")
    p.add_argument(
        "--upload",
        metavar="URL",
        help="send the bundle to a stallscope dashboard at URL (http://host:port) when the run ends",
    )
    p.add_argument(
        "--on-demand",
        action="store_true",
        help="run with no profiler and wait: `stallscope capture PID` records the next --steps steps (after "
        "--warmup) as a bundle, as often as asked (see docs/long-runs.md)",
    )
    p.add_argument(
        "--every",
        metavar="DURATION",
        help="capture --steps steps every DURATION (90s, 30m, 2h) by itself (implies --on-demand); with "
        "--upload each capture goes to the dashboard, tagged with the run's id",
    )
    p.add_argument(
        "program", nargs=argparse.REMAINDER, help="script.py [args...] or, with -m, module [args...]"
    )


def run(args: argparse.Namespace) -> int:
    from stallscope.collector.bundle import output_for
    from stallscope.collector.recording import after_the_run, record
    from stallscope.collector.run import run_module, run_script
    from stallscope.collector.session import ProfileOptions, Session, require_torch

    if not args.program:
        raise UsageError("profile: give a script (script.py [args...]) or -m module [args...]")
    target, argv = args.program[0], list(args.program[1:])
    options = ProfileOptions(
        args.skip,
        args.warmup,
        args.steps,
        args.duration,
        args.shapes,
        args.memory,
        stacks=args.stacks,
        max_events=args.max_events,
    )
    options.check()
    if args.module:
        name, program_dir = _check_module(target), Path.cwd()
    else:
        name, program_dir = _check_script(target), Path(target).resolve().parent
    options = replace(options, auto_steps=not _marks_steps(target, args.module))
    if args.every is not None or args.on_demand:
        return _run_on_demand(args, options, target, argv, name, program_dir)
    require_torch()
    output = output_for(args.output, name)  # under torchrun: rank<N> inside it

    def say(message: str) -> None:
        print(f"stallscope: {message}", file=sys.stderr, flush=True)

    def started(session: Session) -> None:
        for note in session.notes:
            say(note)
        session.on_window_closed = say
        session.on_progress = say

    def body() -> int:
        return run_module(target, argv) if args.module else run_script(target, argv)

    with after_the_run() as after:  # a second SIGTERM soon after the first still gets the verdict
        rec = record(body, options, output, [target, *argv], program_dir, started)
        after.run_ended(rec.exit_code)
        return _after(rec, args)


def _run_on_demand(
    args: argparse.Namespace,
    options: ProfileOptions,
    target: str,
    argv: list[str],
    name: str,
    program_dir: Path,
) -> int:
    """``--on-demand`` / ``--every``: run the program, serve captures until it ends, list them."""
    import os

    from stallscope.collector.bundle import launcher_rank, output_for
    from stallscope.collector.ondemand import Control, Every, Outcome, new_run_id, parse_every
    from stallscope.collector.recording import after_the_run, record_on_demand
    from stallscope.collector.run import run_module, run_script
    from stallscope.collector.session import require_torch

    if options.duration is not None:
        raise UsageError("--on-demand records whole steps: it does not take --duration")
    period = parse_every(args.every) if args.every is not None else None
    require_torch()
    rank = launcher_rank()
    output = output_for(args.output, name)
    run_dir = output if rank is None else output.parent  # a job's ranks share the run folder
    if run_dir.exists() and not run_dir.is_dir():
        raise UsageError(f"-o {run_dir}: exists and is not a folder")
    env = os.environ
    job = None
    if rank is not None:
        job = (
            f"{env.get('TORCHELASTIC_RUN_ID', '')}@{env.get('MASTER_ADDR', '')}:{env.get('MASTER_PORT', '')}"
        )
    control = Control(
        run_dir.absolute(),
        new_run_id(name, None if job is None else f"{job}|{run_dir.absolute()}|{os.getppid()}"),
        [target, *argv],
        rank=rank,
        world=parse_uint(env.get("WORLD_SIZE", "")) if rank is not None else None,
        local_rank=parse_uint(env.get("LOCAL_RANK", "")) if rank is not None else None,
        job=job,
        upload=args.upload,
        control_dir=run_dir.absolute() / f".control-rank{rank}" if rank is not None else None,
    )

    def say(message: str) -> None:
        print(f"stallscope: {message}", file=sys.stderr, flush=True)

    def uploaded(outcome: Outcome) -> None:
        if args.upload:
            _upload(outcome.bundle, args.upload, (f"run:{outcome.run_id}",))

    def every(own: Control) -> Every:
        assert period is not None
        return Every(own, period, options.steps, uploaded, say)

    def body() -> int:
        return run_module(target, argv) if args.module else run_script(target, argv)

    say(
        f"on demand: pid {os.getpid()}, run {control.run_id}; `stallscope capture {os.getpid()}` records "
        f"the next {options.steps} step(s)"
        + (f"; capturing every {args.every} by itself" if period is not None else "")
    )
    with after_the_run() as after:
        done = record_on_demand(
            body, options, control, [target, *argv], program_dir, say, every if period else None
        )
        after.run_ended(done.exit_code)
    say(f"the run ended (exit code {done.exit_code}): {len(done.captures)} capture(s)")
    bundles = [Path(c["bundle"]) for c in done.captures]
    if rank is not None:  # a rank's bundle is one rank of the job's capture
        bundles = [b.parent for b in bundles]
    for c, bundle in zip(done.captures, bundles, strict=True):
        steps = c.get("steps") or ["?", "?"]
        print(f"  capture {c['index']}  steps {steps[0]}-{steps[1]}  {bundle}")
    print(f"  run       {done.run_dir} ({done.run_id})")
    if bundles:
        print(f"  next      stallscope analyze {bundles[-1]}")
    return done.exit_code


def _after(rec: Recording, args: argparse.Namespace) -> int:
    """The closing line, the verdict and the bundle (and the upload); the exit code."""
    traced = rec.capture.trace is not None
    if rec.capture.stepped_aside and not traced:  # said when it happened; the program's own trace answers
        print(f"  bundle    {rec.bundle}")
        return rec.exit_code
    _report(rec.exit_code, rec.bundle, rec.capture, args)
    if args.upload and traced:
        uploaded = _upload(rec.bundle, args.upload)
        if not uploaded and rec.exit_code == 0:
            return 2  # the program succeeded, stallscope's part did not
    return rec.exit_code


def _upload(bundle: Path, url: str, tags: tuple[str, ...] = ()) -> bool:
    """Send the bundle to the dashboard; say where it can be seen, or why it could not be sent."""
    from stallscope.dashboard.client import upload

    try:
        answer = upload(bundle, url, tags=tags)
    except StallscopeError as exc:
        print(f"stallscope: error: upload to {url} failed: {exc}", file=sys.stderr)
        return False
    print(f"  uploaded  {answer.get('url') or answer.get('id')}")
    return True


def _marks_steps(target: str, module: bool) -> bool:
    """Whether the program's main file calls ``stallscope.step()`` (then root-module calls do not mark
    steps: a decode loop's steps are its sequences, not its tokens)."""
    path: str | None = target
    if module:
        spec = importlib.util.find_spec(target)
        path = spec.origin if spec is not None else None
    elif Path(target).is_dir():
        path = str(Path(target) / "__main__.py")
    try:
        text = Path(path).read_text(errors="replace") if path else ""
    except OSError:
        return False
    return "stallscope.step(" in text or "from stallscope import step" in text


def _check_script(path: str) -> str:
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{path}: no such file")
    if p.is_dir():
        if not (p / "__main__.py").is_file():
            raise UsageError(f"{path}: a folder without __main__.py, not a Python program")
        return p.resolve().name
    if p.suffix not in _PY_SUFFIXES and not _python_shebang(p):
        raise UsageError(f"{path}: not a Python file (give a .py script, or -m module)")
    return p.stem or p.name


def _python_shebang(p: Path) -> bool:
    try:
        with p.open("rb") as f:
            first = f.readline(200)
    except OSError as exc:
        raise UsageError(f"{p}: cannot read ({exc.strerror or exc})") from None
    return first.startswith(b"#!") and b"python" in first


def _check_module(name: str) -> str:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        raise UsageError(f"-m {name}: cannot find the module ({exc})") from None
    if spec is None:
        raise UsageError(f"-m {name}: no module named {name!r}")
    return name.rsplit(".", 1)[-1]


def _report(code: int, bundle: Path, capture: Capture, args: argparse.Namespace) -> None:
    """After the run: what was captured (one line, from the capture alone), the verdict, the bundle and
    the next command."""

    def say(msg: str) -> None:
        print(f"stallscope: {msg}", file=sys.stderr)

    say(_what_was_recorded(code, capture, args))
    sys.stdout.flush()
    traced = capture.trace is not None
    if traced and not args.no_analyze:
        _analyze(bundle)
    print(f"  bundle    {bundle}")
    if traced:
        print(f"  next      stallscope report {bundle}")
    sys.stdout.flush()


def _what_was_recorded(code: int, capture: Capture, args: argparse.Namespace) -> str:
    """The one line that says what the bundle holds and why, from the capture."""
    steps = capture.steps_seen
    how = (
        f"interrupted (exit code {code})" if code in _SIGNAL_CODES else f"the program exited with code {code}"
    )
    if capture.trace is not None:
        what = f"traced {capture.trace_events:,} events" if capture.trace_events else "traced"
        if capture.partial_step:
            what += f", the last step ({capture.partial_step}) partial (--max-events)"
        if capture.mode == "whole_run":
            what += (
                ": profiled the whole run from its first torch call (no steps seen: no optimizer.step() "
                "or stallscope.step())"
            )
        if code in _SIGNAL_CODES:
            return f"{how}: {what}; the bundle holds what ran until then"
        return f"{how}: {what}" if code else what
    if capture.write_stopped:
        return (
            f"{how}: stopped while the trace was being written; the partial trace was removed "
            "(step timing is in the sidecar)"
        )
    if code != 0:
        return f"{how} after {steps} step(s), before the profiled window: nothing was traced"
    return (
        f"the run made {steps} step(s), too few to reach the window (--skip {args.skip} + --warmup "
        f"{args.warmup}, after the first step, or the first two with an optimizer): nothing was traced "
        "(step timing is in the sidecar); try --skip 0 --warmup 0"
    )


def _analyze(bundle: Path) -> None:
    from stallscope.analysing import load_and_analyse
    from stallscope.render.summary import render

    try:  # under the watchdog, as `stallscope analyze`
        print(render(load_and_analyse(str(bundle), None, use_cache=False)))
    except StallscopeError as exc:  # the program's exit code stands; the analysis is extra
        print(f"stallscope: could not analyse the bundle: {exc}", file=sys.stderr)
