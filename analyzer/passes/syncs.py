"""Syncs: blocking host calls grouped per user-level operation, with kind, cost, call site and whether
they were avoidable (DESIGN.md §4).

One ``.item()`` issues a blocking copy and a stream synchronize: both sit under one aten op and make one
sync, whose ``api`` is the call that blocked longest. ``kind`` comes from the aten op above the calls;
``wait_us`` is the host time blocked waiting for device work (``Graph.waited``: from each call's start to
the end of what it awaited, within the call; the summary's "host blocked in syncs" is the same time, so a
synchronize that found the device done counts 0); ``bubble_us`` the device idle charged to it by the gap pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

import numpy as np

from stallscope.analyzer.core.model import NO_ID, Step, TraceModel
from stallscope.analyzer.core.names import ApiKind, EventKind, is_annotation_name
from stallscope.analyzer.core.sites import CallSite, call_site
from stallscope.analyzer.graph.dependency import Blocking, CallActivities, Graph
from stallscope.analyzer.load.sidecar import Sidecar


class SyncKind(str, Enum):
    SCALAR_READ = "scalar_read"  # .item(), _local_scalar_dense, is_nonzero, `if tensor:`
    TO_HOST = "to_host"  # .to("cpu"), .cpu(), .tolist(), .numpy(), copy_ to the host
    DATA_DEPENDENT = "data_dependent"  # nonzero, masked_select, boolean indexing, unique, repeat_interleave
    BLANKET = "blanket"  # device-wide synchronize
    STREAM = "stream"
    EVENT = "event"
    PAGEABLE_COPY = "pageable_copy"  # a non_blocking copy made synchronous by pageable memory
    ALLOCATOR = "allocator"
    RUNTIME = (
        "runtime"  # a blocking runtime's launch (MTIA runFunction): how the program launches, never avoidable
    )
    OTHER = "other"


class Reason(str, Enum):
    BLANKET = "blanket"  # a narrower sync, or none, would do
    REPEATED = "repeated"  # the same site syncs in every step
    REDUNDANT = "redundant"  # nothing was queued since the previous sync
    LOGGING = "logging"  # the value only feeds print/logging/metrics
    PAGEABLE_COPY = "pageable_copy"
    DATA_DEPENDENT = "data_dependent"


@dataclass(frozen=True)
class Sync:
    id: int
    kind: SyncKind
    api: str  # the runtime call that blocked longest
    op: str | None  # the user-level aten op the calls ran under
    thread: int  # host lane
    start_us: float
    wait_us: float
    bubble_us: float
    avoidable: bool
    reasons: tuple[Reason, ...]
    call_site: CallSite | None
    calls: tuple[int, ...]  # graph call indices grouped into this sync
    step: int  # index of the step it ran in (-1: outside every step)


_SCALAR = re.compile(r"aten::(item|_local_scalar_dense|is_nonzero)$")
_TO_HOST = re.compile(r"aten::(to|_to_copy|copy_|cpu|tolist|numpy)$")
_DATA_DEPENDENT = re.compile(
    r"aten::(nonzero|nonzero_static|masked_select|unique|_unique2|unique_consecutive|repeat_interleave|"
    r"index|index_put_|masked_scatter_|bincount|histc)$"
)
_LOGGING = re.compile(r"log|print|metric|wandb|tensorboard|summary_writer|tqdm|report", re.IGNORECASE)


def find_syncs(
    model: TraceModel,
    g: Graph,
    bubble_us: dict[int, float],
    start_us: float,
    end_us: float,
    sidecar: Sidecar | None = None,
) -> tuple[Sync, ...]:
    """Every blocking call inside the window, grouped per user-level operation, classified. The call site
    is the collector's exact line when a sidecar recorded the call, else the innermost user frame."""
    waited = g.waited()
    acts_by_call = CallActivities(g.act_call, g.calls)
    pageable_name = np.array(["Pageable" in name for name in model.strings], dtype=np.bool_)
    touches = pageable_name[model.events.name[g.act_event]] & (g.act_call >= 0)
    pageable = set(g.act_call[touches].tolist())  # calls that copied to or from pageable memory
    inside = (g.call_start >= start_us) & (g.call_start <= end_us)
    candidates = np.flatnonzero(
        inside & ((g.call_blocking != Blocking.NO) | np.isin(np.arange(g.calls), list(pageable)))
    )
    calls = [
        c
        for c in candidates.tolist()
        if waited[c] > 0 or _named_sync(model, g, c) or c in pageable  # pageable: a sync even when idle
    ]
    groups: dict[tuple[int, int], list[int]] = {}
    for c in calls:
        e = int(g.call_event[c])
        top = _user_op(model, e)
        key = (int(g.call_lane[c]), top if top >= 0 else -1 - c)
        groups.setdefault(key, []).append(c)
    raw = []
    step_of = _StepOf(model.steps)
    logging_memo: dict[int, bool] = {}
    for (lane, top), members in sorted(groups.items(), key=lambda kv: g.call_start[kv[1][0]]):
        duration = g.call_end[members] - g.call_start[members]
        longest = members[int(np.argmax(duration))]
        e = int(g.call_event[longest])
        raw.append(
            (
                _kind(model, g, members, top, acts_by_call),
                model.name_of(e),
                model.name_of(top) if top >= 0 else None,
                lane,
                float(g.call_start[members[0]]),
                float(waited[members].sum()),
                sum(bubble_us.get(c, 0.0) for c in members),
                _site(model, g, sidecar, lane, members, top if top >= 0 else e),
                tuple(members),
                step_of(float(g.call_start[members[0]])),
                _logging(model, top if top >= 0 else e, logging_memo),
            )
        )
    return _classify(model, g, raw, end_us)


