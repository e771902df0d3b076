"""The short human summary of an analysis printed by ``stallscope analyze``."""

from __future__ import annotations

from stallscope.analyzer.analysis import Analysis
from stallscope.analyzer.core.model import LaneKind
from stallscope.analyzer.core.numbers import ratio
from stallscope.analyzer.document.analysis import recording_notes
from stallscope.analyzer.findings.latent import UNMEASURED, measured
from stallscope.analyzer.load.counters import window_stats
from stallscope.analyzer.passes.replay import Scenario
from stallscope.analyzer.passes.verdict import SENTENCE
from stallscope.display.text import evidence_sentence, prose_units
from stallscope.display.units import duration as ms

_MAX_STEP_ROWS = 4


def render(a: Analysis, top: int = 3, top_ops: int | None = None) -> str:
    """Verdict first (bottleneck, utilization, idle by cause, best saving), then the what-if table, the
    pipeline model and the trace facts: about 20 lines for a typical trace."""
    m = a.model
    lines = [f"stallscope: {m.path}"]
    lines.extend(_verdict(a))
    lines.extend(_findings(a, top))
    lines.extend(_tops(a, (5 if a.main_device is None else 0) if top_ops is None else top_ops))
    lines.extend(_syncs(a))
    lines.extend(_whatif(a))
    if a.pipeline:
        p = a.pipeline
        lines.append(
            f"  pipeline  P {ms(p.host_prep_us)} host, G {ms(p.device_us)} device, n {p.batches}: "
            f"serial {ms(p.serial_us)}, pipelined {ms(p.pipelined_us)} ({p.bottleneck} is the slower stage)"
        )
        if p.pipelined_us > a.window.dur_us > 0:  # an idealised model: see stallscope.display.text
            lines.append(
                f"            the model runs P then G within a step; this run overlapped them and took "
                f"{ms(a.window.dur_us)}"
            )
    lines.extend(_trace(a))
    lines.extend(_steps(a))
    lines.extend(_run_steps(a))
    if len(a.per_rank) > 1:
        utils = ", ".join(f"{r}: {s.device_utilization:.0%}" for r, s in sorted(a.per_rank.items()))
        lines.append(f"  ranks     utilization by rank  {utils}")
    lines.extend(_ignored(a))
    return "\n".join(lines)


def device_label(a: Analysis) -> str:
    """The main device as its lanes name it ("GPU 0", "MTIA 17")."""
    for lane in a.model.lanes:
        if lane.on_device and lane.device == a.main_device and lane.kind == LaneKind.STREAM:
            return lane.label.split(" stream ")[0]
    return f"GPU {a.main_device}"


def _verdict(a: Analysis) -> list[str]:
    s = a.summary
    if a.main_device is None:
        return [
            "  verdict   CPU-only profile: no kernels, copies or memsets on a device, so nothing waited on a GPU"
        ]
    if a.critical is None or s.bottleneck is None:
        return []
    gpu = (
        f"{device_label(a)} utilization {s.device_utilization:.1%}"
        if a.main_device is not None
        else "no GPU work"
    )
    out = [f"  verdict   {SENTENCE[s.bottleneck]}; {gpu}"]
    if a.verdict is not None:
        v = a.verdict  # in words, as every view says it (stallscope.display.text)
        shares = {"path_share": v.path_share, "sensitivity_us": v.sensitivity_us}
        out.append(f"            evidence: {evidence_sentence(shares, v.utilization)}")
    out.extend(f"  WARNING   {w}" for w in a.warnings)
    idle = sorted(((v, c.value) for c, v in a.idle_by_cause.items() if v > 0), reverse=True)
    if idle:
        parts = ", ".join(f"{name} {ms(v)}" for v, name in idle)
        out.append(f"            device idle {ms(s.device_idle_us)} in the window; gaps by cause: {parts}")
    saving = s.est_saving_us or 0.0
    wall = a.window.dur_us
    if saving > 0 and a.whatif:
        realistic = (Scenario.NO_AVOIDABLE_SYNCS, Scenario.INPUT_OVERLAPPED)  # summary.est_saving_us's two
        best = max((r for r in a.whatif.results if r.scenario in realistic), key=lambda w: w.saving_us)
        out.append(
            f"            best realistic saving {ms(saving)} ({ratio(saving, wall):.0%}) with {best.scenario.value}"
        )
    else:
        out.append("            no realistic saving found from removing avoidable syncs or overlapping input")
    return out


