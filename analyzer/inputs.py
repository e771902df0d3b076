"""Where host threads loaded data, and which thread drives the work (the window's end is measured on it)."""

from __future__ import annotations

import re

import numpy as np

from analyzer import intervals
from analyzer.graph import Graph
from analyzer.model import F64, TraceModel
from analyzer.names import EventKind

#: user annotations whose name says data loading: torch's ``enumerate(DataLoader)#_...DataLoaderIter.__next__``,
#: ``load_data``, ``get_batch`` / ``next_batch`` / ``wait_for_batch`` / ``copy_batch_to_gpu``, ``collate``,
#: ``prefetch``, or just ``data`` / ``batch`` / ``input``; not names that merely contain the words
#: (``DistributedDataParallel.forward``, ``sparse_data_dist``, ``all2all_data``: communication, not input)
_LOADING = re.compile(
    r"dataloader|data[\s_-]?load|load[\s_-]?(data|batch)|(get|next|fetch|wait[\s_-]?for|copy)[\s_-]?batch"
    r"|batch[\s_-]?(load|fetch)|collate|prefetch|^\W*(data|batch|input)\W*$",
    re.IGNORECASE,
)


def input_intervals(model: TraceModel) -> dict[int, tuple[F64, F64]]:
    """Per host thread, the disjoint intervals spent inside data loading annotations."""
    ev = model.events
    loading = np.array(
        [bool(_LOADING.search(s)) and not s.startswith("ProfilerStep#") for s in model.strings]
    )
    mask = (ev.kind == EventKind.ANNOTATION) & loading[ev.name]
    out: dict[int, tuple[F64, F64]] = {}
    for lane in np.unique(ev.lane[mask]).tolist():
        on = mask & (ev.lane == lane)
        out[int(lane)] = intervals.union(ev.ts[on], ev.end[on])
    return out


def main_thread(model: TraceModel, g: Graph) -> int:
    """The thread that marks the steps, else the one that issued the most scheduling calls."""
    if model.steps:
        return model.steps[-1].lane
    if g.calls:
        return int(np.bincount(g.call_lane).argmax())
    host = [lane.id for lane in model.lanes if not lane.on_device]
    return host[0] if host else 0
