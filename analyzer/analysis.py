"""Analysis passes over a trace model and the typed ``Analysis`` result.

Each pass is a small pure function ``pass(model, ...) -> typed result``; ``analyze`` runs them in order.
Semantics follow DESIGN.md §4 (window, device busy/idle, steps).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum

import numpy as np

from stallscope.analyzer import consistency, intervals
from stallscope.analyzer.critical import CriticalPath, critical_path
from stallscope.analyzer.findings import Finding, find_findings
from stallscope.analyzer.gaps import MIN_GAP_US, Cause, Gap, find_gaps
from stallscope.analyzer.graph import Blocking, Graph, build_graph
from stallscope.analyzer.inputs import input_intervals, main_thread
from stallscope.analyzer.model import F64, LoadReport, TraceModel, TraceSet
from stallscope.analyzer.names import EventKind
from stallscope.analyzer.pipeline import Pipeline, pipeline_model
from stallscope.analyzer.replay import Scenario, make_frame
from stallscope.analyzer.runtiming import RunTiming, run_timing
from stallscope.analyzer.sidecar import Sidecar
from stallscope.analyzer.syncs import Sync, find_syncs
from stallscope.analyzer.tops import Tops, top_tables
from stallscope.analyzer.verdict import Verdict, decide
from stallscope.analyzer.whatif import AvoidablePolicy, WhatIfReport, host_only, what_if

SCHEMA = "stallscope.analysis/2"


class WindowBasis(str, Enum):
    STEPS = "steps"  # first to last ProfilerStep#N span
    TRACE = "trace"  # first to last event


@dataclass(frozen=True)
class Window:
    start_us: float
    end_us: float
    basis: WindowBasis

    @property
    def dur_us(self) -> float:
        return self.end_us - self.start_us


@dataclass(frozen=True)
class DeviceUsage:
    id: int
    name: str
    busy_us: float
    idle_us: float
    utilization: float
    activities: int  # kernels, copies and memsets inside the window


@dataclass(frozen=True)
class StepStats:
    name: str
    start_us: float
    dur_us: float
    device_busy_us: float
    device_idle_us: float
    host_sync_wait_us: float


@dataclass(frozen=True)
class Summary:
    wall_us: float
    device_busy_us: float
    device_idle_us: float
    device_utilization: float
    host_sync_wait_us: float
    # filled by later passes (sync classification, critical path, what-if); None until then
    sync_count: int | None = None
    avoidable_sync_count: int | None = None
    critical_path_us: float | None = None
    bottleneck: str | None = None
    est_saving_us: float | None = None


@dataclass(frozen=True)
class Options:
    """Analysis settings (DESIGN.md §4 defaults)."""

    min_gap_us: float = MIN_GAP_US
    avoidable: AvoidablePolicy | None = (
        None  # which calls no_avoidable_syncs drops (None: the avoidable syncs)
    )


@dataclass(frozen=True)
class Analysis:
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
    findings: tuple[Finding, ...] = ()
    sidecar: Sidecar | None = None  # the bundle's sidecar, when the trace came with one
    run_timing: RunTiming | None = None  # every step of the run (sidecar), against the profiled ones
    options: Options = field(default_factory=Options)
    ranks: tuple[int, ...] = ()
    per_rank: dict[int, Summary] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    verdict: Verdict | None = None  # the bottleneck, how it was decided, and its evidence
    warnings: tuple[str, ...] = ()  # contradictions the self-check found (stallscope.analyzer.consistency)
    tops: Tops | None = None  # the top ops and kernels (made once here, so that no view rescans events)

    @property
    def report(self) -> LoadReport:
        return self.model.report


_NOT_WORK = (EventKind.INSTANT, EventKind.TRACE_SPAN, EventKind.OVERHEAD)


def find_window(model: TraceModel) -> Window:
    """First to last profiled step when the trace has ``ProfilerStep#N`` spans, else first to last event
    (instants, the profiler's own span and its overhead records excluded)."""
    if model.steps:
        start = min(s.start_us for s in model.steps)
        end = max(s.end_us for s in model.steps)
        return Window(start, end, WindowBasis.STEPS)
    ev = model.events
    work = ~ev.is_kind(*_NOT_WORK)
    if not work.any():
        work = np.ones(len(ev), dtype=np.bool_)
    return Window(float(ev.ts[work].min()), float(ev.end[work].max()), WindowBasis.TRACE)


def busy_intervals(model: TraceModel, device: int, window: Window) -> tuple[F64, F64]:
    """Disjoint busy intervals of one device (all streams), clipped to the window."""
    ev = model.events
    mask = ev.activity_mask() & model.device_lanes(device)[ev.lane]
    s, e = intervals.union(ev.ts[mask], ev.end[mask])
    return intervals.clip(s, e, window.start_us, window.end_us)


def device_usage(model: TraceModel, window: Window) -> tuple[DeviceUsage, ...]:
    ev = model.events
    act = ev.activity_mask()
    inside = act & (ev.end > window.start_us) & (ev.ts < window.end_us)
    out = []
    for d in model.devices:
        s, e = busy_intervals(model, d.id, window)
        busy = intervals.total(s, e)
        count = int(np.count_nonzero(inside & model.device_lanes(d.id)[ev.lane]))
        dur = window.dur_us
        out.append(
            DeviceUsage(d.id, d.name, busy, max(dur - busy, 0.0), busy / dur if dur > 0 else 0.0, count)
        )
    return tuple(out)


def host_sync_calls(g: Graph) -> tuple[F64, F64]:
    """Disjoint intervals of the host calls that block until device work completes (device/stream/event
    synchronize, synchronous copies and copies to or from pageable memory, allocator syncs), while they
    waited: a blocking call is counted whole, but a call whose awaited work had already finished (a
    6 s ``cudaFree`` on an idle device) is the host's own time, not a wait."""
    waited = (g.call_blocking != Blocking.NO) & (g.waited() > 0)
    return intervals.union(g.call_start[waited], g.call_end[waited])


def step_stats(
    model: TraceModel, main_device: int | None, window: Window, waits: tuple[F64, F64]
) -> tuple[StepStats, ...]:
    if not model.steps:
        return ()
    lo = np.array([s.start_us for s in model.steps])
    hi = np.array([s.end_us for s in model.steps])
    if main_device is None:
        busy = np.zeros(len(lo))
    else:
        s, e = busy_intervals(model, main_device, window)
        busy = intervals.covered_in(s, e, lo, hi)
    wait = intervals.covered_in(waits[0], waits[1], lo, hi)
    return tuple(
        StepStats(st.name, st.start_us, st.dur_us, float(b), max(st.dur_us - float(b), 0.0), float(w))
        for st, b, w in zip(model.steps, busy, wait, strict=True)
    )


def summarize(
    window: Window, devices: tuple[DeviceUsage, ...], waits: tuple[F64, F64]
) -> tuple[int | None, Summary]:
    main = max(devices, key=lambda d: (d.busy_us, -d.id)) if devices else None
    ws, we = intervals.clip(waits[0], waits[1], window.start_us, window.end_us)
    summary = Summary(
        wall_us=window.dur_us,
        device_busy_us=main.busy_us if main else 0.0,
        device_idle_us=main.idle_us if main else window.dur_us,
        device_utilization=main.utilization if main else 0.0,
        host_sync_wait_us=intervals.total(ws, we),
    )
    return (main.id if main else None), summary


def _notes(whatif: WhatIfReport, critical: CriticalPath, pinned: float, window: Window) -> tuple[str, ...]:
    """What the reader of the what-if and the critical path should know about their limits."""
    notes: tuple[str, ...] = ()
    if whatif.overrun_us > 0.01 * window.dur_us:
        notes += (
            f"device work launched inside the window ran {whatif.overrun_us / 1000:,.2f} ms past its end: "
            "the what-if replays include it, and their savings are against the recorded run",
        )
    if pinned >= 0.2:
        notes += (
            f"{pinned:.0%} of the device's busy time has no launch call in the trace: the what-if replays "
            "keep that work at its recorded time, so what a faster device would save is understated",
        )
    if critical.stopped:
        notes += (f"critical path: {critical.stopped}",)
    return notes


def _unlinked_share(g: Graph, device: int | None, window: Window) -> float:
    """Share of the device's busy time (in the window) from activities whose launch call is unknown."""
    if device is None or not g.activities:
        return 0.0
    mine = (g.act_device == device) & (g.act_end > window.start_us) & (g.act_start < window.end_us)
    s, e = intervals.union(g.act_start[mine], g.act_end[mine])
    busy = intervals.total(*intervals.clip(s, e, window.start_us, window.end_us))
    pinned = mine & (g.act_call < 0)
    s, e = intervals.union(g.act_start[pinned], g.act_end[pinned])
    return intervals.total(*intervals.clip(s, e, window.start_us, window.end_us)) / busy if busy > 0 else 0.0


#: told the name of each pass as it starts ("graph", "critical path", ...): progress and timings
Stage = Callable[[str], None]


def _no_stage(_name: str) -> None:
    return None


def analyze_model(
    model: TraceModel,
    options: Options | None = None,
    sidecar: Sidecar | None = None,
    stage: Stage | None = None,
) -> Analysis:
    """Run every pass on one rank's model: window, device usage, steps, the dependency graph, the critical
    path, gaps and their causes, what-if replays and the pipeline model."""
    opts = options or Options()
    say = stage or _no_stage
    say("window and devices")
    window = find_window(model)
    devices = device_usage(model, window)
    say("graph")
    graph = build_graph(model)
    waits = host_sync_calls(graph)
    main, summary = summarize(window, devices, waits)
    steps = step_stats(model, main, window, waits)
    inputs = input_intervals(model)
    lane = main_thread(model, graph)
    say("critical path")
    frame = make_frame(graph, window.start_us, window.end_us, lane, inputs)
    critical = critical_path(graph, window.start_us, window.end_us, lane, inputs)
    say("gaps")
    gaps: list[Gap] = []
    idle: dict[Cause, float] = {c: 0.0 for c in Cause}
    bubbles: dict[int, float] = {}
    for d in devices:
        report = find_gaps(
            model,
            graph,
            d.id,
            busy_intervals(model, d.id, window),
            window.start_us,
            window.end_us,
            inputs,
            opts.min_gap_us,
        )
        gaps.extend(report.gaps)
        if d.id == main:
            idle = report.idle_by_cause
            bubbles = report.bubble_us
    say("syncs")
    syncs = find_syncs(model, graph, bubbles, window.start_us, window.end_us, sidecar)
    say("what-if")
    avoidable_calls = frozenset(c for s in syncs if s.avoidable for c in s.calls)
    policy = opts.avoidable or (lambda _m, _g, _s, _e: avoidable_calls)
    whatif = what_if(model, graph, frame, policy) if main is not None else host_only(window.dur_us, critical)
    notes = _notes(whatif, critical, _unlinked_share(graph, main, window), window)
    saving = max(whatif.saving(Scenario.NO_AVOIDABLE_SYNCS), whatif.saving(Scenario.INPUT_OVERLAPPED), 0.0)
    util = summary.device_utilization if main is not None else None
    verdict = decide(window.dur_us, whatif.sensitivity_us, critical, util)
    summary = replace(
        summary,
        sync_count=len(syncs),
        avoidable_sync_count=sum(1 for s in syncs if s.avoidable),
        critical_path_us=critical.length_us,
        bottleneck=verdict.bottleneck,
        est_saving_us=saving,
    )
    pipe = pipeline_model(model, graph, main, [s.host_sync_wait_us for s in steps])
    result = Analysis(
        model,
        window,
        main,
        devices,
        steps,
        summary,
        graph=graph,
        critical=critical,
        gaps=tuple(gaps),
        idle_by_cause=idle,
        bubble_us=bubbles,
        whatif=whatif,
        pipeline=pipe,
        syncs=syncs,
        sidecar=sidecar,
        run_timing=run_timing(sidecar.step_timing, [s.dur_us for s in steps]) if sidecar else None,
        options=opts,
        notes=notes,
        verdict=verdict,
    )
    say("findings")
    tops = top_tables(model, window.start_us, window.end_us)
    result = replace(result, findings=find_findings(result), tops=tops)
    say("self-check")
    return replace(result, warnings=consistency.check(result))


def analyze(
    traces: TraceSet, rank: int | None = None, options: Options | None = None, stage: Stage | None = None
) -> Analysis:
    """Analyse the chosen rank (default: the lowest) and summarise every rank of the set."""
    model = traces.for_rank(rank)
    result = analyze_model(model, options, traces.sidecar, stage)
    per_rank = {
        r: (result.summary if m is model else analyze_model(m, options).summary)
        for r, m in zip(traces.ranks, traces.models, strict=True)
    }
    return replace(result, ranks=tuple(traces.ranks), per_rank=per_rank, notes=traces.notes + result.notes)
