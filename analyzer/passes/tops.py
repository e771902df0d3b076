"""Top tables, as ``key_averages``, TensorBoard's profiler plugin and HTA give them: the host ops and the
device kernels that took the most time inside the window, by name.

- **ops** (``cpu_op``, legacy ``Operator``): count, how many ran inside the profiled steps, total time, and
  self time (total less the time of the ops nested directly inside it, through any Python frames between
  them, as ``key_averages`` counts it);
- **kernels**: count, total and mean device time, and whether a GEMM-like kernel uses the tensor cores
  (``None`` for kernels that are not GEMMs).

``per_step_us`` is the total divided by the profiled steps (None without steps). On CPU-only runs the ops
table is the main answer: the terminal shows it by default there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stallscope.analyzer.core.model import TraceModel
from stallscope.analyzer.core.names import EventKind, gemm_kind

TOP = 20  # rows of each table in the JSON


@dataclass(frozen=True)
class OpRow:
    name: str
    count: int
    in_steps: int  # calls inside the profiled steps
    total_us: float
    self_us: float
    per_step_us: float | None


@dataclass(frozen=True)
class KernelRow:
    name: str
    count: int
    total_us: float
    mean_us: float
    tensor_cores: bool | None  # GEMM-like kernels: on the tensor cores or not; None for the others
    per_step_us: float | None


@dataclass(frozen=True)
class Tops:
    ops: tuple[OpRow, ...]
    kernels: tuple[KernelRow, ...]


def top_tables(model: TraceModel, start_us: float, end_us: float, limit: int = TOP) -> Tops:
    """The ``limit`` ops with the most self time and kernels with the most device time in the window."""
    ev = model.events
    inside = (ev.ts >= start_us) & (ev.ts < end_us)
    steps = len(model.steps) or None
    ops = np.flatnonzero(inside & (ev.kind == EventKind.CPU_OP))
    parent = _op_ancestor(ev.parent, ev.kind == EventKind.CPU_OP, ops)
    is_op_parent = parent >= 0
    nested = np.bincount(parent[is_op_parent], weights=ev.dur[ops][is_op_parent], minlength=len(ev))
    self_us = np.maximum(ev.dur[ops] - nested[ops], 0.0)
    in_step = _in_steps(model, ev.ts[ops])
    op_rows = _group(ev.name[ops], ev.dur[ops], self_us, in_step)
    by_self = sorted(op_rows, key=lambda r: (-r[3], -r[2], r[0]))[:limit]
    kernels = np.flatnonzero(inside & (ev.kind == EventKind.KERNEL))
    kernel_rows = _group(ev.name[kernels], ev.dur[kernels], ev.dur[kernels], np.ones(len(kernels), bool))
    by_total = sorted(kernel_rows, key=lambda r: (-r[2], r[0]))[:limit]
    return Tops(
        tuple(
            OpRow(model.strings[c], n, s, tot, own, tot / steps if steps else None)
            for c, n, tot, own, s in by_self
        ),
        tuple(
            KernelRow(
                model.strings[c],
                n,
                tot,
                tot / n,
                _tensor_cores(model.strings[c]),
                tot / steps if steps else None,
            )
            for c, n, tot, _own, _s in by_total
        ),
    )


def _op_ancestor(parent: np.ndarray, is_op: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The nearest enclosing op of each of ``rows`` (-1 if none), through the Python frames and other
    scopes between them (with stacks on, ``aten::_local_scalar_dense`` sits under a Python frame under
    ``aten::item``)."""
    anc = parent[rows].copy()
    todo = np.flatnonzero(anc >= 0)
    todo = todo[~is_op[anc[todo]]]
    while len(todo):  # one step up per round for the rows still below a non-op
        anc[todo] = parent[anc[todo]]
        todo = todo[anc[todo] >= 0]
        todo = todo[~is_op[anc[todo]]]
    return np.asarray(anc)


def _group(
    names: np.ndarray, total: np.ndarray, own: np.ndarray, flag: np.ndarray
) -> list[tuple[int, int, float, float, int]]:
    """(name code, count, total, self, flagged count) per distinct name, in code order. Name codes index
    the trace's strings (a small range): counted in place, no sort (linear at 10M events)."""
    if not len(names):
        return []
    if names.min() < 0:  # not a model the loader built (names are string indices): group by sorting
        codes, names = np.unique(names, return_inverse=True)
        names = names.reshape(-1)
        return [(int(codes[r[0]]), *r[1:]) for r in _group(names, total, own, flag)]
    count = np.bincount(names)
    codes = np.flatnonzero(count)
    count = count[codes]
    tot = np.bincount(names, weights=total)[codes]
    slf = np.bincount(names, weights=own)[codes]
    flagged = np.bincount(names, weights=flag.astype(np.float64))[codes]
    return [
        (int(c), int(n), float(t), float(s), int(f))
        for c, n, t, s, f in zip(
            codes.tolist(), count.tolist(), tot.tolist(), slf.tolist(), flagged.tolist(), strict=True
        )
    ]


def _in_steps(model: TraceModel, ts: np.ndarray) -> np.ndarray:
    if not model.steps:
        return np.zeros(len(ts), dtype=np.bool_)
    lo = np.array([s.start_us for s in model.steps])
    hi = np.array([s.end_us for s in model.steps])
    order = np.argsort(lo)
    lo, hi = lo[order], hi[order]
    k = np.searchsorted(lo, ts, side="right") - 1
    return np.asarray((k >= 0) & (ts < hi[np.maximum(k, 0)]))


def _tensor_cores(name: str) -> bool | None:
    kind = gemm_kind(name)
    return None if not kind else kind == "tensor_core"
