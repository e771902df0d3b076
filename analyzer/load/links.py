"""Resolve the links of the trace model, vectorised where possible.

- ``parent``: op nesting per host thread (python frames, annotations, cpu_ops and API calls all nest);
- ``launch``: device activity or sync record -> host API call with the same correlation id;
- ``op``: host API call -> the cpu_op it ran under (External id when it agrees with nesting, else nesting);
- ``py_parent``: python frame -> parent frame (``Python parent id``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stallscope.analyzer.core.model import F64, I64, NO_ID, EventTable
from stallscope.analyzer.core.names import DEVICE_KINDS, ApiKind, EventKind

_MAX_DEPTH = 256  # pointer-chasing bound; real stacks are far shallower


def resolve_links(cols: dict[str, Any]) -> EventTable:
    """Build the event table from sorted columns (by ts, longest first) and fill its link columns."""
    n = len(cols["ts"])
    kind = cols["kind"]
    on_device = np.isin(kind, list(DEVICE_KINDS))
    parent = nest(cols["ts"], cols["ts"] + cols["dur"], cols["lane"], ~on_device)
    launch = _match_ids(cols["correlation"], on_device, cols["api"] != ApiKind.NONE)
    py_parent = _match_ids(
        cols["python_parent_id"], kind == EventKind.PYTHON, kind == EventKind.PYTHON, key=cols["python_id"]
    )
    op = _ops(cols, parent)
    return EventTable(
        ts=cols["ts"],
        dur=cols["dur"],
        kind=kind,
        api=cols["api"],
        name=cols["name"],
        cat=cols["cat"],
        lane=cols["lane"],
        external_id=cols["external_id"],
        correlation=cols["correlation"],
        python_id=cols["python_id"],
        stream=cols["stream"],
        device=cols["device"],
        bytes=cols["bytes"],
        wait_stream=cols["wait_stream"],
        wait_corr=cols["wait_corr"],
        stack=cols["stack"],
        parent=parent,
        launch=launch,
        op=op,
        py_parent=py_parent if n else np.empty(0, np.int64),
    )


def nest(ts: Any, end: Any, lane: Any, host: Any) -> I64:
    """Parent of each host event: the latest earlier event on its thread that is still open when it starts.

    Events must be sorted by (ts, longest first). Vectorised per thread: the depth of an event is the
    number of earlier events still open at its start; its parent is the latest earlier event one level
    up. Where rounding made a child overrun its parent, the candidate is checked (it must still be open)
    and replaced by its own parent until one is, so the result never names a closed event.
    """
    parent = np.full(len(ts), NO_ID, dtype=np.int64)
    host_idx = np.flatnonzero(host)
    if not len(host_idx):
        return parent
    by_lane = host_idx[np.argsort(lane[host_idx], kind="stable")]
    bounds = np.flatnonzero(np.diff(lane[by_lane])) + 1
    for group in np.split(by_lane, bounds):
        local = _nest_sorted(ts[group], end[group])
        parent[group] = np.where(local >= 0, group[np.maximum(local, 0)], NO_ID)
    return parent


def _nest_sorted(t: F64, e: F64) -> I64:
    """``_nest`` for one thread; returns positions within the arrays (-1 for top-level events)."""
    n = len(t)
    pos = np.arange(n, dtype=np.int64)
    closed = np.searchsorted(np.sort(e), t, side="right")  # events ended at or before my start...
    zero = e == t
    new_group = np.empty(n, dtype=np.bool_)
    new_group[:1] = True
    new_group[1:] = t[1:] != t[:-1]
    group = np.cumsum(new_group) - 1
    zeros_before = np.cumsum(zero) - zero  # zero-length events strictly before me
    group_first = np.flatnonzero(new_group)
    zeros_in_group = np.add.reduceat(zero.astype(np.int64), group_first)[group]
    zeros_before_in_group = zeros_before - zeros_before[group_first][group]
    closed -= zeros_in_group - zeros_before_in_group  # ...minus zero-length ones at my ts sorted after me
    depth = pos - closed
    parent = _one_level_up(depth)
    for _ in range(_MAX_DEPTH):  # overruns from rounding: climb until the candidate is open at my start
        stale = np.flatnonzero((parent >= 0) & (e[np.maximum(parent, 0)] <= t))
        if not len(stale):
            break
        parent[stale] = parent[parent[stale]]
    return parent


_LEVELS = 64  # up to this many nesting levels, the parents are found level by level


def _one_level_up(depth: I64) -> I64:
    """For each position, the latest earlier position whose depth is one less (-1 when none, or at depth
    0 or below). Level by level when the nesting is shallow (as real traces are): each search is of sorted
    positions in sorted positions, which stays in cache however long the thread; else all at once."""
    n = len(depth)
    order = np.argsort(depth, kind="stable")  # by depth, then position
    levels = depth[order]
    parent = np.full(n, NO_ID, dtype=np.int64)
    if not n or int(levels[-1]) - max(int(levels[0]), 0) > _LEVELS:
        pos = np.arange(n, dtype=np.int64)
        key = levels * (n + 1) + order
        at = np.searchsorted(key, (depth - 1) * (n + 1) + pos) - 1
        cand = order[np.maximum(at, 0)]
        return np.where((at >= 0) & (depth > 0) & (depth[cand] == depth - 1), cand, NO_ID)
    first = max(int(levels[0]), 0) + 1
    bounds = np.searchsorted(levels, np.arange(first - 1, int(levels[-1]) + 2))
    for i in range(int(levels[-1]) + 1 - first):  # level first + i
        above = order[bounds[i] : bounds[i + 1]]  # positions one level up, increasing
        mine = order[bounds[i + 1] : bounds[i + 2]]  # positions at this level, increasing
        if not len(above) or not len(mine):
            continue
        at = np.searchsorted(above, mine) - 1
        parent[mine] = np.where(at >= 0, above[np.maximum(at, 0)], NO_ID)
    return parent


def _match_ids(query: Any, query_mask: Any, target_mask: Any, key: Any = None) -> I64:
    """For events in ``query_mask``, the index of the first event in ``target_mask`` whose ``key``
    (default: the same column) equals their ``query`` value; ``-1`` when none or the value is absent."""
    key = query if key is None else key
    out = np.full(len(query), NO_ID, dtype=np.int64)
    targets = np.flatnonzero(target_mask & (key >= 0))
    if not len(targets):
        return out
    keys, first = np.unique(key[targets], return_index=True)
    q = np.flatnonzero(query_mask & (query >= 0))
    pos = np.searchsorted(keys, query[q])
    pos[pos == len(keys)] = 0
    hit = keys[pos] == query[q]
    out[q[hit]] = targets[first[pos[hit]]]
    return out


def _ops(cols: dict[str, Any], parent: I64) -> I64:
    """cpu_op of each host API call: by External id when that op encloses the call on the same
    thread, otherwise the innermost enclosing cpu_op found by walking ``parent``."""
    kind, ts, end, lane = cols["kind"], cols["ts"], cols["ts"] + cols["dur"], cols["lane"]
    is_api = cols["api"] != ApiKind.NONE
    is_api |= np.isin(kind, [EventKind.RUNTIME, EventKind.DRIVER])
    by_ext = _match_ids(cols["external_id"], is_api, kind == EventKind.CPU_OP)
    calls = np.flatnonzero(by_ext >= 0)
    cand = by_ext[calls]
    ok = (lane[cand] == lane[calls]) & (ts[cand] <= ts[calls]) & (end[cand] >= end[calls])
    by_ext[calls[~ok]] = NO_ID
    todo = np.flatnonzero(is_api & (by_ext < 0))
    walk = parent[todo]
    for _ in range(_MAX_DEPTH):
        open_ = (walk >= 0) & (kind[np.maximum(walk, 0)] != EventKind.CPU_OP)
        if not open_.any():
            break
        walk[open_] = parent[walk[open_]]
    by_ext[todo] = walk
    return by_ext
