"""The compact per-rank table a whole-job analysis works on, instead of every event of every rank.

A worker loads and analyses one rank and reduces it to a ``RankTable``: its summary, its steps, its
collectives (with what the rank's own critical path did in the interval before each one) and how much its
communication overlapped its computation. A table's size grows with the rank's collectives, not its events,
and it pickles cheaply (it is what a Dask worker sends back).
"""

from __future__ import annotations

from dataclasses import dataclass

from stallscope.analyzer.passes.critical import Kind
from stallscope.analyzer.passes.window import Summary

#: the critical-path kinds, in the order ``Collective.before_us`` lists them
KINDS: tuple[Kind, ...] = tuple(Kind)


@dataclass(frozen=True)
class SiteTime:
    """Time the critical path spent in one kind of work at one place (a call site or an op name)."""

    kind: Kind
    site: str  # "train.py:88 in load" when the trace has stacks, else the op/annotation name
    us: float


@dataclass(frozen=True)
class Collective:
    """One collective kernel on one rank, on that rank's own clock."""

    name: str  # normalised: "allreduce", "alltoall", "allgather", "sendrecv"...
    group: str  # process group name ("" when the trace does not say)
    seq: int  # the trace's sequence number, -1 when absent
    nelems: int  # input message elements, -1 when absent
    dtype: str
    kernel: str  # the kernel's name
    launch_us: float  # the host call that launched it
    start_us: float  # the kernel's start: the rank arrived (its inputs and its stream were ready)
    end_us: float
    step: int  # index into RankTable.steps, -1 outside every step
    interval_start_us: float  # the previous collective's end on this rank (or the window's start)
    # the main device in [interval start, start], per kind (``KINDS`` order): busy as ``device``, idle by
    # the cause of its gaps (sync, input, host, launch; dependency, unknown and short idle as ``idle``)
    before_us: tuple[float, ...]
    critical_us: tuple[float, ...]  # the rank's critical path in the same interval, per kind
    sites: tuple[SiteTime, ...]  # the largest places of that time, a few per kind (gaps' call sites first)
    sync_wait_us: float  # the host blocked in syncs that started in the interval
    sync_site: str | None  # the call site (or op) of the longest of them


@dataclass(frozen=True)
class StepRow:
    name: str
    start_us: float
    dur_us: float
    device_idle_us: float


@dataclass(frozen=True)
class Overlap:
    """Communication against computation on the rank's main device, inside the window."""

    comm_us: float  # union of collective kernels
    compute_us: float  # union of every other kernel, copy and memset
    overlapped_us: float  # both at once

    @property
    def exposed_comm_us(self) -> float:
        return self.comm_us - self.overlapped_us


@dataclass(frozen=True)
class RankTable:
    rank: int
    world_size: int | None
    path: str
    events: int
    window_start_us: float
    window_end_us: float
    summary: Summary
    steps: tuple[StepRow, ...]
    collectives: tuple[Collective, ...]
    overlap: Overlap
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class RankFailure:
    """A rank file that could not be used: the job goes on without it."""

    path: str
    error: str  # one line
