"""What bounds the cost of a profiled window: when it opens, how many events it may hold, and progress
while torch collects and writes it.

- **Never the imports**: ``FirstOpTrigger`` opens the window at the program's first torch call (a
  ``TorchFunctionMode`` that fires once and then only passes calls through until it is removed at the
  first step), so a program that fails while importing, or imports for seconds, records nothing.
- **An event budget**: a window without steps (the whole run, ``--duration``) ends when the torch calls
  it has seen (``FirstOpTrigger``) make about ``--max-events`` events (``EVENTS_PER_CALL``). In steps
  mode ``budget_steps`` turns the events of one step into the number of steps that stay
  under ``--max-events``; the note says what was cut. The step measured is the second one, recorded
  alone while it is skipped (the first carries the warm-up: lazy initialisation, optimizer state), or,
  with ``--skip 0``, the first (counted when its recording is dropped). Inside a step too: the probe
  step's calls are counted (a ``FirstOpTrigger`` already fired) and its recording stops at the budget;
  when the measured step reached the budget, so are the window's, which then ends inside a step (the
  session marks it partial). The events a call is worth are learnt from each finished recording.
- **Whole or absent**: ``write_trace`` writes the trace so that a signal during the write leaves no
  partial file.
- **Quiet**: ``quiet_profiler`` keeps Kineto's ``USDT:`` lines off stderr.
- **Progress**: ``Heartbeat`` says, every few seconds, what torch is doing while it stops the profiler
  and writes the trace (minutes for millions of events), instead of silence.

torch is imported lazily: this module imports without it.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from stallscope.collector.modes import ThreadMode

DEFAULT_MAX_EVENTS = 500_000  # about 10 MB of gzip trace; torch writes it in tens of seconds on one core


def budget_steps(
    step_events: int, max_events: int, steps: int, measured: str = "the first step", over: bool = False
) -> tuple[int, str | None]:
    """How many steps to record when one step (``measured``, named in the note) made ``step_events``
    events, and a note when that is fewer than ``steps``. ``max_events`` 0 means no budget. At least
    one step is always recorded. ``over``: the step's recording stopped at ``step_events``."""
    if max_events <= 0 or step_events <= 0:
        return steps, None
    fit = max(1, max_events // step_events)
    if fit >= steps:
        return steps, None
    return fit, (
        f"{measured} made {'over' if over else 'about'} {step_events:,} events; profiling {fit} step(s) instead of "
        f"{steps} to stay under --max-events {max_events:,} (raise it, or --max-events 0, for more)"
    )


def recorded_events(prof: Any) -> int:
    """Events a stopped ``torch.profiler.profile`` holds (0 when torch keeps none)."""
    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if results is None:
        return 0
    try:
        return len(results.events())
    except (AttributeError, RuntimeError):
        return 0


# Kineto events per torch call made from Python, to turn the calls a window without steps has made into
# an estimate of its events: 2.6-4.5 measured on CPU-only loops (training with SGD/Adam, a decode loop,
# matmuls; torch 2.13), so 5 errs early. With CUDA each call's kernels and launches add records: 8 is
# assumed there, not measured. The note reports the real count of the trace.
EVENTS_PER_CALL = 5
EVENTS_PER_CALL_CUDA = 8


RSS_EVERY = 1024  # counted calls between two reads of the resident memory (a few µs each)
BYTES_PER_EVENT = (
    400  # resident memory of an event while recorded (torch 2.13, CPU: 370 B; ~2 KB at its peak, collected)
)
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes() -> int:
    """This process's resident memory (Linux ``/proc/self/statm``), 0 where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


class FirstOpTrigger:
    """Calls ``fire()`` once, on the first torch function called on this thread after ``install()``.
    After firing it passes calls through (a mode cannot leave torch's stack from inside its own
    handler), counting them when ``limit`` is set: at the ``limit``-th call after firing it calls
    ``on_limit()`` once, after that call (the event budget of a window without steps). With
    ``max_growth`` (bytes), every ``RSS_EVERY`` counted calls it also reads the process's resident memory,
    and calls ``on_limit()`` once it grew more than that since the counting began (composite ops and a
    backward pass make events no Python call shows: the memory they take shows them). ``remove()``
    takes it off when it is on top of this thread's stack."""

    def __init__(
        self,
        fire: Callable[[], None],
        on_limit: Callable[[], None] | None = None,
        limit: int = 0,
        max_growth: int = 0,
    ) -> None:
        from torch.overrides import TorchFunctionMode

        trigger = self

        class _FirstOp(TorchFunctionMode):
            def __torch_function__(
                self,
                func: Any,
                types: Any,
                args: tuple[Any, ...] = (),
                kwargs: dict[str, Any] | None = None,
            ) -> Any:
                if not trigger.fired:
                    trigger.fired = True
                    trigger.base = resident_bytes()
                    fire()
                elif trigger.limit:
                    trigger.calls += 1
                    if trigger.calls >= trigger.limit or (
                        trigger.max_growth
                        and not trigger.calls % RSS_EVERY
                        and resident_bytes() - trigger.base > trigger.max_growth
                    ):
                        trigger.limit = 0
                        out = func(*args, **kwargs) if kwargs else func(*args)
                        if on_limit is not None:
                            on_limit()
                        return out
                return func(*args, **kwargs) if kwargs else func(*args)

        self.fired = False
        self.calls = 0
        self.limit = limit if on_limit is not None else 0
        self.max_growth = max_growth if resident_bytes() else 0
        self.base = 0  # resident bytes when the counting began
        self._slot = ThreadMode(_FirstOp())

    def start_counting(self) -> None:
        """Count from now (the trigger has fired already)."""
        self.fired = True
        self.base = resident_bytes()

    @property
    def installed(self) -> bool:
        return self._slot.installed

    def install(self) -> None:
        self._slot.install()

    def remove(self) -> bool:
        """Take the mode off this thread's stack when it is on top (another mode above it stays, and ours
        with it, as a pass-through); True when it is off."""
        self._slot.remove()
        return not self._slot.installed


class Heartbeat:
    """While a slow stage runs, every ``interval`` seconds (after ``delay``), ``say`` what it is and how
    long it has taken. ``stage()`` names the current stage; ``stop()`` ends the thread."""

    def __init__(
        self, say: Callable[[str], None], stage: str, delay: float = 2.0, interval: float = 10.0
    ) -> None:
        self._say = say
        self._delay = delay
        self._interval = interval
        self._stage = stage
        self._start = time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stallscope-heartbeat", daemon=True)
        self._thread.start()

    def stage(self, message: str) -> None:
        self._stage = message

    def elapsed(self) -> float:
        return time.monotonic() - self._start

    def _run(self) -> None:
        if self._done.wait(self._delay):
            return
        while True:
            self._say(f"{self._stage}... ({self.elapsed():.0f} s)")
            if self._done.wait(self._interval):
                return

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=1.0)


