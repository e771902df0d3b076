"""Counters: Chrome counter events (``ph: "C"``) and the metrics of profiler ranges, kept as a small
columnar table (``model.Counters``) and exported decimated, so a trace with millions of samples still
gives a bounded analysis document.

Series naming: a counter event ``{"name": "GPU memory", "args": {"allocated": 1, "reserved": 2}}`` gives
the series ``GPU memory.allocated`` and ``GPU memory.reserved``; a single ``value`` key (or a key equal to
the name) gives ``GPU memory``; a key that is a unit (``bytes``, ``us``...) gives the series ``GPU memory``
with that unit. A profiler range's metrics are one series per metric (``smsp__inst_executed.sum``), one
sample per range at its start.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stallscope.analyzer.core.model import F64, Counters, Series
from stallscope.analyzer.core.numbers import parse_uint
from stallscope.analyzer.load.raw import CounterSample

_UNITS = frozenset({"bytes", "b", "kb", "mb", "gb", "us", "ms", "ns", "s", "percent", "%", "w", "mhz", "c"})
MAX_POINTS = 1000  # per series in the analysis document
MAX_SERIES = 64  # in the analysis document; the model keeps every series


def series_of(name: str, key: str, is_range: bool) -> tuple[str, str | None]:
    """(series name, unit) of one key of a counter event's ``args``."""
    if is_range:
        return key, None
    if key.lower() in _UNITS:
        return name, key
    if key in ("value", name):
        return name, None
    return f"{name}.{key}", None


class CounterBuilder:
    """Collects counter samples batch by batch as arrays (no object per sample is kept)."""

    def __init__(self) -> None:
        self.codes: dict[tuple[str, str | None, str, bool], int] = {}
        self.series: list[np.ndarray[Any, np.dtype[np.int32]]] = []
        self.ts: list[F64] = []
        self.value: list[F64] = []

    def add(self, samples: list[CounterSample]) -> None:
        if not samples:
            return
        codes, ts, value = [], [], []
        for name, pid, t, values, is_range in samples:
            for key, v in values.items():
                series, unit = series_of(name, key, is_range)
                code = self.codes.setdefault((series, unit, pid, is_range), len(self.codes))
                codes.append(code)
                ts.append(t)
                value.append(v)
        self.series.append(np.array(codes, dtype=np.int32))
        self.ts.append(np.array(ts, dtype=np.float64))
        self.value.append(np.array(value, dtype=np.float64))

    def build(self, device_ids: set[int]) -> Counters:
        """The table, sorted by (series, ts). A series belongs to a device when its process id is that
        device's (Kineto writes device activity under the device index) or it comes from a range."""
        if not self.series:
            return Counters()
        series = np.concatenate(self.series)
        ts, value = np.concatenate(self.ts), np.concatenate(self.value)
        order = np.lexsort((ts, series))
        meta = []
        for (name, unit, pid, is_range), _code in sorted(self.codes.items(), key=lambda kv: kv[1]):
            numeric = parse_uint(pid)
            device = numeric if numeric is not None and (is_range or numeric in device_ids) else -1
            meta.append(Series(name, unit, pid, device))
        return Counters(tuple(meta), series[order], ts[order], value[order])


def decimate(ts: F64, value: F64, max_points: int = MAX_POINTS) -> tuple[F64, F64]:
    """At most ``max_points`` samples that keep the shape: past the limit, the time range is cut into
    ``max_points // 2`` buckets and each keeps its minimum and its maximum (in time order)."""
    if len(ts) <= max_points:
        return ts, value
    buckets = max(max_points // 2, 1)
    lo, hi = float(ts[0]), float(ts[-1])
    width = (hi - lo) / buckets or 1.0
    bucket = np.minimum(((ts - lo) // width).astype(np.int64), buckets - 1)
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    keep = []
    for a, b in zip(starts.tolist(), np.r_[starts[1:], len(ts)].tolist(), strict=True):
        part = value[a:b]
        keep.extend(sorted({a + int(np.argmin(part)), a + int(np.argmax(part))}))
    index = np.array(keep, dtype=np.int64)
    return ts[index], value[index]


def window_stats(ts: F64, value: F64, start_us: float, end_us: float) -> dict[str, float | None]:
    """A series' min, mean and max over the samples inside the window (None when it has none)."""
    inside = value[(ts >= start_us) & (ts <= end_us)]
    if not len(inside):
        return {"min": None, "mean": None, "max": None}
    return {"min": float(inside.min()), "mean": float(inside.mean()), "max": float(inside.max())}


def counters_json(
    counters: Counters, start_us: float = -np.inf, end_us: float = np.inf
) -> tuple[list[dict[str, Any]], list[str]]:
    """The ``counters`` key of the analysis document (each series decimated, with its min, mean and max
    inside the window), and notes on what was left out of it."""
    out: list[dict[str, Any]] = []
    for i, s in enumerate(counters.series[:MAX_SERIES]):
        ts, value = counters.of(i)
        shown_ts, shown_value = decimate(ts, value, MAX_POINTS)
        out.append(
            {
                "name": s.name,
                "unit": s.unit,
                "pid": s.pid,
                "device": s.device,
                "samples": len(ts),
                "ts_us": shown_ts.tolist(),
                "value": shown_value.tolist(),
                "window": window_stats(ts, value, start_us, end_us),
            }
        )
    notes = []
    if len(counters.series) > MAX_SERIES:
        notes.append(f"counters: {len(counters.series) - MAX_SERIES} more series not in this document")
    return out, notes
