"""The trace clock: the time scale of ``ts`` in the Kineto/Chrome trace that torch.profiler writes.

What torch 2.13 writes (found by exporting a CPU trace and reading ``torch/profiler/_chrome_trace_export.py``
and libkineto's ``ChromeTraceBaseTime``):

- Activity timestamps are Unix-epoch nanoseconds (the profiler's approximate clock, converted to
  ``CLOCK_REALTIME`` by ``ApproximateClockToUnixTimeConverter`` when the profiler starts).
- The exported ``ts`` is **relative**: ``ts = (activity_ns - baseTimeNanoseconds) / 1000`` µs, and the
  top-level ``baseTimeNanoseconds`` is the epoch floored to a "trimonth" of 7,889,238 s
  (``(int(time.time()) // 7889238) * 7889238 * 10**9``), chosen so that float µs keep sub-µs precision.
  libkineto fixes it once per process (when its profiler controller is created); torch's Python exporter
  computes it at export time; both give the same value except across a trimonth boundary (every ~91 days).
- Evidence: in an exported trace ``baseTimeNanoseconds`` was 1790857026000000000 (= 227 x 7889238 s) and
  a ``record_function`` marker entered right after ``time.time_ns()`` had ``ts`` 12-300 µs after
  ``(time.time_ns() - base) / 1000`` (never before); ``tests/test_collector_sites.py`` proves it on each run.

So :func:`trace_clock_us` is ``(time.time_ns() - TRACE_BASE_NS) / 1000`` with the base computed the same
way once at import. A writer that finds another ``baseTimeNanoseconds`` in the exported trace (a run that
crossed a trimonth boundary) converts recorded times with :func:`rebase_us`.
"""

from __future__ import annotations

import time

TRIMONTH_S = 7_889_238  # libkineto's kSecondsIn3Months-style interval for ChromeTraceBaseTime


def base_ns_for(epoch_ns: int) -> int:
    """The ``baseTimeNanoseconds`` Kineto uses for a trace taken at ``epoch_ns``."""
    return (epoch_ns // 1_000_000_000 // TRIMONTH_S) * TRIMONTH_S * 1_000_000_000


TRACE_BASE_NS = base_ns_for(time.time_ns())


def _calibrate(samples: int = 7) -> int:
    """``time_ns() - perf_counter_ns()``, from the tightest of a few bracketed readings."""
    best_width, best_offset = 1 << 62, 0
    for _ in range(samples):
        p0 = time.perf_counter_ns()
        wall = time.time_ns()
        p1 = time.perf_counter_ns()
        if p1 - p0 < best_width:
            best_width, best_offset = p1 - p0, wall - (p0 + p1) // 2
    return best_offset


_PERF_TO_EPOCH_NS = _calibrate()


def trace_base_ns() -> int:
    """The ``baseTimeNanoseconds`` that :func:`trace_clock_us` is relative to."""
    return TRACE_BASE_NS


def trace_clock_us() -> float:
    """Now, in µs on the trace clock (the same scale as the exported trace's ``ts``)."""
    return (time.time_ns() - TRACE_BASE_NS) / 1000.0


def to_trace_us(perf_ns: int) -> float:
    """A ``time.perf_counter_ns()`` reading on the trace clock (offset calibrated once at import; the
    two clocks may drift apart by NTP slewing, a few µs per minute at most)."""
    return (perf_ns + _PERF_TO_EPOCH_NS - TRACE_BASE_NS) / 1000.0


def rebase_us(t_us: float, trace_base: int) -> float:
    """A time from :func:`trace_clock_us` on the scale of a trace whose ``baseTimeNanoseconds`` is
    ``trace_base`` (the identity unless the run crossed a trimonth boundary)."""
    return t_us + (TRACE_BASE_NS - trace_base) / 1000.0
