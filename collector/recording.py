"""One recording: a profiling session around a body of work, written as a bundle. Shared by
``stallscope profile`` (the body runs a program) and the Python API (the body is the ``with`` block)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from stallscope.analyzer.core.errors import StallscopeError
from stallscope.collector.bundle import TRACE_SUFFIX, Staging, run_metadata, sidecar
from stallscope.collector.embed import embed_sidecar
from stallscope.collector.ondemand import Control, Every, Request
from stallscope.collector.session import Capture, ProfileOptions, Session

#: signals that end a profiled program as Ctrl-C does: the bundle is written, the exit code is 128 + n
ENDING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


@dataclass(frozen=True)
class Recording:
    exit_code: int
    bundle: Path
    capture: Capture


class Recorder:
    """``start()`` -> (work, calling ``session.step()`` or an optimizer) -> ``finish(exit_code)``."""

    def __init__(
        self, options: ProfileOptions, output: str | Path, argv: list[str], program_dir: Path | None
    ):
        options.check()
        self.argv = argv
        self.program_dir = program_dir
        self.staging = Staging(output, trace_name(argv))
        self.session = Session(options, self.staging.trace_path)
        self.started = ""
        self.pid = os.getpid()  # the process that owns the bundle: a forked child never commits it
        self.write_stopped = False  # a signal stopped the bundle's writing: it is written without a trace

    @property
    def forked(self) -> bool:
        """True in a child the program forked: the bundle is the parent's to write."""
        return os.getpid() != self.pid

    def start(self) -> None:
        self.started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        try:
            self.session.start()
        except BaseException:
            self.staging.discard()
            raise

    def finish(self, exit_code: int) -> Recording:
        """Stop profiling and publish the bundle (also after a failed or interrupted workload)."""
        if self.forked:  # the parent's bundle: never stopped, written or removed from a child
            return Recording(exit_code, self.staging.output, Capture(None, "forked", 0))
        try:
            capture = self.session.stop()
            meta = run_document(capture, self.argv, self.program_dir, self.started, self.session.options)
            meta["exit_code"] = exit_code
            if capture.write_stopped or self.write_stopped:
                meta["trace_write_stopped"] = True
            if capture.trace is None:  # why the bundle holds no trace (``stallscope analyze`` says it)
                meta["no_trace"] = _why_no_trace(capture, self.write_stopped)
            doc = sidecar(meta, capture.sync_sites, capture.step_timing)
            if capture.trace is not None and capture.trace.exists():
                embed_sidecar(capture.trace, doc)
            else:  # the bundle holds a trace only when the capture says so
                self.staging.trace_path.unlink(missing_ok=True)  # the trace alone carries everything
            bundle = self.staging.commit(doc)
        except BaseException:
            self.staging.discard()
            raise
        return Recording(exit_code, bundle, capture)


def run_document(
    capture: Capture, argv: list[str], program_dir: Path | None, started: str, options: ProfileOptions
) -> dict[str, Any]:
    """The sidecar's ``run`` block for ``capture`` (``exit_code`` is the caller's to add)."""
    meta = run_metadata(argv, program_dir, started)
    meta.update(
        exit_code=None,
        window=capture.mode,
        steps_seen=capture.steps_seen,
        options=asdict(options),
        notes=capture.notes,
        step_source=capture.step_source,
        profiled_steps=capture.profiled_steps,
        dataloaders=capture.dataloaders,
    )
    if capture.partial_step:  # the event budget ended the recording inside this step
        meta["partial_step"] = capture.partial_step
    if capture.trace_events:
        meta["trace_events"] = capture.trace_events
    return meta


def _why_no_trace(capture: Capture, write_stopped: bool) -> str:
    """One line: why a bundle holds no trace."""
    if capture.write_stopped or write_stopped:
        return "a signal stopped the trace's writing (the partial trace was removed)"
    if capture.stepped_aside:
        return (
            "the program ran its own torch.profiler before stallscope recorded anything: stallscope stepped "
            "aside (the program's own profile is its trace)"
        )
    if capture.mode == "unwritten":
        return "the bundle could not be written whole"
    return "nothing was profiled (see the run's notes)"


def trace_name(argv: list[str]) -> str:
    """``<script>-<YYYYmmdd-HHMMSS>.pt.trace.json.gz``: the program's name (a module's last part)."""
    name = Path(argv[0]).name if argv else ""
    name = name[:-3] if name.endswith(".py") else name.rsplit(".", 1)[-1]
    return f"{name or 'python'}-{time.strftime('%Y%m%d-%H%M%S')}{TRACE_SUFFIX}"


