"""The two-stage pipeline model (DESIGN.md §4): host prep P, device compute G, n batches."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stallscope.analyzer.core import intervals
from stallscope.analyzer.core.model import TraceModel
from stallscope.analyzer.graph.dependency import Graph


@dataclass(frozen=True)
class Pipeline:
    host_prep_us: float  # P: median per-step host time not blocked in syncs
    device_us: float  # G: median per-step device busy time of the work launched in the step
    batches: int  # n: profiled steps
    serial_us: float  # n (P + G)
    pipelined_us: float  # P + G + (n - 1) max(P, G)
    bottleneck: str  # "host" or "device": the slower stage

    @staticmethod
    def of(p: float, g: float, n: int) -> Pipeline:
        return Pipeline(p, g, n, n * (p + g), p + g + (n - 1) * max(p, g), "host" if p > g else "device")


def pipeline_model(
    model: TraceModel, g: Graph, device: int | None, sync_wait_by_step: list[float]
) -> Pipeline | None:
    """P, G and n from the profiled steps; None without steps or device work."""
    if not model.steps or device is None or not g.activities:
        return None
    issued = g.issued()
    mine = np.flatnonzero(g.act_device == device)
    order = mine[np.argsort(issued[mine], kind="stable")]  # the device's activities by issue time
    when = issued[order]  # (never issued: NaN, sorted last, in no step)
    prep, compute = [], []
    for step, wait in zip(model.steps, sync_wait_by_step, strict=True):
        lo, hi = np.searchsorted(when, [step.start_us, step.end_us]).tolist()  # issued in [start, end)
        inside = np.sort(order[lo:hi])  # in activity order, as a mask over all of them would give
        s, e = intervals.union(g.act_start[inside], g.act_end[inside])
        compute.append(intervals.total(s, e))
        prep.append(max(step.dur_us - wait, 0.0))
    return Pipeline.of(float(np.median(prep)), float(np.median(compute)), len(model.steps))