def _tops(a: Analysis, n: int) -> list[str]:
    """The top ops by self time and kernels by device time (``key_averages``-style), ``n`` of each."""
    if n <= 0:
        return []
    t = a.top(n)
    rows = []
    if t.ops:
        rows.append(f"  top ops   {'self':>11} {'total':>11} {'calls':>7} {'in steps':>8}  name")
        rows += [
            f"            {ms(r.self_us):>11} {ms(r.total_us):>11} {r.count:>7,} {r.in_steps:>8,}  {r.name[:70]}"
            for r in t.ops
        ]
    if t.kernels:
        rows.append(f"  top kernels {'total':>9} {'mean':>11} {'calls':>7} {'TC':>3}  name")
        rows += [
            f"            {ms(r.total_us):>11} {ms(r.mean_us):>11} {r.count:>7,} "
            f"{'-' if r.tensor_cores is None else ('yes' if r.tensor_cores else 'no'):>3}  {r.name[:70]}"
            for r in t.kernels
        ]
    return rows


def _findings(a: Analysis, top: int) -> list[str]:
    """The ``top`` findings, most expensive first: what, where, what it costs, what to change."""
    if not a.findings or top <= 0:
        return []
    rows = []
    for i, f in enumerate(a.findings[:top], 1):
        label = "  findings" if i == 1 else "          "
        saving = f", saves ~{ms(f.est_saving_us)}" if f.est_saving_us > 0 else ""
        cost = f"costs {ms(f.time_us)}" if measured(f.rule) else UNMEASURED
        rows.append(f"{label}{i:>2}. [{f.severity.value}] {prose_units(f.title)} ({cost}{saving})")
        rows.append(f"              fix: {f.advice}")
    if len(a.findings) > top:
        rows.append(f"              ... {len(a.findings) - top} more (--top N, or --json)")
    return rows


def _syncs(a: Analysis, top: int = 2) -> list[str]:
    """How many syncs, how many avoidable, and the costliest avoidable call sites."""
    if not a.syncs:
        return []
    avoidable = [s for s in a.syncs if s.avoidable]
    head = f"  syncs     {len(a.syncs)} blocking, {len(avoidable)} avoidable"
    if not avoidable:
        return [head]
    by_site: dict[tuple[str, str], list[float]] = {}
    for s in avoidable:
        where = str(s.call_site) if s.call_site else (s.op or s.api)
        cost = by_site.setdefault((where, s.kind.value), [0.0, 0.0, 0.0])
        cost[0] += 1
        cost[1] += s.wait_us
        cost[2] += s.bubble_us
    ranked = sorted(by_site.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))[:top]
    rows = [head + ":"]
    for (where, kind), (count, wait, bubble) in ranked:
        rows.append(
            f"            {int(count)} x {kind} at {where}: host blocked {ms(wait)}, device idle after {ms(bubble)}"
        )
    return rows


def _whatif(a: Analysis) -> list[str]:
    if a.whatif is None or a.main_device is None:  # nothing on a device to re-time
        return []
    w = a.whatif
    width = max(20, *(len(r.scenario.value) for r in w.results))
    rows = [f"  what-if   {'as recorded':<{width}} {ms(w.window_us):>11}"]
    for r in w.results:
        pct = r.saving_us / max(w.window_us, 1e-9)
        rows.append(
            f"            {r.scenario.value:<{width}} {ms(r.predicted_wall_us):>11}   "
            f"saves {ms(r.saving_us)} ({pct:.0%})"
        )
    return rows


def _trace(a: Analysis) -> list[str]:
    m = a.model
    rank = "" if m.rank is None else f", rank {m.rank}" + (f" of {len(a.ranks)}" if len(a.ranks) > 1 else "")
    hosts = len(m.lanes_of(LaneKind.HOST))
    streams = len(m.lanes_of(LaneKind.STREAM))
    basis = (
        f"{len(a.steps)} profiled step{'s' * (len(a.steps) != 1)}"
        if a.window.basis.value == "steps"
        else "first to last event, no ProfilerStep#"
    )
    lines = [
        f"  trace     {m.event_count:,} events ({m.format}{rank}); {hosts} host thread{'s' * (hosts != 1)}, "
        f"{streams} stream{'s' * (streams != 1)}; window {ms(a.window.dur_us)} ({basis})"
    ]
    if not a.devices:
        lines.append("  device    none: no kernels, copies or memsets in this trace (host-only profile)")
    for d in a.devices:
        mark = "*" if d.id == a.main_device and len(a.devices) > 1 else " "
        lines.append(
            f"  GPU {d.id}{mark}    {d.name}: busy {ms(d.busy_us)}, idle {ms(d.idle_us)}, "
            f"utilization {d.utilization:.1%} ({d.activities:,} kernels/copies)"
        )
        if d.communication_us > 0:
            lines.append(
                f"            busy split: compute {ms(d.compute_us)}, communication {ms(d.communication_us)}, "
                f"copies {ms(d.copy_us)}"
            )
    lines.append(f"  host sync {ms(a.summary.host_sync_wait_us)} blocked in synchronizing calls")
    c = m.counters
    if len(c):
        lines.append(
            f"  counters  {len(c):,} samples in {len(c.series)} series (in --json and the report's timeline); "
            "in the window:"
        )
        stats = [
            (window_stats(*c.of(i), a.window.start_us, a.window.end_us), s) for i, s in enumerate(c.series)
        ]
        shown = [(st, s) for st, s in stats if st["max"]] + [(st, s) for st, s in stats if st["max"] == 0]
        for st, series in shown[:3]:  # series that are not zero throughout first
            unit = f" {series.unit}" if series.unit else ""
            lines.append(
                f"            {series.name[:60]}: mean {st['mean']:.4g}{unit} (min {st['min']:.4g}, max {st['max']:.4g})"
            )
    return lines


