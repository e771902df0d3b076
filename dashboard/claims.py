"""From a claim to its evidence: the time range and the events behind each finding, sync, gap and
critical-path segment, for the "show" links of the report and the dashboard.

A claim is named by an id that both views can put in a link: ``finding-<n>`` (1-based, as listed),
``sync-<i>``, ``gap-<i>`` and ``segment-<i>`` (indices into the analysis' ``syncs``, ``gaps`` and the
critical path's segments, the order of the JSON document), and for a rank folder ``collective-<k>`` (the
job document's costliest collectives, ``collectives.worst``: a straggler's evidence on this rank). ``claim`` turns an id into the range to show
(with a margin) and the events to outline, as (row key, start, end) on the timeline's rows.

Syncs, gaps and segments carry their own times. A finding does not (``Finding`` has no time range), so it
is resolved here from what it names: a sync finding's syncs at its call site (the costliest one is shown,
all are outlined), a data-loading, launch-bound or utilization finding's gaps (the range they cover), and
anything else by the syncs or gaps at its call site, or else the whole window.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from stallscope.analyzer.analysis import Analysis
from stallscope.analyzer.core.model import I64, of_kind
from stallscope.analyzer.core.names import ACTIVITY_KINDS
from stallscope.analyzer.core.numbers import parse_uint
from stallscope.analyzer.findings.base import Finding
from stallscope.dashboard.timeline import RowSpec, frame, row_of

MARGIN = 0.15  # of the claim's own length, on each side
MIN_MARGIN_US = 2.0
MAX_MARKS = 300  # events outlined at most (the longest)
_GAP_RULES = {"input_bound": ("input",), "launch_bound": ("host", "launch"), "low_utilization": ()}

Mark = tuple[str, float, float]  # (row key, start, end)


@dataclass(frozen=True)
class Claim:
    id: str
    start_us: float  # the claim's own range; ``view`` adds the margin
    end_us: float
    marks: tuple[Mark, ...]  # the events (and gaps, segments) it names, on their rows
    note: str  # what the range is ("the costliest of 16 syncs"), or ""

    def view(self, lo: float, hi: float) -> tuple[float, float]:
        """The range to show: the claim's with a margin on each side, inside ``[lo, hi]``."""
        pad = max((self.end_us - self.start_us) * MARGIN, MIN_MARGIN_US)
        return max(lo, self.start_us - pad), min(hi, self.end_us + pad)


def claim(a: Analysis, claim_id: str, job: Mapping[str, Any] | None = None) -> Claim | None:
    """The claim an id names, or None for an id that names nothing in this analysis. ``collective-<k>``
    (the job document's ``collectives.worst[k]``) needs ``job``, the job document of a rank folder."""
    what, _, num = claim_id.partition("-")
    i = parse_uint(num)
    if i is None:
        return None
    specs = frame(a.model, a)
    if what == "finding" and 1 <= i <= len(a.findings):
        return _finding(a, specs, claim_id, a.findings[i - 1])
    if what == "sync" and 0 <= i < len(a.syncs):
        return _syncs(a, specs, claim_id, [i], "")
    if what == "gap" and 0 <= i < len(a.gaps):
        return _gap(a, specs, claim_id, i)
    if what == "segment" and a.critical is not None and 0 <= i < len(a.critical.kind):
        return _segment(a, specs, claim_id, i)
    worst = (job or {}).get("collectives", {}).get("worst") or []
    if what == "collective" and 0 <= i < len(worst):
        return collective(a, claim_id, worst[i], (job or {}).get("clock_offsets_us") or {})
    return None


