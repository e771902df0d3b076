"""The analysis as Chrome-JSON trace events: extra tracks that Perfetto UI and chrome://tracing draw beside
a trace's own events (``stallscope annotate``, the dashboard's annotated download).

Everything comes from the analysis document (``stallscope.analysis/3``), plus, when the caller has the
analysis itself, what each sync waited for (``Awaited``, which the document does not carry): a view of the
analysis, never a new one. The events go in one synthetic process (``ANALYSIS_PROCESS``) whose threads
are the tracks: the critical path (a slice per segment, named by its kind), each device's idle gaps
(named by cause) and each host thread's syncs (named by kind); the findings are the process's instant
markers. "Waited
for" arrows are flow events (``ph`` ``s``/``f``) between the trace's own tracks, from the work a waiter
waited for to the waiting call: wherever consecutive critical-path segments change lanes, and from each
blocking sync's awaited activity to its call.

Times are the document's, which are the trace's own ``ts`` values (µs on the trace's clock, as the loader
reads them: no unit change, no offset), so the added events line up with the original ones whatever unit
a viewer takes the file's ``ts`` to be in.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stallscope.analyzer.document.anchors import Anchors
from stallscope.analyzer.document.diff import site_text

CATEGORY = "stallscope"  # the ``cat`` of every added event: its flows never pair with the trace's own
ANALYSIS_PROCESS = "stallscope analysis"
FLOW_NAME = "waited for"
PID_BASE = 999_000_001  # the first synthetic pid tried: far above real pids and Perfetto's interned ids

Event = dict[str, Any]
#: per lane (by id): its thread as the trace's events write it (pid, tid), or None
Endpoints = Sequence[tuple[Any, Any] | None]
#: what a sync waited for, as the analysis' graph has it: (the sync's thread lane, the lane of the
#: activity that ended last among those it waited for, that activity's start, its end)
Awaited = tuple[int, int, float, float]


@dataclass
class Added:
    """What ``analysis_events`` added, for the caller's message and for tests."""

    pid: int
    slices: dict[str, int] = field(default_factory=dict)  # track kind -> slices written
    instants: int = 0
    flows: int = 0  # matched s/f pairs
    sync_flows: int = 0  # of which from a sync's awaited activity (off the critical path's steps)
    flows_unplaced: int = 0  # cross-lane steps whose lanes have no thread in the trace's events


def free_pid(pids: set[str]) -> int:
    """A pid no event of the trace uses (``pids``: every ``pid`` of the trace, as text)."""
    pid = PID_BASE
    while str(pid) in pids:
        pid += 1
    return pid


def analysis_events(
    doc: Mapping[str, Any],
    endpoints: Endpoints,
    pid: int,
    first_flow_id: int,
    awaited: Mapping[int, Awaited] | None = None,
    anchors: Anchors | None = None,
) -> tuple[Iterator[Event], Added]:
    """The added events, in file order (metadata first), made lazily: a large trace's critical path has
    hundreds of thousands of segments. ``endpoints``: where each lane's events are in the file (the
    arrows bind to them); ``pid`` the analysis' process, ``first_flow_id`` the first free flow id;
    ``awaited``: what each sync waited for, by sync id (``awaited_by_sync``; the document does not say);
    ``anchors``: the lanes' slices (``flow_lanes``), so that each arrow ends inside one (without them,
    the middle of each segment). ``Added`` is complete once the iterator is exhausted."""
    added = Added(pid)
    arrows = _Arrows(endpoints, _labels(doc), added, first_flow_id, anchors)
    return _events(doc, arrows, awaited or {}), added


def _labels(doc: Mapping[str, Any]) -> list[str]:
    return [str(lane.get("label", "")) for lane in doc.get("source", {}).get("lanes", [])]


