"""The short human summary of an analysis printed by ``stallscope analyze``."""

from __future__ import annotations

from analyzer.analysis import Analysis
from analyzer.model import LaneKind

_MAX_STEP_ROWS = 8


def ms(us: float) -> str:
    return f"{us / 1000:,.2f} ms" if abs(us) >= 1000 else f"{us:,.1f} us"


def render(a: Analysis) -> str:
    m = a.model
    lines = []
    rank = (
        ""
        if m.rank is None
        else f", rank {m.rank}" + (f" of {len(a.ranks)} ranks" if len(a.ranks) > 1 else "")
    )
    lines.append(f"stallscope: {m.path}")
    lines.append(f"  trace     {m.event_count:,} events ({m.format}{rank})")
    hosts = len(m.lanes_of(LaneKind.HOST))
    streams = len(m.lanes_of(LaneKind.STREAM))
    lines.append(
        f"  lanes     {hosts} host thread{'s' * (hosts != 1)}, {streams} device stream{'s' * (streams != 1)}"
    )
    basis = (
        f"{len(a.steps)} profiled step{'s' * (len(a.steps) != 1)}"
        if a.window.basis.value == "steps"
        else "first to last event (no ProfilerStep#)"
    )
    lines.append(f"  window    {ms(a.window.dur_us)}  ({basis})")
    if not a.devices:
        lines.append("  device    none: no kernels, copies or memsets in this trace (host-only profile)")
    for d in a.devices:
        mark = "*" if d.id == a.main_device and len(a.devices) > 1 else " "
        lines.append(
            f"  GPU {d.id}{mark}    {d.name}: busy {ms(d.busy_us)}, idle {ms(d.idle_us)}, "
            f"utilization {d.utilization:.1%} ({d.activities:,} kernels/copies)"
        )
    lines.append(f"  host sync {ms(a.summary.host_sync_wait_us)} blocked in synchronizing calls")
    lines.extend(_steps(a))
    if len(a.per_rank) > 1:
        utils = ", ".join(f"{r}: {s.device_utilization:.0%}" for r, s in sorted(a.per_rank.items()))
        lines.append(f"  ranks     utilization by rank  {utils}")
    lines.extend(_ignored(a))
    return "\n".join(lines)


def _steps(a: Analysis) -> list[str]:
    """Every step when there are few; otherwise the distribution and the slowest steps."""
    if not a.steps:
        return []
    rows = ["  steps     name                 wall        device busy   device idle   sync wait"]
    shown = list(a.steps)
    if len(a.steps) > _MAX_STEP_ROWS:
        shown = sorted(a.steps, key=lambda s: -s.dur_us)[:3]
    for s in shown:
        rows.append(
            f"            {s.name[:20]:<20} {ms(s.dur_us):>11} {ms(s.device_busy_us):>13} "
            f"{ms(s.device_idle_us):>13} {ms(s.host_sync_wait_us):>11}"
        )
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
    out += [f"  note      {n}" for n in a.notes]
    return out
