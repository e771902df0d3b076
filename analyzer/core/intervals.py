"""Interval arithmetic on numpy arrays: unions, clipping, overlap with windows."""

from __future__ import annotations

import numpy as np

from stallscope.analyzer.core.model import F64

NONE: tuple[F64, F64] = (
    np.zeros(0),
    np.zeros(0),
)  # no intervals (a thread that loads no data); never written
for _column in NONE:
    _column.setflags(write=False)


def union(starts: F64, ends: F64) -> tuple[F64, F64]:
    """Merge intervals into disjoint sorted ones (touching intervals merge)."""
    if not len(starts):
        return np.empty(0), np.empty(0)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=np.bool_)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], run_end[last]


def clip(starts: F64, ends: F64, lo: float, hi: float) -> tuple[F64, F64]:
    s, e = np.maximum(starts, lo), np.minimum(ends, hi)
    keep = e > s
    return s[keep], e[keep]


def total(starts: F64, ends: F64) -> float:
    return float(np.sum(ends - starts)) if len(starts) else 0.0


def covered_in(starts: F64, ends: F64, lo: F64, hi: F64) -> F64:
    """For disjoint sorted intervals (starts, ends), the covered length inside each window [lo, hi)."""
    if not len(starts):
        return np.zeros(len(lo))
    cum = np.concatenate([[0.0], np.cumsum(ends - starts)])

    def covered_before(x: F64) -> F64:
        k = np.searchsorted(starts, x, side="right")  # intervals starting at or before x
        partial = np.where(
            k > 0, np.minimum(ends[np.maximum(k - 1, 0)], x) - starts[np.maximum(k - 1, 0)], 0.0
        )
        return np.asarray(cum[np.maximum(k - 1, 0)] * (k > 0) + np.maximum(partial, 0.0))

    return np.asarray(covered_before(hi) - covered_before(lo))
