"""The human summary of ``stallscope diff A B``: what changed from before (A) to after (B), as plain text
(no colour codes, as ``stallscope.render.summary``; control characters in trace names escaped), most telling first: wall, verdict, steps, device, syncs,
the ops and kernels that changed most, findings, and the what-if side by side."""

from __future__ import annotations

import re

from stallscope.analyzer.document.diff import Delta, Diff, Gate, Reading, RowDelta, Status, VerdictSide
from stallscope.analyzer.passes.verdict import SENTENCE
from stallscope.display.text import evidence_sentence
from stallscope.display.units import duration as ms
from stallscope.display.units import signed

_MAX_STEP_ROWS = 4
_ROWS = 5
ABSENT = "n/a"
#: control characters in trace text (an op named with a colour code or a newline) are shown escaped
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def render_diff(d: Diff, rows: int = _ROWS) -> str:
    """The comparison in about 30 lines; ``rows`` changed rows per table (every one is in --json)."""
    lines = [f"stallscope diff: before {d.before}", f"                 after  {d.after}"]
    lines.append(
        f"  wall      {_pair(d.wall_us)}"
        + ("" if d.wall_comparable else "  (not comparable, see note)")
        + _untrusted(d)
    )
    lines.extend(_verdict(d))
    lines.extend(_steps(d))
    lines.extend(_run(d))
    lines.extend(_device(d))
    lines.extend(_sync_counts(d))
    lines.extend(_table("syncs", "by call site (count, host wait + device idle charged)", d.syncs, rows))
    lines.extend(_table("top ops", "changed most (self time)", d.ops, rows))
    lines.extend(_table("kernels", "changed most (device time)", d.kernels, rows))
    lines.extend(_table("findings", "changed most (cost)", d.findings, rows))
    lines.extend(_whatif(d))
    lines.extend(f"  note      {n}" for n in d.notes)
    return "\n".join(_CONTROL.sub(_escape, line) for line in lines)


def _escape(m: re.Match[str]) -> str:
    return f"\\x{ord(m.group()):02x}"


def _sync_counts(d: Diff) -> list[str]:
    """Host time blocked in syncs and the sync counts; a CPU-only run's would-be syncs."""
    counts = f"syncs {_count(d.sync_count)}, avoidable {_count(d.avoidable_sync_count)}"
    if d.would_sync_count.before is not None or d.would_sync_count.after is not None:
        counts += f"; would-be syncs (CPU-only) {_count(d.would_sync_count)}"
    if d.verdict[0].cpu_only and d.verdict[1].cpu_only:  # nothing to wait for on either side
        return [f"  syncs     {counts.removeprefix('syncs ')}"]
    return [f"  host sync blocked {_pair(d.host_sync_wait_us)}", f"            {counts}"]


def signed_ms(us: float) -> str:
    return signed(us)


def _pair(x: Delta, unit: str = "ms") -> str:
    """``before -> after   change (rel)``; an absent side reads n/a and has no change."""

    def one(v: float | None) -> str:
        if v is None:
            return ABSENT
        return f"{v:.1%}" if unit == "pct" else ms(v)

    text = f"{one(x.before)} -> {one(x.after)}"
    change = x.change
    if change is None:
        return text
    if unit == "pct":
        return f"{text} ({change * 100:+.1f} pts)"
    rel = f" ({x.rel:+.0%})" if x.rel is not None else ""
    return f"{text}   {signed_ms(change)}{rel}"


def _count(x: Delta) -> str:
    def one(v: float | None) -> str:
        return ABSENT if v is None else f"{int(v):,}"

    return f"{one(x.before)} -> {one(x.after)}"


def _bound(v: VerdictSide) -> str:
    if v.cpu_only:
        return "CPU-only profile: no device work, nothing waited on a GPU"
    return SENTENCE.get(v.bottleneck or "", "no verdict")


def _verdict(d: Diff) -> list[str]:
    a, b = d.verdict
    if (a.bottleneck, a.cpu_only) == (b.bottleneck, b.cpu_only):
        out = [f"  verdict   unchanged: {_bound(a)}"]
    else:
        out = [f"  verdict   before {_bound(a)}", f"            after  {_bound(b)}"]
    for side, v in (("before", a), ("after ", b)):
        words = (
            evidence_sentence({"path_share": v.path_share, "sensitivity_us": v.sensitivity_us}, v.utilization)
            if v.sensitivity_us
            else v.evidence  # an older document: its own line
        )
        if words:
            out.append(f"            {side} evidence: {words}")
    return out


