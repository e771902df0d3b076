"""Column operations done for many groups at once (a trace can have thousands of devices, streams or
threads: a pass asks each of them the same question with one sort, not one numpy pipeline per group).

A group is a small integer (a device's position in a list, say); each function gives, for every group,
exactly what the one-group operation it names gives on that group's rows alone (the same values, picked
or compared, never recomputed with other arithmetic).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from stallscope.analyzer.core.model import F64, I64


def bounds(group: I64, groups: int) -> I64:
    """For rows sorted by ``group`` (values in ``[0, groups)``): where each group's rows start, and the
    end of the last (``groups + 1`` offsets: group ``k`` is ``rows[out[k] : out[k + 1]]``)."""
    return np.searchsorted(group, np.arange(groups + 1), side="left").astype(np.int64)


def union(group: I64, starts: F64, ends: F64) -> tuple[I64, F64, F64]:
    """``intervals.union`` of each group's intervals: the disjoint intervals, sorted by group then start,
    and the group of each. Within a group, ties of start keep the rows' order (a stable sort), as there."""
    if not len(starts):
        return np.zeros(0, dtype=np.int64), np.empty(0), np.empty(0)
    order = np.lexsort((starts, group))
    g, s, e = group[order], starts[order], ends[order]
    run_end = _running_max(g, e)
    new = np.empty(len(s), dtype=np.bool_)
    new[0] = True
    new[1:] = (s[1:] > run_end[:-1]) | (g[1:] != g[:-1])
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return g[first], s[first], run_end[last]


def _running_max(group: I64, values: F64) -> F64:
    """``np.maximum.accumulate`` of ``values`` restarted at each group (rows sorted by group): on the
    values' ranks, lifted above every earlier group's, so that one accumulate never carries a maximum
    over a group's start. The result is picked from ``values``, never computed, as ``maximum`` picks it:
    of equal values (0.0 and -0.0 too) the later, of NaNs the first."""
    n = len(values)
    position = np.arange(n, dtype=np.int64)
    order = np.lexsort((np.where(np.isnan(values), -position, position), values))  # NaNs last
    rank = np.empty(n, dtype=np.int64)
    rank[order] = position
    lift = group.astype(np.int64) * (n + 1)
    top = np.maximum.accumulate(lift + rank) - lift
    out: F64 = values[order[top]]
    return out


def searchsorted(
    group: I64, values: F64, at_group: I64, at: F64, side: str = "left"
) -> npt.NDArray[np.int64]:
    """For rows sorted by ``(group, values)``: for each ``(at_group, at)``, ``np.searchsorted`` of ``at``
    in its group's values (``side`` as there), as a position in all the rows (add nothing: the group's
    own start is included; a result equal to the group's end means past its last value)."""
    n = len(values)
    if not len(at):
        return np.zeros(0, dtype=np.int64)
    query = np.concatenate([np.zeros(n, dtype=np.int8), np.ones(len(at), dtype=np.int8)])
    # on a tie of group and value, "right" puts the rows first (counted before the query), "left" after
    tie = query if side == "right" else 1 - query
    order = np.lexsort((tie, np.concatenate([values, at]), np.concatenate([group, at_group])))
    rows_before = np.cumsum(query[order] == 0)
    where = np.empty(len(order), dtype=np.int64)
    where[order] = np.arange(len(order))
    return np.asarray(rows_before[where[n:]], dtype=np.int64)
