"""Python API of the collector: ``with stallscope.profile(...) as p: ... p.step()``, the
``@stallscope.profiled(...)`` decorator, and ``stallscope.step()``.

Importing this module does not import torch; a session imports it when it starts.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import ParamSpec, TypeVar

from stallscope.collector import session as _session
from stallscope.collector.bundle import output_for
from stallscope.collector.recording import Recorder, Recording
from stallscope.collector.session import ProfileOptions

P = ParamSpec("P")
R = TypeVar("R")


def step() -> None:
    """Mark the end of one iteration of a loop without an optimizer (inference, evaluation). Drives the
    profiling schedule of the running stallscope session; does nothing when none is running."""
    s = _session.active()
    if s is not None:
        s.step()


class Profile:
    """A profiling session around a ``with`` block; ``bundle`` is the written folder after the block.

    Inside a run that is already profiled (``stallscope profile`` of a script using this API), the block
    joins that session: ``step()`` drives it and no second bundle is written."""

    def __init__(self, output: str | Path | None, options: ProfileOptions, name: str) -> None:
        self.options = options
        self.output = output
        self.name = name
        self.bundle: Path | None = None
        self.recording: Recording | None = None
        self._recorder: Recorder | None = None

    def __enter__(self) -> Profile:
        if _session.active() is not None:
            return self
        output = output_for(self.output, self.name)  # under torchrun: rank<N> inside it
        program = Path(sys.argv[0]).resolve().parent if sys.argv and sys.argv[0] else None
        self._recorder = Recorder(self.options, output, list(sys.argv), program)
        self._recorder.start()
        return self

    def step(self) -> None:
        """Mark the end of one iteration (as ``stallscope.step()``)."""
        step()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        rec, self._recorder = self._recorder, None
        if rec is None:
            return
        if rec.forked:  # a child the block forked: the bundle is the parent's to write
            return
        code = 0 if exc_type is None else 130 if issubclass(exc_type, KeyboardInterrupt) else 1
        self.recording = rec.finish(code)
        self.bundle = self.recording.bundle


def profile(
    output: str | Path | None = None,
    *,
    skip: int = 5,
    warmup: int = 2,
    steps: int = 5,
    duration: float | None = None,
    shapes: bool = False,
    memory: bool = False,
) -> Profile:
    """Profile a block: ``with stallscope.profile("out") as p: ... p.step()``. Options as for
    ``stallscope profile``; ``output`` defaults to ``stallscope_out/<script>-<timestamp>``."""
    options = ProfileOptions(skip, warmup, steps, duration, shapes, memory, auto_steps=False)
    options.check()
    name = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else "python"
    return Profile(output, options, name or "python")


def profiled(
    output: str | Path | None = None,
    *,
    skip: int = 5,
    warmup: int = 2,
    steps: int = 5,
    duration: float | None = None,
    shapes: bool = False,
    memory: bool = False,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorator: each call of the function runs in ``stallscope.profile(...)`` and writes a bundle
    (default ``stallscope_out/<function>-<timestamp>``)."""
    options = ProfileOptions(skip, warmup, steps, duration, shapes, memory, auto_steps=False)
    options.check()

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with Profile(output, options, getattr(fn, "__name__", "profiled")):
                return fn(*args, **kwargs)

        return wrapper

    return decorate
