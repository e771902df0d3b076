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
from dataclasses import asdict, dataclass
from pathlib import Path

from stallscope.analyzer.core.errors import StallscopeError
from stallscope.collector.bundle import TRACE_SUFFIX, Staging, run_metadata, sidecar
from stallscope.collector.embed import embed_sidecar
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
            meta = run_metadata(self.argv, self.program_dir, self.started)
            meta.update(
                exit_code=exit_code,
                window=capture.mode,
                steps_seen=capture.steps_seen,
                options=asdict(self.session.options),
                notes=capture.notes,
                step_source=capture.step_source,
                profiled_steps=capture.profiled_steps,
                dataloaders=capture.dataloaders,
            )
            doc = sidecar(meta, capture.sync_sites, capture.step_timing)
            if capture.trace is not None:
                embed_sidecar(capture.trace, doc)  # the trace alone carries everything
            bundle = self.staging.commit(doc)
        except BaseException:
            self.staging.discard()
            raise
        return Recording(exit_code, bundle, capture)


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
    the bundle holds what ran until then; further signals wait until the bundle is written. A child the
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
        with _signals_deferred():
            try:
                result = rec.finish(code)
            except StallscopeError as exc:
                print(f"stallscope: error: {exc}", file=sys.stderr)
                result = Recording(code, rec.staging.output, Capture(None, "unwritten", 0))
    return result


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


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """While the bundle is written, SIGINT, SIGTERM and SIGHUP are ignored: the program has ended
    already, and a second Ctrl-C must not lose what it recorded."""
    if not _main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, *ENDING_SIGNALS)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
