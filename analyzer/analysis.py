"""Analysis passes over a trace model and the typed ``Analysis`` result.

``analyze_model`` runs the passes in order (each a small pure function ``pass(model, ...) -> typed result``),
gathers their results as ``Evidence``, runs the findings rules and the self-check over it, and returns the
``Analysis``: the evidence with findings, top tables and warnings. Semantics follow DESIGN.md §4.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace

from stallscope.analyzer import selfcheck
from stallscope.analyzer.core.model import F64, TraceModel, TraceSet
from stallscope.analyzer.evidence import Evidence, Options
from stallscope.analyzer.findings.base import Finding
from stallscope.analyzer.findings.registry import find_findings
from stallscope.analyzer.graph.dependency import Graph, build_graph
from stallscope.analyzer.graph.inputs import input_intervals, main_thread, untraced_intervals
from stallscope.analyzer.load.sidecar import Sidecar
from stallscope.analyzer.passes.critical import CriticalPath, critical_path
from stallscope.analyzer.passes.gaps import Cause, Gap, device_gaps
from stallscope.analyzer.passes.pipeline import pipeline_model
from stallscope.analyzer.passes.replay import Frame, Scenario, make_frame
from stallscope.analyzer.passes.runtiming import run_timing
from stallscope.analyzer.passes.syncs import Sync, find_syncs
from stallscope.analyzer.passes.tops import TOP, Tops, top_tables
from stallscope.analyzer.passes.verdict import decide
from stallscope.analyzer.passes.whatif import (
    PINNED_SHARE,
    WhatIfReport,
    host_only,
    pinned_share,
    scenario_costs,
    what_if,
)
from stallscope.analyzer.passes.window import (
    DeviceUsage,
    Window,
    busy_by_device,
    device_usage,
    find_window,
    host_end,
    host_sync_calls,
    step_stats,
    summarize,
)
from stallscope.analyzer.passes.window import busy_intervals as busy_intervals  # read here by tests

SCHEMA = "stallscope.analysis/3"


@dataclass(frozen=True)
class Analysis(Evidence):
    """One rank's analysis: the passes' evidence, and what was concluded from it."""

    findings: tuple[Finding, ...] = ()
    warnings: tuple[str, ...] = ()  # contradictions the self-check found (``selfcheck``)
    tops: Tops | None = None  # the top ops and kernels (made once here, so that no view rescans events)

    @classmethod
    def of(
        cls, evidence: Evidence, findings: tuple[Finding, ...], warnings: tuple[str, ...], tops: Tops | None
    ) -> Analysis:
        passes = {f.name: getattr(evidence, f.name) for f in fields(Evidence)}
        return cls(**passes, findings=findings, warnings=warnings, tops=tops)

    def top(self, limit: int = TOP) -> Tops:
        """The top tables cut to ``limit`` rows, made again only when asked for more than they hold."""
        t = self.tops
        if t is None or limit > TOP:
            return top_tables(self.model, self.window.start_us, self.window.end_us, limit)
        return Tops(t.ops[:limit], t.kernels[:limit])


def _notes(whatif: WhatIfReport, critical: CriticalPath, pinned: float, window: Window) -> tuple[str, ...]:
    """What the reader of the what-if and the critical path should know about their limits."""
    notes: tuple[str, ...] = ()
    if whatif.overrun_us > 0.01 * window.dur_us:
        notes += (
            f"device work launched inside the window ran {whatif.overrun_us / 1000:,.2f} ms past its end: "
            "the what-if replays include it, and their savings are against the recorded run",
        )
    if pinned >= PINNED_SHARE:
        notes += (
            f"{pinned:.0%} of the device's work (by time or by count) has no launch call in the trace: the "
            "what-if replays keep it at its recorded time, and what is queued behind it waits for it, so what "
            "a faster device or host would save is understated",
        )
    if critical.stopped:
        notes += (f"critical path: {critical.stopped}",)
    return notes


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
    untraced = untraced_intervals(model)
    lane = main_thread(model, graph)
    say("critical path")
    frame = make_frame(
        graph, window.start_us, window.end_us, lane, inputs, host_end(model, lane, window), untraced
    )
    critical = critical_path(graph, window.start_us, window.end_us, lane, inputs, untraced)
    say("gaps")
    gaps, idle, bubbles = _gaps(model, graph, devices, main, window, (inputs, untraced), opts.min_gap_us)
    say("syncs")
    syncs = find_syncs(model, graph, bubbles, window.start_us, window.end_us, sidecar)
    say("what-if")
    whatif = _what_if(model, graph, frame, critical, main, window, syncs, opts)
    notes = _notes(whatif, critical, pinned_share(graph, main, window.start_us, window.end_us), window)
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
    evidence = Evidence(
        model,
        window,
        main,
        devices,
        steps,
        summary,
        graph=graph,
        critical=critical,
        gaps=gaps,
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
        frame=frame,
    )
    say("findings")
    findings = find_findings(evidence)
    tops = top_tables(model, window.start_us, window.end_us)
    say("self-check")
    return Analysis.of(evidence, findings, selfcheck.check(evidence), tops)


def _gaps(
    model: TraceModel,
    graph: Graph,
    devices: tuple[DeviceUsage, ...],
    main: int | None,
    window: Window,
    host_time: tuple[dict[int, tuple[F64, F64]], dict[int, tuple[F64, F64]]],
    min_gap_us: float,
) -> tuple[tuple[Gap, ...], dict[Cause, float], dict[int, float]]:
    """Every device's gaps (``host_time``: each thread's data loading and untraced stretches), judged
    for all devices at once; the idle by cause and the bubble each blocking call left are the main
    device's (the summary's)."""
    ids = [d.id for d in devices]
    inputs, untraced = host_time
    busy = busy_by_device(model, ids, window)
    found = device_gaps(model, graph, ids, busy, window.start_us, window.end_us, inputs, min_gap_us, untraced)
    if main is None:
        return found.gaps, {c: 0.0 for c in Cause}, {}
    report = found.report(main)
    return found.gaps, report.idle_by_cause, report.bubble_us


def _what_if(
    model: TraceModel,
    graph: Graph,
    frame: Frame,
    critical: CriticalPath,
    main: int | None,
    window: Window,
    syncs: tuple[Sync, ...],
    opts: Options,
) -> WhatIfReport:
    """The scenarios' costs (no_avoidable_syncs drops the avoidable syncs' waits unless the options say
    otherwise) and their replays; a run without device work has no replay, only its host path."""
    avoidable_calls = frozenset(c for s in syncs if s.avoidable for c in s.calls)
    policy = opts.avoidable or (lambda _m, _g, _s, _e: avoidable_calls)
    scenarios = scenario_costs(model, graph, frame, policy)
    if main is None:
        return host_only(window.dur_us, critical, scenarios)
    return what_if(graph, frame, scenarios)


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