def renumber(prof: Any, first: int) -> None:
    """Number a new profiler's steps as the run counts them: its first step is ``ProfilerStep#first``
    (its schedule is already shifted by ``first``), so the trace and stderr use one numbering."""
    prof.step_num = first
    action = prof.schedule(first)
    prof.current_action = action
    if hasattr(prof, "_prev_schedule_action"):
        prof._prev_schedule_action = action


def release(prof: Any) -> None:
    """Free a stopped profiler's results now, not whenever the garbage collector breaks the cycle through
    ``on_trace_ready``: torch (2.13, with_stack) can crash freeing a session's results while a later
    session runs."""
    prof.on_trace_ready = None
    prof.profiler = None


def write_trace(prof: Any, path: Path) -> int:
    """Write a stopped profiler's trace to ``path`` (gzip Kineto JSON) and return its event count. torch
    writes plain JSON beside it first (``.json.part``), gzipped here in chunks, so a signal while the
    file is written (its handler runs between chunks, or when torch's own write returns) stops it:
    both files are removed and the exception goes on; the trace is either whole or absent."""
    events = recorded_events(prof)
    plain = path.with_name(path.name + ".json.part")
    part = path.with_name(path.name + ".part")
    try:
        prof.export_chrome_trace(str(plain))
        with plain.open("rb") as src, gzip.open(part, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(part, path)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    finally:
        plain.unlink(missing_ok=True)
        part.unlink(missing_ok=True)
    return events


_quiet_class: Any = None


def quiet_profiler(torch: Any) -> Any:
    """``torch.profiler.profile`` whose start and stop keep Kineto's ``USDT: ... profiler_start/stop``
    lines (written straight to file descriptor 2 on every run) off stderr; anything else written to
    stderr meanwhile (the program's threads) is passed on."""
    global _quiet_class
    if _quiet_class is None:

        class QuietProfile(torch.profiler.profile):  # type: ignore[misc]
            def prepare_trace(self) -> None:
                with stderr_filtered():
                    super().prepare_trace()

            def start_trace(self) -> None:
                with stderr_filtered():
                    super().start_trace()

            def stop_trace(self) -> None:
                with stderr_filtered():
                    super().stop_trace()

        _quiet_class = QuietProfile
    return _quiet_class


_NOISE = (b"USDT:", b"STAGE:")


@contextlib.contextmanager
def stderr_filtered() -> Iterator[None]:
    """File descriptor 2 goes to a temporary file while the block runs; then what was written there,
    less Kineto's own lines, goes to the real stderr. Python's ``sys.stderr``, when it writes to
    descriptor 2, is pointed at the real stderr meanwhile (progress lines from other threads are not
    held back)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    old, real = sys.stderr, None
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        if old.fileno() == 2:
            real = open(  # noqa: SIM115 - closed below
                os.dup(saved), "w", buffering=1, encoding=old.encoding, errors=old.errors
            )
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        if real is not None:
            sys.stderr = real
        try:
            yield
        finally:
            if real is not None:
                sys.stderr = old
                real.close()
            with contextlib.suppress(OSError, ValueError, AttributeError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = b"".join(line for line in tmp.read().splitlines(True) if not line.startswith(_NOISE))
            if kept:
                os.write(2, kept)
