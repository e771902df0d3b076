"""What a finding is: one problem at one call site (or op), grouped across steps, with what it cost, what
fixing it would save (from the what-if replays) and advice; and how severe a cost is."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from stallscope.analyzer.core.sites import CallSite
from stallscope.analyzer.load.sidecar import Sidecar
from stallscope.analyzer.passes.syncs import Sync


class Severity(str, Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    title: str
    call_site: CallSite | None
    count: int
    time_us: float  # what it cost: host time blocked plus device idle charged to it (per rule)
    est_saving_us: float  # from the what-if replay
    advice: str
    op: str | None = None  # without a call site: the op (or API) the finding is about, to tell sites apart


def sync_where(s: Sync) -> str:
    """Where a sync finding is, for its title: `` at file:line in function``, or without any stack the op."""
    return f" at {s.call_site}" if s.call_site else f" in {s.op or s.api} (no python stack)"


def sync_site_key(s: Sync) -> object:
    """One user-level call: its line, or without stacks its op (its API when no op is known): how sync
    findings group syncs. One ``aten::to`` that blocked in a copy here and a stream synchronize there is one
    place, not two findings with the same title."""
    return s.call_site if s.call_site else (s.op or s.api)


def site_key(f: Finding) -> object:
    """What makes two findings about the same place: the call site, else the op."""
    return f.call_site if f.call_site is not None else ("op", f.op)


def severity(time_us: float, wall_us: float) -> Severity:
    share = time_us / wall_us if wall_us > 0 else 0.0
    return Severity.HIGH if share >= 0.10 else Severity.MEDIUM if share >= 0.02 else Severity.LOW


def site_library(sidecar: Sidecar | None, site: CallSite | None) -> tuple[str, str] | None:
    """The library call inside which the sidecar's calls at ``site`` were made (``library``,
    ``library_call``), when every call it recorded at that line was made inside that one call
    (``optimizer.step(closure)``); None otherwise (the user's own read, or a line that does both)."""
    if sidecar is None or site is None:
        return None
    found = {sidecar.site_library(i) for i, s in enumerate(sidecar.sites) if s == site}
    if len(found) != 1:
        return None
    (got,) = found
    return got if got[0] and got[1] else None
