"""The typed result of a whole-job analysis (``analyze_job``). Times are µs on the reference rank's clock
(the lowest rank) after clock alignment, unless a field says otherwise."""

from __future__ import annotations

from dataclasses import dataclass

from stallscope.analyzer.core.numbers import duration_text
from stallscope.analyzer.findings.base import Severity
from stallscope.analyzer.job.tables import Overlap, RankFailure, RankTable
from stallscope.analyzer.passes.critical import Kind


@dataclass(frozen=True)
class Arrival:
    rank: int
    arrive_us: float  # the rank's collective kernel started (aligned clock)
    wait_us: float  # last arrival minus this rank's arrival: time spent waiting for the others
    dur_us: float  # the kernel's own duration on the rank


@dataclass(frozen=True)
class InstanceResult:
    """One collective instance across its ranks."""

    index: int  # position in time order
    name: str
    group: str
    number: int  # sequence number (``by_seq``) or position among this collective's calls
    by_seq: bool
    nelems: int
    first_arrival_us: float
    median_arrival_us: float
    end_us: float  # consensus end
    straggler: int  # the last rank to arrive
    late_us: float  # its arrival minus the median arrival of the other ranks
    skew_us: float  # last minus first arrival
    wait_us: float  # every rank's wait, summed
    cause: Kind | None  # what the straggler's critical path did in excess of the others (None: nothing)
    cause_us: float
    site: str | None  # where (call site or op), when known
    step: str | None  # the straggler's step it fell in
    # how much later than the others' median the straggler's interval began (its previous collective's
    # end, or its profiled window's start for its first collective): lateness carried in from before
    began_late_us: float
    arrivals: tuple[Arrival, ...]

    @property
    def label(self) -> str:
        return f"{self.name} #{self.number}" + (f" (group {self.group})" if self.group else "")

    @property
    def sentence(self) -> str:
        """ "rank 5 reached allreduce #812 9.80 ms late, 7.10 ms of it in input at train.py:88; the other
        7 ranks waited 9.75 ms on average"."""
        why = ""
        if self.cause is not None:
            why = f", {_ms(self.cause_us)} of it in {self.cause.value}" + (
                f" at {self.site}" if self.site else ""
            )
        if self.cause is None and self.began_late_us >= 0.25 * self.late_us > 0:
            why = f", having begun {_ms(self.began_late_us)} after the others (its window or previous collective)"
        others = len(self.arrivals) - 1
        mean = (self.wait_us / others) if others else 0.0
        return (
            f"rank {self.straggler} reached {self.label} {_ms(self.late_us)} late{why}; "
            f"the other {others} rank{'s' if others != 1 else ''} waited {_ms(mean)} on average"
        )


@dataclass(frozen=True)
class RankStats:
    """How a rank fared in the job: the straggler ranking and its communication overlap."""

    rank: int
    times_last: int  # instances where it arrived last, at least ``MIN_LATE_US`` late
    late_us: float  # summed lateness over those instances
    wait_us: float  # time it waited inside collectives for others
    late_by_cause_us: dict[str, float]
    overlap: Overlap
    wall_us: float
    device_idle_us: float


@dataclass(frozen=True)
class StepCell:
    """One cell of the rank x step heatmap."""

    rank: int
    step: str
    wall_us: float
    device_idle_us: float
    collective_wait_us: float


@dataclass(frozen=True)
class JobStep:
    name: str
    wall_us: float  # first start to last end over the ranks (aligned)
    ranks: int


@dataclass(frozen=True)
class JobFinding:
    rule: str  # "straggler"
    severity: Severity
    rank: int
    cause: str  # a critical-path kind, or "unknown"
    title: str
    site: str | None
    count: int
    time_us: float  # lateness summed over the instances
    est_saving_us: float
    advice: str


@dataclass(frozen=True)
class JobWhatIf:
    scenario: str  # "no_stragglers": every collective at the median arrival
    predicted_wall_us: float
    saving_us: float


@dataclass(frozen=True)
class JobAnalysis:
    ranks: tuple[int, ...]
    tables: tuple[RankTable, ...]
    failures: tuple[RankFailure, ...]
    offsets_us: dict[int, float]
    residual_p50_us: float
    residual_max_us: float
    wall_us: float
    steps: tuple[JobStep, ...]
    instances: tuple[InstanceResult, ...]  # every matched instance, in time order
    unmatched: int
    size_mismatches: int
    collective_wait_us: float  # every rank's waiting in collectives, summed
    rank_stats: tuple[RankStats, ...]
    cells: tuple[StepCell, ...]
    findings: tuple[JobFinding, ...]
    whatif: tuple[JobWhatIf, ...]
    notes: tuple[str, ...]

    def worst(self, n: int = 10) -> tuple[InstanceResult, ...]:
        """The instances whose stragglers cost the most waiting."""
        return tuple(sorted(self.instances, key=lambda i: (-i.wait_us, i.index))[:n])


def _ms(us: float) -> str:
    return duration_text(us)
