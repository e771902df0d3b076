"""``Evidence``: what the passes found about one rank, frozen, as the findings rules and the self-check read
it. They take this narrow input, not the whole ``Analysis`` (which extends it with their own results), so
that a rule never depends on another rule's output and no import runs back up from the rules."""

from __future__ import annotations

from dataclasses import dataclass, field

from stallscope.analyzer.core.model import LoadReport, TraceModel
from stallscope.analyzer.graph.dependency import Graph
from stallscope.analyzer.load.sidecar import Sidecar
from stallscope.analyzer.passes.critical import CriticalPath
from stallscope.analyzer.passes.gaps import MIN_GAP_US, Cause, Gap
from stallscope.analyzer.passes.pipeline import Pipeline
from stallscope.analyzer.passes.replay import Frame
from stallscope.analyzer.passes.runtiming import RunTiming
from stallscope.analyzer.passes.syncs import Sync
from stallscope.analyzer.passes.verdict import Verdict
from stallscope.analyzer.passes.whatif import AvoidablePolicy, WhatIfReport
from stallscope.analyzer.passes.window import DeviceUsage, StepStats, Summary, Window


@dataclass(frozen=True)
class Options:
    """Analysis settings (DESIGN.md §4 defaults)."""

    min_gap_us: float = MIN_GAP_US
    avoidable: AvoidablePolicy | None = (
        None  # which calls no_avoidable_syncs drops (None: the avoidable syncs)
    )


@dataclass(frozen=True)
class Evidence:
    model: TraceModel
    window: Window
    main_device: int | None  # the device the rank used most; summary figures are for it
    devices: tuple[DeviceUsage, ...]
    steps: tuple[StepStats, ...]
    summary: Summary
    graph: Graph | None = None
    critical: CriticalPath | None = None
    gaps: tuple[Gap, ...] = ()
    idle_by_cause: dict[Cause, float] = field(default_factory=dict)
    bubble_us: dict[int, float] = field(default_factory=dict)  # graph call index -> idle charged to it
    whatif: WhatIfReport | None = None
    pipeline: Pipeline | None = None
    syncs: tuple[Sync, ...] = ()
    sidecar: Sidecar | None = None  # the bundle's sidecar, when the trace came with one
    run_timing: RunTiming | None = None  # every step of the run (sidecar), against the profiled ones
    options: Options = field(default_factory=Options)
    ranks: tuple[int, ...] = ()
    per_rank: dict[int, Summary] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    verdict: Verdict | None = None  # the bottleneck, how it was decided, and its evidence
    frame: Frame | None = None  # what every replay of the graph shares (made once: rules and the dashboard)

    @property
    def report(self) -> LoadReport:
        return self.model.report
