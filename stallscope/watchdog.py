"""A deadline on loading and analysing one trace, so that no input can make the CLI hang silently.

The passes are not edited for it: the watchdog wraps them from outside. ``signal.setitimer`` arms a timer
for the time the input's size warrants; when it fires, the ``SIGALRM`` handler runs in the main thread
(between two bytecodes of whatever pass is running), finds that pass on the interrupted stack and raises
``AnalysisTimeout``: one line naming the stage (from the progress reports) and the pass, exit code 2.
The dashboard's analysis runs in a child process with its own limits (``stallscope.dashboard.worker``).
"""

from __future__ import annotations

import argparse
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from stallscope.analyzer.core.errors import StallscopeError

MAX_INFLATED_MB = (
    4096  # stallscope.analyzer.load.loader.MAX_INFLATED_MB (not imported: the CLI parser stays light)
)

BASE_S = 60.0  # any trace: loading and analysing a small file takes well under a second
PER_MB_S = 3.0  # per MB of JSON (measured: ~6 s for 200 MB of JSON, 1M events, on a slow core)
GZIP_RATIO = 10.0  # a gzip file is taken to inflate to this many times its size


def add_input_limits(p: argparse.ArgumentParser) -> None:
    """``--time-limit`` and ``--max-inflated-mb``: the options of the commands that analyse a trace."""
    p.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="S",
        help="stop (exit 2) when loading and analysing take more than S seconds "
        f"(default {BASE_S:.0f} s + {PER_MB_S:.0f} s per MB of JSON; 0: no limit)",
    )
    p.add_argument(
        "--max-inflated-mb",
        type=float,
        default=MAX_INFLATED_MB,
        metavar="MB",
        help=f"refuse a trace file holding more than MB of JSON once inflated (default {MAX_INFLATED_MB})",
    )


class AnalysisTimeout(StallscopeError):
    """Loading or analysing ran far past the time its input's size warrants."""


def budget_s(path: str | Path) -> float:
    """Seconds allowed for ``path`` (a file, or a folder of rank files and a sidecar)."""
    p = Path(path)
    try:
        files = [f for f in p.iterdir() if f.is_file()] if p.is_dir() else [p]
    except OSError:
        files = []
    return BASE_S + PER_MB_S * sum(json_mb(f) for f in files)


def json_mb(path: Path) -> float:
    """MB of JSON in a file: its size, or for gzip the larger of ``GZIP_RATIO`` times its size and the
    inflated size its trailer records (modulo 4 GiB: a hint, cheap to read)."""
    try:
        with path.open("rb") as f:
            gzipped = f.read(2) == b"\x1f\x8b"
            size = f.seek(0, 2)
            if not gzipped:
                return size / 1e6
            f.seek(max(size - 4, 0))
            trailer = int.from_bytes(f.read(4), "little")
    except OSError:
        return 0.0
    return max(size * GZIP_RATIO, trailer) / 1e6


class Watchdog:
    """``with Watchdog(trace, limit_s) as dog:`` runs the body under a deadline; call ``dog.stage(msg)``
    as work advances (it is a progress callback). ``limit_s`` of 0 or None, or use outside the main
    thread (where no signal can be delivered), watches nothing."""

    def __init__(self, trace: str, limit_s: float | None) -> None:
        self.trace = trace
        self.limit_s = limit_s or 0.0
        self._stage = "starting"
        self._armed = False
        self._previous: Callable[[int, FrameType | None], Any] | int | None = None

    def stage(self, message: str) -> None:
        self._stage = message

    __call__ = stage

    def __enter__(self) -> Watchdog:
        if self.limit_s > 0 and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGALRM, self._expired)
            signal.setitimer(signal.ITIMER_REAL, self.limit_s)
            self._armed = True
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._armed:
            signal.setitimer(signal.ITIMER_REAL, 0.0)
            previous = self._previous
            signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)
            self._armed = False

    def _expired(self, _signum: int, frame: FrameType | None) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        where = running_pass(frame)
        raise AnalysisTimeout(
            f"{self.trace}: stopped after {self.limit_s:.0f} s while {self._stage}"
            + (f" (in {where})" if where else "")
            + ", far past the expected time for its size (--time-limit S to allow more)"
        )


def running_pass(frame: FrameType | None) -> str:
    """The analysis pass on the stack: the function ``stallscope.analyzer.analysis`` (or the loader) called, as
    ``module.function``; else the innermost analyzer function; '' outside the analyzer."""
    innermost = ""
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        caller = frame.f_back
        caller_module = str(caller.f_globals.get("__name__", "")) if caller is not None else ""
        if module.startswith("stallscope.analyzer."):
            name = f"{module}.{frame.f_code.co_name}"
            innermost = innermost or name
            if (
                caller_module in ("stallscope.analyzer.analysis", "stallscope.analyzer.load.loader")
                and module != caller_module
            ):
                return name
        frame = caller
    return innermost