def _events(doc: Mapping[str, Any], arrows: _Arrows, awaited: Mapping[int, Awaited]) -> Iterator[Event]:
    added = arrows.added
    pid, labels = added.pid, arrows.labels
    gaps = list(doc.get("gaps") or [])
    syncs = list(doc.get("syncs") or [])
    device_names = {d.get("id"): d.get("name") for d in doc.get("source", {}).get("devices", [])}
    tracks: list[str] = ["critical path"]
    gap_track = {
        dev: _track(
            tracks, f"idle gaps: GPU {dev}" + (f" ({device_names[dev]})" if device_names.get(dev) else "")
        )
        for dev in sorted({int(g["device"]) for g in gaps})
    }
    sync_track = {t: _track(tracks, f"syncs: {t}") for t in sorted({str(s["thread"]) for s in syncs})}
    yield from _metadata(pid, tracks)
    yield from _findings(doc, pid, added)
    yield from _critical(doc, labels, pid, 1, added)
    yield from _gaps(gaps, pid, gap_track, added)
    yield from _syncs(syncs, pid, sync_track, added)
    yield from _flows(doc, arrows, awaited)


def _track(tracks: list[str], name: str) -> int:
    tracks.append(name)
    return len(tracks)  # tids from 1, in the order the tracks are listed


