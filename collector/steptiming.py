"""Per-step timing for the whole run (not only the profiled window): host wall and CUDA-event device time.

``timer = StepTimer()`` marks the first step boundary; ``timer.step()`` marks each further one (the end of
one step is the start of the next); ``timer.close()`` at the end of the run; ``timer.summary()`` is the
sidecar's ``step_timing``.

- Host: ``time.perf_counter_ns()`` at each boundary (step *k* lasts from boundary *k-1* to *k*).
- Device: when CUDA is in use (``torch.cuda.is_initialized()`` — the timer never creates a CUDA context
  itself), a ``torch.cuda.Event(enable_timing=True)`` is recorded on the current stream at each boundary;
  a step's device time is ``elapsed_time`` between consecutive events, i.e. the span of the current
  stream between the two boundaries. Events are read without blocking: every ``HARVEST_EVERY`` steps the
  finished ones (``Event.query()``) are read and released, so memory stays bounded and the loop never
  syncs; ``close()`` waits for the last event once. Steps before CUDA came into use have no device time.
- On a CPU-only run the device fields are ``null``.

Cost per step: one ``perf_counter_ns`` and an array append (about 0.2 µs); with CUDA, one event
creation and record (a few µs) and an occasional non-blocking query.
"""

from __future__ import annotations

import sys
from array import array
from collections import deque
from time import perf_counter_ns
from typing import Any

from stallscope.collector.clock import to_trace_us

HARVEST_EVERY = 64
MAX_LISTED = 10_000  # per-step lists in the summary are cut to the first this many steps


class StepTimer:
    def __init__(self, *, device: bool = True) -> None:
        self._marks = array("q", [perf_counter_ns()])  # host boundaries
        self._use_device = device
        self._torch: Any = None
        self._pending: deque[tuple[int, Any]] = deque()  # (boundary index, recorded event), oldest first
        self._last: tuple[int, Any] | None = None  # the newest event already read (start of the next span)
        self._device_ms: dict[int, float] = {}  # step index (1-based boundary index) -> device ms
        self._device_name: str | None = None
        self._closed = False
        self._mark_device(0)

    @property
    def steps(self) -> int:
        return len(self._marks) - 1

    def step(self) -> None:
        """A step boundary: the current step ends and the next begins."""
        if self._closed:
            return
        self._marks.append(perf_counter_ns())
        if self._use_device:
            index = len(self._marks) - 1
            self._mark_device(index)
            if index % HARVEST_EVERY == 0:
                self._harvest(block=False)

    def restart(self) -> None:
        """Forget the steps marked so far (another source marks the steps from now on): the next boundary
        ends step 1, which starts where the run's first did."""
        if self._closed:
            return
        del self._marks[1:]
        self._pending = deque(p for p in self._pending if p[0] == 0)
        self._last = None
        self._device_ms.clear()

    def close(self) -> None:
        """End of the run: read the outstanding device times (waits once for the last event)."""
        if self._closed:
            return
        self._closed = True
        self._harvest(block=True)

    # device events ----------------------------------------------------------------------------------------
    def _mark_device(self, index: int) -> None:
        torch = self._torch
        if torch is None:
            torch = sys.modules.get("torch")  # never import torch (or create a CUDA context) for timing
            if torch is None or not torch.cuda.is_initialized():
                return  # no CUDA in use (yet)
            self._torch = torch
            self._device_name = f"cuda:{torch.cuda.current_device()}"
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self._pending.append((index, event))

    def _harvest(self, block: bool) -> None:
        pending = self._pending
        if block and pending:
            pending[-1][1].synchronize()
        while pending:
            index, event = pending[0]
            if not block and not event.query():
                break
            pending.popleft()
            if self._last is not None:
                start_index, start = self._last
                if start_index == index - 1:
                    self._device_ms[index] = float(start.elapsed_time(event))
            self._last = (index, event)

    # results ----------------------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """The sidecar's ``step_timing``: count, per-step lists (cut to ``MAX_LISTED``) and statistics of
        the whole run; device fields are null without CUDA."""
        marks = self._marks
        n = len(marks) - 1
        host = [(marks[i + 1] - marks[i]) / 1e6 for i in range(n)]
        device: list[float | None] | None = None
        device_values: list[float] = []
        if self._device_name is not None:
            device = [self._device_ms.get(i + 1) for i in range(n)]
            device_values = [v for v in device if v is not None]
        listed = min(n, MAX_LISTED)
        return {
            "count": n,
            "clock": "perf_counter_ns",
            "device": self._device_name,
            "host_ms": _stats(host),
            "device_ms": _stats(device_values) if device is not None else None,
            "steps": {
                "start_us": [to_trace_us(marks[i]) for i in range(listed)],
                "host_ms": host[:listed],
                "device_ms": device[:listed] if device is not None else None,
            },
            "truncated": n > listed,
        }


def _stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {
            "count": 0,
            "median": None,
            "p90": None,
            "min": None,
            "max": None,
            "mean": None,
            "total": None,
        }
    s = sorted(values)
    return {
        "count": len(s),
        "median": _quantile(s, 0.5),
        "p90": _quantile(s, 0.9),
        "min": s[0],
        "max": s[-1],
        "mean": sum(s) / len(s),
        "total": sum(s),
    }


def _quantile(s: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default) on sorted values."""
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)