def collective(
    a: Analysis, cid: str, inst: Mapping[str, Any], offsets_us: Mapping[str, float]
) -> Claim | None:
    """A collective of a job (an entry of the job document's ``collectives.worst``) on this rank's timeline:
    from the first rank's arrival to its end (the job's aligned clock moved to this rank's by its offset),
    this rank's collective kernel outlined; the note names the straggler. None when this rank is not in it."""
    rank = a.model.rank
    mine = next((x for x in inst.get("arrivals") or () if x["rank"] == rank), None)
    if mine is None:
        return None
    off = float(offsets_us.get(str(rank), 0.0))
    start, end, arrive = inst["first_arrival_us"] + off, inst["end_us"] + off, mine["arrive_us"] + off
    ev = a.model.events
    near = ev.overlapping(arrive - 1.0, arrive + 1.0)
    near = near[of_kind(ev.kind[near], *ACTIVITY_KINDS)]
    marks: list[Mark] = []
    if len(near):
        kernel = int(near[np.argmin(np.abs(ev.ts[near] - arrive))])
        marks = _events(a, frame(a.model, a), np.array([kernel], dtype=np.int64))
    last = int(inst["straggler"])
    who = "this rank was last" if last == rank else f"rank {last} was last"
    note = f"{inst['name']} #{inst['number']}: {who}, {inst['late_us'] / 1000:.3f} ms late; this rank waited {mine['wait_us'] / 1000:.3f} ms"
    return Claim(cid, start, max(end, start), tuple(marks), note)


def claims(a: Analysis, ids: list[str]) -> dict[str, Claim]:
    """Every resolvable claim of ``ids``."""
    out = {}
    for cid in ids:
        c = claim(a, cid)
        if c is not None:
            out[cid] = c
    return out


def _events(a: Analysis, specs: tuple[RowSpec, ...], events: I64) -> list[Mark]:
    ev = a.model.events
    keys = row_of(a.model, specs, events)
    return [(k, float(ev.ts[e]), float(ev.end[e])) for e, k in zip(events.tolist(), keys, strict=True) if k]


def _sync_range(a: Analysis, i: int) -> tuple[float, float]:
    """A sync's host wait and the device idle charged to it (the gap whose blocking call is one of its)."""
    s = a.syncs[i]
    end = s.start_us + s.wait_us
    calls = set(s.calls)
    for g in a.gaps:
        if g.blocking_call in calls:
            end = max(end, g.end_us)
    return s.start_us, end


def sync_indices(a: Analysis, group: list[int]) -> list[int]:
    """``group`` sorted costliest first (host wait plus device idle charged)."""
    return sorted(group, key=lambda i: -(a.syncs[i].wait_us + a.syncs[i].bubble_us))


def sync_group(a: Analysis, cid: str, group: list[int]) -> Claim:
    """A group of syncs (the report's sync table groups them by site and kind): the costliest shown,
    every one's blocking calls outlined."""
    return _syncs(a, frame(a.model, a), cid, group, "syncs in this group")


def _syncs(a: Analysis, specs: tuple[RowSpec, ...], cid: str, group: list[int], what: str) -> Claim:
    """The costliest sync of ``group`` shown; every sync's blocking calls outlined."""
    ranked = sync_indices(a, group)
    start, end = _sync_range(a, ranked[0])
    g = a.graph
    calls = [c for i in ranked for c in a.syncs[i].calls]
    events = (
        np.array(sorted({int(g.call_event[c]) for c in calls}), dtype=np.int64)
        if g is not None
        else np.zeros(0, dtype=np.int64)
    )
    marks = _longest(_events(a, specs, events))
    note = f"the costliest of {len(group)} {what or 'syncs'}" if len(group) > 1 else ""
    return Claim(cid, start, end, tuple(marks), note)


def _longest(marks: list[Mark]) -> list[Mark]:
    if len(marks) <= MAX_MARKS:
        return marks
    return sorted(marks, key=lambda m: m[1] - m[2])[:MAX_MARKS]