def _metadata(pid: int, tracks: list[str]) -> Iterator[Event]:
    meta = {"ph": "M", "pid": pid}
    yield meta | {"name": "process_name", "args": {"name": ANALYSIS_PROCESS}}
    yield meta | {"name": "process_sort_index", "args": {"sort_index": -1}}  # above the trace's processes
    for tid, name in enumerate(tracks, 1):
        yield meta | {"tid": tid, "name": "thread_name", "args": {"name": name}}
        yield meta | {"tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}}


def _slice(pid: int, tid: int, name: str, start: float, end: float, args: Event) -> Event:
    return {
        "ph": "X",
        "cat": CATEGORY,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": start,
        "dur": max(end - start, 0.0),
        "args": args,
    }


def _count(added: Added, track: str) -> None:
    added.slices[track] = added.slices.get(track, 0) + 1


def _critical(doc: Mapping[str, Any], labels: list[str], pid: int, tid: int, added: Added) -> Iterator[Event]:
    """One slice per segment, named by its kind: the path's time per kind is the slices' total per name."""
    seg = _segments(doc)
    if seg is None:
        return
    names = seg["names"]
    for kind, lane, name, start, end in zip(
        seg["kind"], seg["lane"], seg["name"], seg["start_us"], seg["end_us"], strict=True
    ):
        args = {
            "kind": kind,
            "lane": _label(labels, lane),
            "event": names[name] if 0 <= name < len(names) else "",
            "duration_us": end - start,
        }
        _count(added, "critical path")
        yield _slice(pid, tid, str(kind), start, end, args)


def _segments(doc: Mapping[str, Any]) -> Mapping[str, Any] | None:
    cp = doc.get("critical_path")
    if not isinstance(cp, Mapping) or not isinstance(cp.get("segments"), Mapping):
        return None
    return cp["segments"]  # type: ignore[no-any-return]


def _label(labels: list[str], lane: int) -> str:
    return labels[lane] if 0 <= lane < len(labels) else f"lane {lane}"


def _gaps(gaps: list[Any], pid: int, track: dict[int, int], added: Added) -> Iterator[Event]:
    for g in gaps:
        args = {
            "cause": g["cause"],
            "detail": g.get("detail", ""),
            "duration_us": g["end_us"] - g["start_us"],
            "call_site": site_text(g.get("call_site")) or None,
            "sync_id": g.get("sync_id"),
            "charged_us": g.get("charged_us"),
        }
        _count(added, "gaps")
        yield _slice(pid, track[int(g["device"])], str(g["cause"]), g["start_us"], g["end_us"], args)


def _syncs(syncs: list[Any], pid: int, track: dict[str, int], added: Added) -> Iterator[Event]:
    """A slice per sync over the time it blocked the host (``wait_us`` from its start)."""
    for s in syncs:
        args = {
            "kind": s["kind"],
            "wait_us": s["wait_us"],
            "call_site": site_text(s.get("call_site")) or None,
            "api": s.get("api"),
            "op": s.get("op"),
            "bubble_us": s.get("bubble_us"),
            "avoidable": s.get("avoidable"),
            "reason": s.get("reason"),
            "step": s.get("step"),
            "id": s.get("id"),
        }
        _count(added, "syncs")
        start = s["start_us"]
        yield _slice(pid, track[str(s["thread"])], str(s["kind"]), start, start + s["wait_us"], args)


def _findings(doc: Mapping[str, Any], pid: int, added: Added) -> Iterator[Event]:
    """An instant per finding, at the first sync of its call site (a finding about a line of code; its
    first gap when no sync has that site), else at the window's start (a finding about the whole run);
    ``placed`` says which."""
    first_at = _first_by_site(doc)
    start = float(doc.get("window", {}).get("start_us") or 0.0)
    for f in doc.get("findings") or []:
        where = site_text(f.get("call_site"))
        if where in first_at:
            ts, what = first_at[where]
            placed = f"at the first {what} of its call site"
        else:
            ts, placed = start, "at the window's start (the finding is about the whole run)"
        args = {
            "title": f.get("title"),
            "advice": f.get("advice"),
            "rule": f.get("rule"),
            "severity": f.get("severity"),
            "call_site": where or None,
            "count": f.get("count"),
            "time_us": f.get("time_us"),
            "est_saving_us": f.get("est_saving_us"),
            "placed": placed,
        }
        added.instants += 1
        yield {
            "ph": "i",
            "s": "p",  # process-scoped: a marker across the analysis' tracks
            "cat": CATEGORY,
            "name": str(f.get("title") or f.get("rule") or "finding"),
            "pid": pid,
            "ts": ts,
            "args": args,
        }


def _first_by_site(doc: Mapping[str, Any]) -> dict[str, tuple[float, str]]:
    """Per call site (as ``site_text`` writes it): the earliest start of its syncs, else of its gaps, and
    which it was."""
    first: dict[str, tuple[float, str]] = {}
    for items, what in ((doc.get("gaps") or [], "gap"), (doc.get("syncs") or [], "sync")):
        seen: dict[str, float] = {}
        for item in items:
            key = site_text(item.get("call_site"))
            if key and (key not in seen or item["start_us"] < seen[key]):
                seen[key] = item["start_us"]
        first |= {k: (ts, what) for k, ts in seen.items()}  # a site's syncs win over its gaps
    return first


@dataclass
class _Arrows:
    """Makes the flow pairs: numbers them, places their ends on the trace's threads, counts them."""

    endpoints: Endpoints
    labels: list[str]
    added: Added
    next_id: int
    anchors: Anchors | None

    def pair(
        self,
        awaited: tuple[int, float, float],
        waiter: tuple[int, float, float],
        args: Event,
        in_event: bool = True,
    ) -> list[Event]:
        """An arrow from ``awaited`` (lane, start, end) to ``waiter``: the ``s`` end binds to the slice open
        at its time on the awaited lane's thread (the kernel, the other thread's op), the ``f`` end
        (``bp: "e"``) to the slice enclosing its time on the waiter's (the waiting call); ``_times`` picks
        the times. ``in_event``: the waiter's time is inside an event of its own (not a stream idle until
        the work it waited for was done, nor a thread between calls). No arrow (counted as unplaced) when
        a lane has no thread among the trace's events, or no slice there."""
        src, dst = self._thread(awaited[0]), self._thread(waiter[0])
        at = self._times(awaited, waiter, in_event)
        if src is None or dst is None or at is None:
            self.added.flows_unplaced += 1
            return []
        common = {"cat": CATEGORY, "name": FLOW_NAME, "id": self.next_id}
        args = {
            "waiter": _label(self.labels, waiter[0]),
            "waited_for": _label(self.labels, awaited[0]),
        } | args
        self.next_id += 1
        self.added.flows += 1
        s_ts, f_ts, enclosing = at
        end = {"ph": "f", "pid": dst[0], "tid": dst[1], "ts": f_ts} | ({"bp": "e"} if enclosing else {})
        return [common | {"ph": "s", "pid": src[0], "tid": src[1], "ts": s_ts, "args": args}, common | end]

    def _times(
        self, awaited: tuple[int, float, float], waiter: tuple[int, float, float], in_event: bool
    ) -> tuple[float, float, bool] | None:
        """(the ``s`` time, the ``f`` time, whether ``f`` binds to its enclosing slice): inside the lanes'
        slices with ``anchors`` (None when a lane has none there); else the segments' middles, and the
        waiter's start bound to the next slice when its time is in no event of its own."""
        if self.anchors is not None:
            s_ts, f_ts = self.anchors.awaited(*awaited), self.anchors.waiter(*waiter)
            return None if s_ts is None or f_ts is None else (s_ts, f_ts, True)
        f_ts = _middle(*waiter[1:]) if in_event else waiter[1]
        return _middle(*awaited[1:]), f_ts, in_event

    def _thread(self, lane: int) -> tuple[Any, Any] | None:
        return self.endpoints[lane] if 0 <= lane < len(self.endpoints) else None


def _flows(doc: Mapping[str, Any], arrows: _Arrows, awaited: Mapping[int, Awaited]) -> Iterator[Event]:
    """A "waited for" arrow wherever the critical path steps from one lane to another (the waiter's
    segment follows the one it waited for), then one per sync that blocked, from the activity it waited
    for (``awaited``, by sync id, where the analysis has it) to the sync's call, unless the critical
    path's arrow already joins the two."""
    seg = _segments(doc)
    drawn: set[tuple[int, int, float]] = set()
    if seg is not None:
        kinds, lanes, starts, ends = seg["kind"], seg["lane"], seg["start_us"], seg["end_us"]
        names, name = seg["names"], seg["name"]
        for i in range(len(lanes) - 1):
            a, b = lanes[i], lanes[i + 1]
            if a != b:
                drawn.add((a, b, ends[i]))
                args = {"from_kind": kinds[i], "to_kind": kinds[i + 1]}
                in_event = 0 <= name[i + 1] < len(names) and names[name[i + 1]] != ""
                yield from arrows.pair(
                    (a, starts[i], ends[i]), (b, starts[i + 1], ends[i + 1]), args, in_event
                )
    for sync in doc.get("syncs") or []:
        wait = awaited.get(sync["id"])
        if wait is None or sync["wait_us"] <= 0 or (wait[1], wait[0], wait[3]) in drawn:
            continue
        args = {"sync": sync["kind"], "call_site": site_text(sync.get("call_site")) or None}
        start, (_thread, _lane, a_start, a_end) = sync["start_us"], wait
        # the arrow ends in the wait after the middle of the work waited for (it starts inside that work)
        lo = max(start, (a_start + a_end) / 2)
        pair = arrows.pair(wait[1:], (wait[0], lo, max(start + sync["wait_us"], a_end)), args)
        arrows.added.sync_flows += 1 if pair else 0
        yield from pair


def flow_lanes(doc: Mapping[str, Any], awaited: Mapping[int, Awaited] | None = None) -> set[int]:
    """The lanes the arrows end on: those where the critical path changes lanes, and the syncs' and their
    awaited activities' (``Anchors`` needs only these)."""
    seg = _segments(doc)
    lanes: set[int] = set()
    if seg is not None:
        ids = seg["lane"]
        lanes |= {
            x for i, x in enumerate(ids) if (i and ids[i - 1] != x) or (i + 1 < len(ids) and ids[i + 1] != x)
        }
    for thread, lane, _, _ in (awaited or {}).values():
        lanes |= {thread, lane}
    return lanes


def _middle(start: float, end: float) -> float:
    """A time inside ``[start, end)`` where a flow binds to the slice open there (the midpoint; the start
    of a segment too short to have one)."""
    mid = start + (end - start) / 2
    return mid if start <= mid < end else start