def _run_steps(a: Analysis) -> list[str]:
    """The whole run's step timing (collector bundles) and whether the profiled steps were typical."""
    t = a.run_timing
    if t is None:
        return []
    h = t.host
    line = f"  run       {t.steps} steps timed: host median {h.median_ms:.2f} ms, p90 {h.p90_ms:.2f} ms"
    if t.device is not None:
        line += f"; device median {t.device.median_ms:.2f} ms"
    lines = [line]
    if t.profiled_median_ms is not None and t.profiled_ratio is not None:
        verdict = (
            "typical of the run"
            if t.typical
            else f"{abs(t.profiled_ratio - 1):.0%} {'slower' if t.profiled_ratio > 1 else 'faster'} "
            "than the run's median: not the steady state, read the figures above with care"
        )
        lines.append(f"            profiled steps' median {t.profiled_median_ms:.2f} ms: {verdict}")
    return lines


def _steps(a: Analysis) -> list[str]:
    """Every step when there are few; otherwise the distribution and the slowest steps."""
    if not a.steps:
        return []
    device = a.main_device is not None  # a CPU-only run has no device figures: none shown, not 0 / wall
    head = "device busy   device idle   sync wait" if device else ""
    rows = [f"  steps     name                 wall        {head}".rstrip()]
    shown = list(a.steps)
    if len(a.steps) > _MAX_STEP_ROWS:
        shown = sorted(a.steps, key=lambda s: -s.dur_us)[:3]
    for s in shown:
        row = f"            {s.name[:20]:<20} {ms(s.dur_us):>11}"
        if device:
            row += f" {ms(s.device_busy_us):>13} {ms(s.device_idle_us):>13} {ms(s.host_sync_wait_us):>11}"
        rows.append(row)
    if len(shown) < len(a.steps):
        walls = sorted(s.dur_us for s in a.steps)
        median = walls[len(walls) // 2]
        rows.insert(
            1,
            f"            {len(a.steps)} steps: wall median {ms(median)}, min {ms(walls[0])}, "
            f"max {ms(walls[-1])}; the 3 slowest:",
        )
        rows.append("            (every step is in --json)")
    return rows


def _ignored(a: Analysis) -> list[str]:
    r = a.report
    parts = [f"{n:,} {reason}" for reason, n in sorted(r.skipped.items())]
    if r.unknown_categories:
        cats = ", ".join(f"{c} x{n}" for c, n in sorted(r.unknown_categories.items())[:5])
        parts.append(f"unknown categories kept unanalysed ({cats})")
    if r.unknown_phases:
        parts.append(
            "unknown phases " + ", ".join(f"{p!r} x{n}" for p, n in sorted(r.unknown_phases.items()))
        )
    if r.unknown_keys:
        keys = ", ".join(r.unknown_keys[:4]) + (", ..." if len(r.unknown_keys) > 4 else "")
        parts.append(f"{len(r.unknown_keys)} unknown top-level keys, not read ({keys})")
    if r.unpaired_flows:
        parts.append(
            f"{r.unpaired_flows:,} launch-flow ends without a partner (ignored: links use correlation ids)"
        )
    if r.unlinked_device_events:
        parts.append(f"{r.unlinked_device_events:,} device events with no launch call in the trace")
    out = [f"  skipped   {p}" for p in parts]
    out += [f"  note      {n}" for n in (*a.notes, *r.notes, *recording_notes(a))]
    return out