def _site(
    model: TraceModel, g: Graph, sidecar: Sidecar | None, lane: int, members: list[int], event: int
) -> CallSite | None:
    if sidecar is not None:
        begin = float(model.events.ts[event])
        end = float(g.call_end[members].max())
        exact = sidecar.exact_site(model.lanes[lane].tid, begin, end)
        if exact is not None:
            return exact
    return call_site(model, event)


def _named_sync(model: TraceModel, g: Graph, c: int) -> bool:
    """Explicit synchronize calls count even when they did not have to wait (they still could have)."""
    return bool(model.events.api[g.call_event[c]] in _SYNC_APIS)


# members read once: an enum member read from its class costs a lookup each time (these run per sync)
_SYNC_APIS = (ApiKind.SYNC_DEVICE, ApiKind.SYNC_STREAM, ApiKind.SYNC_EVENT)
_CPU_OP = EventKind.CPU_OP
_FRAME_KINDS = (EventKind.PYTHON, EventKind.ANNOTATION)


def _user_op(model: TraceModel, event: int) -> int:
    """The outermost cpu_op above a runtime call on its thread (the user-level operation), or -1.
    Annotations that legacy traces file as operators (``ProfilerStep#N``...) are regions, not ops."""
    ev = model.events
    at, top = int(ev.parent[event]), NO_ID
    for _ in range(256):
        if at < 0:
            break
        if ev.kind[at] == _CPU_OP and not is_annotation_name(model.name_of(at)):
            top = at
        at = int(ev.parent[at])
    return top


def _ops_under(model: TraceModel, top: int, event: int) -> list[str]:
    """Names of the cpu_ops from ``event`` up to ``top``."""
    ev = model.events
    names, at = [], int(ev.parent[event])
    while at >= 0:
        if ev.kind[at] == _CPU_OP:
            names.append(model.name_of(at))
        if at == top:
            break
        at = int(ev.parent[at])
    return names


def _kind(
    model: TraceModel, g: Graph, members: list[int], top: int, acts_by_call: CallActivities
) -> SyncKind:
    ev = model.events
    blocking = {Blocking(int(g.call_blocking[c])) for c in members}
    if blocking == {Blocking.ALLOCATOR}:  # only allocator calls blocked, whatever op allocated (aten::to...)
        return SyncKind.ALLOCATOR
    if blocking == {Blocking.RUNTIME}:
        return SyncKind.RUNTIME
    ops = [n for c in members for n in _ops_under(model, top, int(g.call_event[c]))]
    if any(_SCALAR.match(n) for n in ops):
        return SyncKind.SCALAR_READ
    if any(_DATA_DEPENDENT.match(n) for n in ops):
        return SyncKind.DATA_DEPENDENT
    copy_names = [model.name_of(int(g.act_event[a])) for c in members for a in acts_by_call.of(c)]
    if any("Pageable" in n and "HtoD" in n for n in copy_names) and not any("DtoH" in n for n in copy_names):
        return SyncKind.PAGEABLE_COPY
    if any("DtoH" in n for n in copy_names) or any(_TO_HOST.match(n) for n in ops):
        return SyncKind.TO_HOST if ops else SyncKind.OTHER
    if Blocking.ALLOCATOR in blocking:
        return SyncKind.ALLOCATOR
    # what the program called decides: an event synchronize whose record the trace lacks is still an event
    # wait (the graph makes it wait for the whole device, the most it can have waited for)
    apis = {int(ev.api[g.call_event[c]]) for c in members}
    if ApiKind.SYNC_DEVICE in apis:
        return SyncKind.BLANKET
    if ApiKind.SYNC_STREAM in apis or Blocking.STREAM in blocking:
        return SyncKind.STREAM
    if ApiKind.SYNC_EVENT in apis or Blocking.EVENT in blocking:
        return SyncKind.EVENT
    if Blocking.DEVICE in blocking:
        return SyncKind.BLANKET
    if any(ev.api[g.call_event[c]] in (ApiKind.MALLOC, ApiKind.FREE) for c in members):
        return SyncKind.ALLOCATOR
    return SyncKind.OTHER


