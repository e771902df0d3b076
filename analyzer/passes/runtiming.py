"""Steps of the whole run (from the sidecar's ``step_timing``) set against the few profiled steps.

The profiler records a handful of steps; the collector times every step of the run (host wall time,
and device time from CUDA events). This pass summarises that record and says whether the profiled
steps were typical: a window that caught a warm-up, a checkpoint or an evaluation step is not the
steady state, and every figure drawn from it should be read with that in mind.

Steady state: every step but the first (compilation, allocator and cuDNN warm-up live there).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stallscope.analyzer.core.numbers import finite_float

TYPICAL_WITHIN = 0.2  # profiled median within ±20% of the run's steady-state median: typical


@dataclass(frozen=True)
class Distribution:
    """Per-step times in milliseconds."""

    count: int
    median_ms: float
    p90_ms: float
    min_ms: float
    max_ms: float


@dataclass(frozen=True)
class RunTiming:
    """``steps`` steps timed in the whole run; ``host``/``device`` over the steady state (all but the
    first step); ``profiled_median_ms`` is the median wall time of the trace's own profiled steps and
    ``profiled_ratio`` its ratio to the steady-state host median (None without profiled steps)."""

    steps: int
    host: Distribution
    device: Distribution | None
    profiled_median_ms: float | None
    profiled_ratio: float | None

    @property
    def typical(self) -> bool | None:
        """Whether the profiled steps look like the run's steady state (None when unknown)."""
        if self.profiled_ratio is None:
            return None
        return abs(self.profiled_ratio - 1.0) <= TYPICAL_WITHIN


def run_timing(step_timing: dict[str, Any], profiled_wall_us: Sequence[float]) -> RunTiming | None:
    """Summarise the sidecar's ``step_timing`` (None when it holds no usable step); ``profiled_wall_us``
    are the wall times of the trace's profiled steps. Values that are not numbers are ignored."""
    listed = step_timing.get("steps") if isinstance(step_timing.get("steps"), dict) else {}
    host = _steady((listed or {}).get("host_ms"))
    device = _steady((listed or {}).get("device_ms"))
    count = step_timing.get("count")
    steps = (
        count if isinstance(count, int) and not isinstance(count, bool) and count >= len(host) else len(host)
    )
    host_dist = _distribution(host)
    if host_dist is None:
        return None
    device_dist = _distribution(device)
    profiled = [float(v) / 1000.0 for v in profiled_wall_us]
    profiled_median = float(np.median(profiled)) if profiled else None
    ratio = (
        profiled_median / host_dist.median_ms
        if profiled_median is not None and host_dist.median_ms > 0
        else None
    )
    return RunTiming(steps, host_dist, device_dist, profiled_median, ratio)


_MAX_STEP_MS = 1e12  # ~30 years: beyond it a step time is not a measurement (and sums could overflow)


def _steady(values: Any) -> list[float]:
    """The usable per-step times after the first step (all of them when only the first is usable)."""
    if not isinstance(values, list):
        return []
    numbers = [(i, finite_float(v)) for i, v in enumerate(values)]
    usable = [(i, v) for i, v in numbers if v is not None and 0 <= v <= _MAX_STEP_MS]
    later = [v for i, v in usable if i > 0]
    return later or [v for _, v in usable]


def _distribution(values: list[float]) -> Distribution | None:
    if not values:
        return None
    a = np.asarray(values, dtype=np.float64)
    return Distribution(
        count=len(values),
        median_ms=float(np.median(a)),
        p90_ms=float(np.quantile(a, 0.9)),
        min_ms=float(a.min()),
        max_ms=float(a.max()),
    )