def _steps(d: Diff) -> list[str]:
    s = d.steps
    if not s.paired:
        return [f"  steps     {_count(s.count)} profiled steps"]
    how = "paired by index" if s.count.before == s.count.after else f"first {s.paired} paired by index"
    out = [
        f"  steps     {_count(s.count)} steps, {how}; median {_pair(s.median_us)}",
        f"            mean {_pair(s.mean_us)}",
    ]
    pairs = list(s.pairs)
    title = f"{'before':<20} {'after':<20}  wall"
    if len(pairs) > _MAX_STEP_ROWS:
        pairs = sorted(pairs, key=lambda p: -abs(p.dur_us.change or 0.0))[:3]
        title += "   (the 3 most changed; every pair in --json)"
    out.append(f"            {'#':>3}  {title}")
    for p in sorted(pairs, key=lambda p: p.index):
        out.append(f"            {p.index:>3}  {p.before[:20]:<20} {p.after[:20]:<20}  {_pair(p.dur_us)}")
    return out


#: what the whole runs say of a window change that should not be trusted, for the wall line
_UNTRUSTED = {
    Reading.NOISE: "noise: within the runs' step-to-step spread",
    Reading.WINDOWS_ATYPICAL: "the windows caught atypical steps",
    Reading.WINDOWS_DISAGREE: "the whole runs disagree",
}


def _untrusted(d: Diff) -> str:
    said = _UNTRUSTED.get(d.run_steps.reading) if d.run_steps is not None else None
    return f"  ({said}: see run)" if said else ""


def _run(d: Diff) -> list[str]:
    """Every step of both runs (the sidecars' step timing) against the windows' change."""
    r = d.run_steps
    if r is None:
        return []
    return [
        f"  run       every step: median {_pair(r.median_us)}; {_count(r.steps)} steps timed",
        f"            spread (p90 - median) up to {ms(r.spread_us)}: {r.reading.value.replace('_', ' ')}"
        " (see note)",
    ]


def _device(d: Diff) -> list[str]:
    a, b = d.verdict
    if a.cpu_only and b.cpu_only:
        return ["  device    none on either side (CPU-only profiles)"]
    out = [f"  device    utilization {_pair(d.device_utilization, 'pct')}"]
    out.append(f"            busy {_pair(d.device_busy_us)}")
    out.append(f"            idle {_pair(d.device_idle_us)}")
    if a.cpu_only or b.cpu_only:
        out.append(
            f"            ({'before' if a.cpu_only else 'after'} is CPU-only: no device figures, no change)"
        )
    return out


def _table(label: str, title: str, rows: tuple[RowDelta, ...], limit: int) -> list[str]:
    if not rows or limit <= 0:
        return []
    out = [f"  {label:<9} {title}:"]
    for r in rows[:limit]:
        what = f"{r.detail} at {r.name}" if label == "syncs" and r.detail else r.name
        if label == "findings":
            what = r.detail + (f" ({r.name})" if r.name and r.name not in r.detail else "")
        out.append(
            f"            {_status(r.status):<8} {_count(r.count):>14} {_times(r.time_us):>26}  {what[:90]}"
        )
    if len(rows) > limit:
        out.append(f"            ... {len(rows) - limit} more in --json")
    return out


def _status(s: Status) -> str:
    return {Status.ENTERED: "new-top", Status.LEFT: "left-top"}.get(s, s.value)


def _times(x: Delta) -> str:
    def one(v: float | None) -> str:
        return "below top" if v is None else ms(v)

    return f"{one(x.before)} -> {one(x.after)}"


def _whatif(d: Diff) -> list[str]:
    if not d.whatif:
        return []
    out = [f"  what-if   {'scenario':<20} {'saves before':>22} {'saves after':>22}"]
    for w in d.whatif:
        cells = []
        for saving, wall in ((w.saving_us.before, d.wall_us.before), (w.saving_us.after, d.wall_us.after)):
            cells.append(
                ABSENT if saving is None else f"{ms(saving)} ({saving / max(wall or 0.0, 1e-9):.0%})"
            )
        out.append(f"            {w.scenario:<20} {cells[0]:>22} {cells[1]:>22}")
    change = d.wall_us.change
    if change is not None and d.wall_comparable:
        out.append(f"            {'(wall change)':<20} {signed_ms(change):>22}")
    return out


def render_gates(gates: tuple[Gate, ...], limit_pct: float) -> list[str]:
    """``check --baseline`` lines, in the form of the other limits: ``ok``/``FAIL``/``skip``."""
    out = []
    for g in gates:
        v = g.value
        if not g.applied:
            out.append(f"skip {g.metric}: {g.note} (limit +{limit_pct:g}% not applied)")
            continue
        rel = v.rel or 0.0
        out.append(
            f"{'FAIL' if g.regressed else 'ok  '} {g.metric} {ms(v.after or 0.0)} against baseline "
            f"{ms(v.before or 0.0)} ({rel:+.1%}; limit +{limit_pct:g}%)"
        )
    return out