def record(
    body: Callable[[], int],
    options: ProfileOptions,
    output: str | Path,
    argv: list[str],
    program_dir: Path | None,
    on_start: Callable[[Session], None] | None = None,
) -> Recording:
    """Run ``body`` (returning an exit code) under a session and write the bundle to ``output``.

    SIGTERM and SIGHUP end the program as Ctrl-C does (its ``finally`` blocks run, exit code 128 + n) and
    the bundle holds what ran until then. A further SIGINT/SIGTERM/SIGHUP while the trace is being
    written stops the writing when torch's own part of it returns (or at once in the gzip part): the
    partial trace is removed, the bundle is written without it (the sidecar, with the step timing), one
    line says so, and the exit code is 128 + n. A child the
    program forked never writes the bundle: it leaves with its exit code at once. A bundle that cannot be
    written (a full disk) is one line on stderr; the exit code stays the program's."""
    rec = Recorder(options, output, argv, program_dir)
    rec.start()
    if on_start is not None:
        on_start(rec.session)
    code = 1
    try:
        with _signals_end_the_program():
            code = body()
    finally:
        if rec.forked:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        stopped: WriteStopped | None = None
        try:
            with _signals_stop_the_write():
                result = rec.finish(code)
        except WriteStopped as exc:  # the trace's partial file is removed; the rest is quick to write
            stopped = exc
        except StallscopeError as exc:
            print(f"stallscope: error: {exc}", file=sys.stderr)
            result = Recording(code, rec.staging.output, Capture(None, "unwritten", 0))
        if stopped is not None:
            result = _without_trace(rec, stopped.code)
    return result


class WriteStopped(BaseException):
    """A signal came while the bundle was being written: stop writing."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.code = 128 + signum


def _without_trace(rec: Recorder, code: int) -> Recording:
    """After a signal stopped the writing: publish the bundle without its trace (signals ignored: this
    takes milliseconds) and say in one line what was kept."""
    rec.staging.trace_path.unlink(missing_ok=True)
    rec.write_stopped = True
    with _signals_ignored():
        try:
            rec.staging = type(rec.staging)(rec.staging.output, rec.staging.trace_path.name)
            result = rec.finish(code)
            kept = f"kept the sidecar (step timing) in {result.bundle}"
        except (StallscopeError, OSError) as exc:
            result = Recording(code, rec.staging.output, Capture(None, "unwritten", 0))
            kept = f"kept nothing ({exc})"
    print(
        f"stallscope: stopped while writing the trace: the partial trace was removed; {kept}", file=sys.stderr
    )
    return Recording(code, result.bundle, replace(result.capture, trace=None, write_stopped=True))


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _end_program(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _signals_end_the_program() -> Iterator[None]:
    """SIGTERM/SIGHUP raise ``SystemExit(128 + n)`` in the program (unless it installs its own handler)."""
    if not _main_thread():
        yield
        return
    old = {s: signal.signal(s, _end_program) for s in ENDING_SIGNALS}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _stop_the_write(signum: int, _frame: object) -> None:
    raise WriteStopped(signum)


@contextlib.contextmanager
def _signals_stop_the_write() -> Iterator[None]:
    """While the bundle is written, SIGINT, SIGTERM and SIGHUP stop the writing (``WriteStopped``)."""
    if not _main_thread():
        yield
        return
    old = {s: signal.signal(s, _stop_the_write) for s in (signal.SIGINT, *ENDING_SIGNALS)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


class AfterTheRun:
    """What SIGTERM/SIGHUP do once the bundle is written, while its verdict is made (``after_the_run``)."""

    def __init__(self) -> None:
        self.ended_by_signal = False  # the run was ended by a signal: further ones wait for the verdict

    def run_ended(self, exit_code: int) -> None:
        self.ended_by_signal = exit_code in {128 + s for s in (signal.SIGINT, *ENDING_SIGNALS)}

    def __call__(self, signum: int, _frame: object) -> None:
        if not self.ended_by_signal:
            raise SystemExit(128 + signum)
        # else nothing: the exit code is already 128 + n, and the verdict is seconds away


@contextlib.contextmanager
def after_the_run() -> Iterator[AfterTheRun]:
    """Around ``record`` and the verdict that follows it: outside ``record``'s own handling, SIGTERM and
    SIGHUP end the command with 128 + n (not death by the signal), and once the run was ended by a
    signal, a further one (a second SIGTERM soon after the first) waits for the verdict, which is made
    from a bundle already written (the window is bounded: seconds), and the exit code stays the run's.
    Ctrl-C still stops the verdict."""
    after = AfterTheRun()
    if not _main_thread():
        yield after
        return
    old = {s: signal.signal(s, after) for s in ENDING_SIGNALS}
    try:
        yield after
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    if not _main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, *ENDING_SIGNALS)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


# -- on demand ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OnDemandRun:
    exit_code: int
    run_dir: Path
    run_id: str
    captures: list[dict[str, Any]]  # per published capture: index, bundle, steps, notes


class OnDemandWriter:
    """The bundles of an on-demand run, one per capture (``stallscope.collector.ondemand.Demand``): a
    capture's bundle is staged beside its folder and published whole when its window is written."""

    def __init__(
        self,
        control: Control,
        options: ProfileOptions,
        argv: list[str],
        program_dir: Path | None,
        say: Callable[[str], None],
    ) -> None:
        self.control = control
        self.options = options
        self.argv = argv
        self.program_dir = program_dir
        self.say = say
        self.started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self._staging: Staging | None = None
        self._at = ""

    def due(self, steps: int) -> Request | None:
        return self.control.due(steps)

    def begin(self, request: Request) -> Path:
        self.discard()
        self._staging = Staging(request.dest, trace_name(self.argv))
        self._at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return self._staging.trace_path

    def started(self, request: Request, first_step: int) -> None:
        self.control.recording(request, first_step)
        self.say(f"capture {request.index}: recording from step {first_step} ({request.steps} step(s))")

    def publish(self, request: Request, capture: Capture) -> None:
        staging, self._staging = self._staging, None
        if staging is None or capture.trace is None or not capture.trace.exists():
            if staging is not None:
                staging.discard()
            self.fail(request, "; ".join(capture.notes) or "the window recorded nothing")
            return
        try:
            meta = run_document(capture, self.argv, self.program_dir, self.started_at, self.options)
            meta["capture"] = {
                "run_id": request.run_id,
                "index": request.index,
                "at": self._at,
                "trigger": request.trigger,
            }
            doc = sidecar(meta, capture.sync_sites, capture.step_timing)
            embed_sidecar(capture.trace, doc)
            bundle = staging.commit(doc)
        except (StallscopeError, OSError, ValueError) as exc:
            staging.discard()
            self.fail(request, f"the bundle could not be written: {exc}")
            return
        except BaseException:  # a signal: the program is ending; no half bundle stays
            staging.discard()
            self.control.finished(request, {"bundle": None, "error": "stopped while the bundle was written"})
            raise
        steps = capture.profiled_steps
        self.control.finished(
            request,
            {
                "bundle": str(bundle),
                "steps": steps,
                "partial_step": capture.partial_step,
                "trace_events": capture.trace_events,
                "notes": capture.notes,
                "at": self._at,
            },
        )
        which = (
            f"steps {steps[0]}-{steps[1]}"
            if steps and steps[0] < steps[1]
            else f"step {steps[0] if steps else '?'}"
        )
        self.say(f"capture {request.index}: {which} written to {bundle}; the program goes on")

    def fail(self, request: Request, why: str) -> None:
        self.discard()
        self.control.finished(request, {"bundle": None, "error": why})
        self.say(f"capture {request.index}: nothing written: {why}")

    def refuse(self, why: str) -> None:
        self.control.refuse = why

    def discard(self) -> None:
        staging, self._staging = self._staging, None
        if staging is not None:
            staging.discard()