def _bounds(a: Analysis, device: int, start: float, end: float) -> list[int]:
    """The device events that end where a gap starts and start where it ends (its bounding events)."""
    ev = a.model.events
    lanes = {lane.id for lane in a.model.lanes if lane.on_device and lane.device == device}
    out = []
    for at, pick in ((start, "end"), (end, "start")):
        near = ev.overlapping(at - 0.5, at + 0.5)
        near = near[of_kind(ev.kind[near], *ACTIVITY_KINDS) & np.isin(ev.lane[near], list(lanes))]
        if not len(near):
            continue
        if pick == "end":
            near = near[ev.end[near] <= at + 0.5]
            if len(near):
                out.append(int(near[np.argmax(ev.end[near])]))
        else:
            near = near[ev.ts[near] >= at - 0.5]
            if len(near):
                out.append(int(near[np.argmin(ev.ts[near])]))
    return out


def _gap(a: Analysis, specs: tuple[RowSpec, ...], cid: str, i: int) -> Claim:
    """A gap, outlined on its device's idle row, with its bounding events and the sync charged for it."""
    gap = a.gaps[i]
    events = _bounds(a, gap.device, gap.start_us, gap.end_us)
    if gap.blocking_call >= 0 and a.graph is not None:
        events.append(int(a.graph.call_event[gap.blocking_call]))
    marks = [(f"gaps:{gap.device}", gap.start_us, gap.end_us)]
    marks += _events(a, specs, np.array(sorted(set(events)), dtype=np.int64))
    return Claim(cid, gap.start_us, gap.end_us, tuple(marks), "")


def _segment(a: Analysis, specs: tuple[RowSpec, ...], cid: str, i: int) -> Claim:
    cp = a.critical
    assert cp is not None
    s, e, event = float(cp.start_us[i]), float(cp.end_us[i]), int(cp.event[i])
    marks = [("critical", s, e)]
    if event >= 0:
        marks += _events(a, specs, np.array([event], dtype=np.int64))
    return Claim(cid, s, e, tuple(marks), "")


def _gaps_claim(a: Analysis, cid: str, gaps: list[int], what: str) -> Claim:
    """The range a set of gaps covers, each outlined (the longest ``MAX_MARKS``)."""
    chosen = [a.gaps[i] for i in gaps]
    marks = _longest([(f"gaps:{g.device}", g.start_us, g.end_us) for g in chosen])
    start, end = min(g.start_us for g in chosen), max(g.end_us for g in chosen)
    return Claim(
        cid, start, end, tuple(marks), f"the {len(chosen)} {what} it covers" if len(chosen) > 1 else ""
    )


def _finding(a: Analysis, specs: tuple[RowSpec, ...], cid: str, f: Finding) -> Claim:
    """A finding's evidence, from what it names (see the module docstring)."""
    syncs = finding_syncs(a, f)
    if syncs:
        return _syncs(a, specs, cid, syncs, "syncs at this site")
    if f.rule in _GAP_RULES:
        causes = _GAP_RULES[f.rule]
        gaps = [i for i, g in enumerate(a.gaps) if not causes or g.cause.value in causes]
        if gaps:
            return _gaps_claim(a, cid, gaps, "idle gaps")
    if f.call_site is not None:
        gaps = [i for i, g in enumerate(a.gaps) if g.call_site == f.call_site]
        if gaps:
            return _gaps_claim(a, cid, gaps, "idle gaps at this site")
    w = a.window
    return Claim(
        cid, w.start_us, w.end_us, (), "the whole window: the analysis gives no time for this finding"
    )


def finding_syncs(a: Analysis, f: Finding) -> list[int]:
    """The syncs a finding is about: those at its call site (without one, of its op or API), of its kind
    for a ``false_sync_<kind>`` rule, avoidable for the false and redundant sync rules."""
    kind = f.rule.removeprefix("false_sync_") if f.rule.startswith("false_sync_") else None
    avoidable = kind is not None or f.rule == "redundant_sync"
    out = []
    for i, s in enumerate(a.syncs):
        here = s.call_site == f.call_site if f.call_site is not None else (s.op or s.api) == f.op
        if f.call_site is None and f.op is None:
            here = False
        if here and (kind is None or s.kind.value == kind) and (s.avoidable or not avoidable):
            out.append(i)
    return out
