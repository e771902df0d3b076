"""Where host threads loaded data, and which thread drives the work (the window's end is measured on it)."""

from __future__ import annotations

import re

import numpy as np

from stallscope.analyzer.core import intervals
from stallscope.analyzer.core.arrays import group_order
from stallscope.analyzer.core.model import F64, I32, I64, Mask, TraceModel
from stallscope.analyzer.core.names import STEP_PREFIX, EventKind
from stallscope.analyzer.graph.dependency import Graph

#: scope names that say data loading, in any category (user annotations, torch's own
#: ``enumerate(DataLoader)#_...DataLoaderIter.__next__`` recorded as ``cpu_op`` or legacy ``Operator``):
#: ``load_data``, ``get_batch`` / ``next_batch`` / ``wait_for_batch`` / ``copy_batch_to_gpu``, ``collate``,
#: ``prefetch``, ``prepare_batch``, ``preprocess``, ``tokenize``, ``load_images``, or just ``data`` /
#: ``batch`` / ``input``; not names that merely contain the words (``DistributedDataParallel.forward``,
#: ``sparse_data_dist``, ``all2all_data``: communication, not input)
_LOADING = re.compile(
    r"dataloader|data[\s_-]?load|load[\s_-]?(data|batch|image|sample|example)s?"
    r"|(get|next|fetch|wait[\s_-]?for|copy|prepare|make)[\s_-]?batch|batch[\s_-]?(load|fetch|prep)"
    r"|collate|prefetch|pre[\s_-]?process|tokeni[sz]|^\W*(data|batch|input)\W*$",
    re.IGNORECASE,
)
#: Python frames (``file.py(LINE): function``) of data loading: torch.utils.data, HF datasets, a dataset's
#: ``__getitem__`` / ``__iter__`` / ``collate_fn`` outside torch itself
_LOADING_FRAME = re.compile(
    r"(torch/utils/data/|^datasets/|/datasets/|torchdata/|webdataset/|dali/).*\(\d+\): "
    r"|\(\d+\): (__getitem__|__getitems__|collate_fn|collate|default_collate)$",
    re.IGNORECASE,
)
_NOT_LOADING_FRAME = re.compile(
    r"torch/(nn|_tensor|fx|_dynamo|distributed|autograd)|<built-in", re.IGNORECASE
)
_SCOPES = (EventKind.ANNOTATION, EventKind.CPU_OP, EventKind.PYTHON)


def is_loading(name: str, kind: EventKind) -> bool:
    """Whether a host scope with this name (of this kind) is data loading."""
    if name.startswith(STEP_PREFIX):
        return False
    if kind == EventKind.PYTHON:
        return bool(_LOADING_FRAME.search(name)) and not _NOT_LOADING_FRAME.search(name)
    return bool(_LOADING.search(name))


def input_intervals(model: TraceModel) -> dict[int, tuple[F64, F64]]:
    """Per host thread, the disjoint intervals spent inside data loading: annotations or ops whose name
    says so, and Python frames of data loading code."""
    ev = model.events
    out: dict[int, tuple[F64, F64]] = {}
    mask = np.zeros(len(ev), dtype=np.bool_)
    for kind in _SCOPES:
        loading = np.array([is_loading(s, kind) for s in model.strings], dtype=np.bool_)
        mask |= (ev.kind == kind) & loading[ev.name]
    for lane, on in _by_thread(ev.lane, mask):
        out[lane] = intervals.union(ev.ts[on], ev.end[on])
    return out


def _by_thread(lane: I32, mask: Mask) -> list[tuple[int, I64]]:
    """The events of ``mask`` of each thread (by thread, each in event order): one sort, not a scan of
    every event per thread (a trace can have thousands of threads)."""
    chosen = np.flatnonzero(mask)
    chosen = chosen[group_order(lane[chosen])]
    lanes = lane[chosen]
    chunks = np.split(chosen, np.flatnonzero(lanes[1:] != lanes[:-1]) + 1)
    return [(int(lane[on[0]]), on) for on in chunks if len(on)]


def main_thread(model: TraceModel, g: Graph) -> int:
    """The thread whose end the window's end is measured on: the one that marks the steps; without steps,
    the thread whose work ended last (ties: the one that issued the most scheduling calls)."""
    if model.steps:
        return model.steps[-1].lane
    if g.calls:
        return g.threads.last_lane(np.inf, int(np.bincount(g.call_lane).argmax()))
    host = [lane.id for lane in model.lanes if not lane.on_device]
    return g.threads.last_lane(np.inf, host[0]) if host else 0


#: a stretch of a host thread that no event covers and that lasts longer than this is not Python's overhead
#: between ops (tens of µs) but time the trace does not show: a sampled or filtered trace, a thread asleep
UNTRACED_MIN_US = 1000.0
_NOT_WORK = (EventKind.INSTANT, EventKind.TRACE_SPAN, EventKind.OVERHEAD)


def untraced_intervals(model: TraceModel) -> dict[int, tuple[F64, F64]]:
    """Per host thread, the stretches between its first and last event that none of its events covers and
    that last longer than ``UNTRACED_MIN_US``."""
    ev = model.events
    host = np.array([not lane.on_device for lane in model.lanes], dtype=np.bool_)
    mask = host[ev.lane] & ~ev.is_kind(*_NOT_WORK)
    out: dict[int, tuple[F64, F64]] = {}
    for lane, on in _by_thread(ev.lane, mask):
        s, e = intervals.union(ev.ts[on], ev.end[on])
        lo, hi = e[:-1], s[1:]
        long = (hi - lo) > UNTRACED_MIN_US
        if long.any():
            out[lane] = (lo[long], hi[long])
    return out