def record_on_demand(
    body: Callable[[], int],
    options: ProfileOptions,
    control: Control,
    argv: list[str],
    program_dir: Path | None,
    say: Callable[[str], None],
    every: Callable[[Control], Every] | None = None,
    on_start: Callable[[Session], None] | None = None,
) -> OnDemandRun:
    """Run ``body`` with steps counted and timed and no profiler, serving captures (``ondemand``) until
    it ends; each capture is a bundle in the run's folder. Signals as ``record``: SIGTERM/SIGHUP end the
    program (128 + n); one that comes while a capture's bundle is written stops that bundle (none is
    left half written); the bundles already published stay."""
    writer = OnDemandWriter(control, options, argv, program_dir, say)
    control.lead = options.warmup + (1 if options.max_events else 0)
    control.window = options.steps
    session = Session(options, control.run_dir / ".unused", demand=writer)
    control.start()
    pid = os.getpid()
    try:
        session.start()
    except BaseException:
        control.close(2)
        raise
    periodic = every(control) if every is not None else None
    if periodic is not None:
        periodic.start()
    if on_start is not None:
        on_start(session)
    code = 1
    try:
        with _signals_end_the_program():
            code = body()
    finally:
        if os.getpid() != pid:  # a child the program forked: the run is the parent's
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        if periodic is not None:
            periodic.stop()
        try:
            with _signals_stop_the_write():
                session.stop()
        except WriteStopped:
            say("stopped while a capture was being written: that capture was not kept")
        except StallscopeError as exc:
            say(f"error: {exc}")
        finally:
            writer.discard()
            control.close(code)
    return OnDemandRun(code, control.run_dir, control.run_id, list(control.captures))
