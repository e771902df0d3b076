"""Match collective instances across ranks and align the ranks' clocks.

An instance is one call of a collective by every rank of its group: the same process group and collective
name, and the same sequence number (``Seq``) or, without one, the same position among that rank's calls of
that collective in that group. Message sizes are compared; a mismatch is counted, never fatal.

Clocks: every rank of a collective leaves it at (nearly) the same moment, whoever arrived last. So each
rank's offset is the median, over the instances it shares, of its end minus the instance's consensus end
(solved by alternating medians, the lowest rank fixed at 0); the residual says how well that held.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from stallscope.analyzer.job.tables import RankTable

_ROUNDS = 6


@dataclass(frozen=True)
class Instance:
    """One collective call matched across ranks; ``members`` maps rank -> index into its collectives."""

    name: str
    group: str
    number: int  # the sequence number, or the position when the trace has none
    by_seq: bool
    members: dict[int, int]


@dataclass(frozen=True)
class Matching:
    instances: tuple[Instance, ...]
    unmatched: int  # collectives seen on one rank only
    size_mismatches: int  # instances whose ranks disagree on the message size


@dataclass(frozen=True)
class Clocks:
    offsets_us: dict[int, float]  # rank clock minus the reference rank's clock
    residual_p50_us: float  # median |end - consensus end| after alignment
    residual_max_us: float
    reference: int


def match(tables: list[RankTable]) -> Matching:
    """Group every rank's collectives into instances (see the module doc)."""
    groups: dict[tuple[str, str, bool, int], dict[int, int]] = defaultdict(dict)
    for t in tables:
        ordinal: dict[tuple[str, str], int] = defaultdict(int)
        for i, c in enumerate(t.collectives):
            pos = ordinal[(c.group, c.name)]
            ordinal[(c.group, c.name)] += 1
            key = (c.group, c.name, c.seq >= 0, c.seq if c.seq >= 0 else pos)
            groups[key].setdefault(t.rank, i)
    by_rank = {t.rank: t for t in tables}
    instances: list[Instance] = []
    unmatched = mismatched = 0
    for (group, name, by_seq, number), members in groups.items():
        if len(members) < 2:
            unmatched += 1
            continue
        sizes = {by_rank[r].collectives[i].nelems for r, i in members.items()} - {-1}
        mismatched += len(sizes) > 1
        instances.append(Instance(name, group, number, by_seq, dict(sorted(members.items()))))
    instances.sort(key=lambda inst: _first_end(inst, by_rank))
    return Matching(tuple(instances), unmatched, mismatched)


def _first_end(inst: Instance, by_rank: dict[int, RankTable]) -> float:
    r, i = next(iter(inst.members.items()))
    return by_rank[r].collectives[i].end_us - by_rank[r].window_start_us


def align_clocks(tables: list[RankTable], instances: tuple[Instance, ...]) -> Clocks:
    """Each rank's clock offset from matched collective ends (see the module doc)."""
    ranks = sorted(t.rank for t in tables)
    ref = ranks[0] if ranks else 0
    by_rank = {t.rank: t for t in tables}
    ends = [{r: by_rank[r].collectives[i].end_us for r, i in inst.members.items()} for inst in instances]
    off = {r: 0.0 for r in ranks}
    for r in ranks:
        shared = [e[r] - e[ref] for e in ends if r in e and ref in e]
        if shared:
            off[r] = statistics.median(shared)
    for _ in range(_ROUNDS):
        consensus = [statistics.median(v - off[r] for r, v in e.items()) for e in ends]
        diffs: dict[int, list[float]] = defaultdict(list)
        for e, c in zip(ends, consensus, strict=True):
            for r, v in e.items():
                diffs[r].append(v - c)
        off = {r: statistics.median(diffs[r]) if diffs[r] else off[r] for r in ranks}
        base = off.get(ref, 0.0)
        off = {r: v - base for r, v in off.items()}
    residuals: list[float] = []
    for e in ends:
        c = statistics.median(v - off[r] for r, v in e.items())
        residuals.extend(abs(v - off[r] - c) for r, v in e.items())
    return Clocks(
        offsets_us=off,
        residual_p50_us=statistics.median(residuals) if residuals else 0.0,
        residual_max_us=max(residuals, default=0.0),
        reference=ref,
    )