class _StepOf:
    """The first step ``[start, end)`` holding a time (-1: none): a binary search when the steps follow
    one another (as profiled steps do), else a scan."""

    def __init__(self, steps: tuple[Step, ...]) -> None:
        self.steps = steps
        self.start = np.array([s.start_us for s in steps], dtype=np.float64)
        self.end = np.array([s.end_us for s in steps], dtype=np.float64)
        self.ordered = bool(np.all(self.start[1:] >= self.end[:-1]))

    def __call__(self, t: float) -> int:
        if not self.ordered:
            return next((i for i, s in enumerate(self.steps) if s.start_us <= t < s.end_us), -1)
        k = int(np.searchsorted(self.start, t, side="right")) - 1
        return k if k >= 0 and t < self.end[k] else -1


def _logging(model: TraceModel, event: int, memo: dict[int, bool]) -> bool:
    """A python frame or annotation above the sync says logging, printing or metrics. ``memo``: the answer
    for each frame already climbed from (the syncs of one loop share their frames)."""
    ev = model.events
    at = int(ev.parent[event]) if event >= 0 else -1
    climbed: list[int] = []
    found = False
    for _ in range(_MAX_CLIMB):
        if at < 0:
            break
        known = memo.get(at)
        if known is not None:
            found = known
            break
        climbed.append(at)
        if ev.kind[at] in _FRAME_KINDS and _LOGGING.search(model.name_of(at)):
            found = True
            break
        at = int(ev.parent[at])
    else:  # the climb was cut short: what lies above is unknown, so nothing is remembered
        return False
    memo.update(dict.fromkeys(climbed, found))
    return found


_MAX_CLIMB = 512


Raw = tuple[SyncKind, str, str | None, int, float, float, float, CallSite | None, tuple[int, ...], int, bool]


def _classify(model: TraceModel, g: Graph, raw: list[Raw], end_us: float) -> tuple[Sync, ...]:
    """Avoidability: the reasons of DESIGN.md §4. A sync that happens once, at the end of the profiled work
    (a final synchronize before reading results), is never a false sync."""

    def site_key(r: Raw) -> object:  # one user-level call: its line (or op and api) and its kind
        return (r[7], r[0]) if r[7] is not None else (r[2], r[1], r[0])

    steps_at: dict[object, set[int]] = {}
    count_at: dict[object, int] = {}
    for r in raw:
        steps_at.setdefault(site_key(r), set()).add(r[9])
        count_at[site_key(r)] = count_at.get(site_key(r), 0) + 1
    n_steps = len(model.steps)
    issued = np.sort(g.issued())
    out: list[Sync] = []
    prev_end_by_thread: dict[int, float] = {}
    for i, r in enumerate(raw):
        kind, api, op, lane, start, wait, bubble, site, members, step, logging = r
        end = float(g.call_end[list(members)].max())
        reasons: list[Reason] = []
        final = i == len(raw) - 1 and count_at[site_key(r)] == 1 and not _issued_between(issued, end, end_us)
        if not final and kind != SyncKind.RUNTIME:
            if kind == SyncKind.BLANKET and step >= 0:
                reasons.append(Reason.BLANKET)
            in_steps = {s for s in steps_at[site_key(r)] if s >= 0}
            if n_steps >= 2 and len(in_steps) >= max(2, n_steps // 2):
                reasons.append(Reason.REPEATED)
            previous = prev_end_by_thread.get(lane)
            if previous is not None and not _issued_between(issued, previous, start):
                reasons.append(Reason.REDUNDANT)
            if logging:
                reasons.append(Reason.LOGGING)
            if kind == SyncKind.PAGEABLE_COPY:
                reasons.append(Reason.PAGEABLE_COPY)
            if kind == SyncKind.DATA_DEPENDENT:
                reasons.append(Reason.DATA_DEPENDENT)
        prev_end_by_thread[lane] = end
        out.append(
            Sync(
                i,
                kind,
                api,
                op,
                lane,
                start,
                wait,
                bubble,
                bool(reasons),
                tuple(reasons),
                site,
                members,
                step,
            )
        )
    return tuple(out)


def _issued_between(issued: np.ndarray, lo: float, hi: float) -> bool:
    k = int(np.searchsorted(issued, lo, side="right"))
    return k < len(issued) and bool(issued[k] < hi)
