"""Findings about how the host drove the device: avoidable syncs, data loading on the critical path,
launch-bound loops and a device left idle. Each rule reads the passes' ``Evidence`` (the registry lists them)."""

from __future__ import annotations

import numpy as np

from stallscope.analyzer.core.arrays import distinct
from stallscope.analyzer.core.numbers import duration_text, ratio
from stallscope.analyzer.evidence import Evidence
from stallscope.analyzer.findings import advice
from stallscope.analyzer.findings.base import (
    Finding,
    Severity,
    severity,
    site_library,
    sync_site_key,
    sync_where,
)
from stallscope.analyzer.passes.critical import Kind
from stallscope.analyzer.passes.gaps import Cause
from stallscope.analyzer.passes.replay import Scenario
from stallscope.analyzer.passes.syncs import Reason, Sync, SyncKind

_TITLE = {
    SyncKind.SCALAR_READ: "`.item()` / scalar read syncs the GPU",
    SyncKind.TO_HOST: "copy to the host syncs the GPU",
    SyncKind.BLANKET: "`torch.cuda.synchronize()` in the loop",
    SyncKind.DATA_DEPENDENT: "data-dependent shape syncs the GPU",
    SyncKind.PAGEABLE_COPY: "non_blocking copy from pageable memory is synchronous",
    SyncKind.STREAM: "stream synchronize in the loop",
    SyncKind.EVENT: "event synchronize in the loop",
    SyncKind.ALLOCATOR: "allocator syncs in the steady state",
    SyncKind.RUNTIME: "blocking runtime launch",
    SyncKind.OTHER: "blocking call in the loop",
}


def false_syncs(a: Evidence) -> list[Finding]:
    """Avoidable syncs, one finding per (call site, kind), cost = host blocked + device idle after them.
    The saving is the ``no_avoidable_syncs`` replay's, shared by the device idle each finding caused."""
    groups: dict[tuple[object, SyncKind], list[Sync]] = {}
    for s in a.syncs:
        if s.avoidable:
            key = (sync_site_key(s), s.kind)
            groups.setdefault(key, []).append(s)
    if not groups:
        return []
    total_saving = a.whatif.saving(Scenario.NO_AVOIDABLE_SYNCS) if a.whatif else 0.0
    total_bubble = sum(s.bubble_us for g in groups.values() for s in g) or 1.0
    wall = a.window.dur_us
    out = []
    for (_, kind), syncs in groups.items():
        bubble = sum(s.bubble_us for s in syncs)
        cost = sum(s.wait_us for s in syncs) + bubble
        if cost <= 0:  # never waited and left the device no idle: listed with the syncs, not a finding
            continue
        saving = max(total_saving, 0.0) * bubble / total_bubble
        reasons = sorted({r.value for s in syncs for r in s.reasons})
        first = syncs[0]
        where = sync_where(first)
        what = _TITLE[kind]
        if kind == SyncKind.BLANKET and "DeviceSynchronize" not in first.api:
            what = f"device-wide wait (`{first.api}`) in the loop"
        text = advice.SYNC[kind]
        library = site_library(a.sidecar, first.call_site)
        if library is not None:  # made inside a library call of the user's line: say which, advise on it
            _tag, named, text = advice.library_advice(*library)
            what = f"{what} inside {named}"
        title = f"{what}{where}: {len(syncs)}x ({', '.join(reasons)})"
        rule = "redundant_sync" if reasons == [Reason.REDUNDANT.value] else f"false_sync_{kind.value}"
        out.append(
            Finding(
                rule,
                severity(bubble + 0.1 * cost, wall),
                title,
                first.call_site,
                len(syncs),
                cost,
                saving,
                text,
                first.op or first.api,
            )
        )
    return out


def input_bound(a: Evidence) -> list[Finding]:
    """Data loading on the critical path or idling the device: more than 5% of the window."""
    idle = a.idle_by_cause.get(Cause.INPUT, 0.0)
    on_path = a.critical.breakdown_us.get(Kind.INPUT, 0.0) if a.critical else 0.0
    cost = max(idle, on_path)
    if cost < 0.05 * a.window.dur_us:
        return []
    saving = a.whatif.saving(Scenario.INPUT_OVERLAPPED) if a.whatif else 0.0
    return [
        Finding(
            "input_bound",
            severity(cost, a.window.dur_us),
            f"data loading holds the loop back: {ratio(cost, a.window.dur_us):.0%} of the window",
            None,
            sum(1 for g in a.gaps if g.cause == Cause.INPUT),
            cost,
            max(saving, 0.0),
            advice.input_bound(a.sidecar.run if a.sidecar is not None else {}),
        )
    ]


def launch_bound(a: Evidence) -> list[Finding]:
    """Many short kernels launched back to back, each taking less device time than the host spends per
    launch, on a host-bound path with the device under half busy. Count: the launches; cost: the device
    idle of the short host gaps between them. No what-if models its fix (a CUDA graph or fused kernels
    remove launches and the host work between them, not half of it), so it quotes no saving; its title
    says what the ``host_2x`` replay would save instead, and names it so."""
    g = a.graph
    if g is None or a.summary.bottleneck != "host" or a.summary.device_utilization >= 0.5:
        return []
    launched = np.flatnonzero(g.act_call >= 0)
    calls = distinct(g.act_call[launched])
    if len(calls) < 20:
        return []
    starts = np.sort(g.call_start[calls])
    interval = float(np.median(np.diff(starts)))
    kernel_us = float(np.median((g.act_end - g.act_start)[launched]))
    if kernel_us >= interval:
        return []
    causes, longest = (Cause.HOST, Cause.LAUNCH), 10 * interval
    short = [gap for gap in a.gaps if gap.cause in causes and gap.end_us - gap.start_us <= longest]
    cost = sum(gap.dur_us for gap in short)
    if cost < 0.02 * a.window.dur_us:
        return []
    host_2x = max(a.whatif.saving(Scenario.HOST_2X), 0.0) if a.whatif else 0.0
    return [
        Finding(
            "launch_bound",
            severity(cost, a.window.dur_us),
            f"launch-bound: {len(calls):,} launches of {duration_text(kernel_us)} median kernels, one every "
            f"{duration_text(interval)} on the host; GPU {a.summary.device_utilization:.0%} busy; if host work were "
            f"halved (host_2x) the window would be {duration_text(host_2x)} shorter",
            None,
            len(calls),
            cost,
            0.0,
            advice.LAUNCH_BOUND,
        )
    ]


def low_utilization(a: Evidence) -> list[Finding]:
    """TensorBoard parity: device utilization under 50% (reported only if no sharper finding explains it)."""
    if a.main_device is None or a.summary.device_utilization >= 0.5:
        return []
    idle = a.summary.device_idle_us
    causes = sorted(((v, c.value) for c, v in a.idle_by_cause.items() if v > 0), reverse=True)
    top = ", ".join(f"{c} {v / max(idle, 1e-9):.0%}" for v, c in causes[:3]) or "no gap over the threshold"
    return [
        Finding(
            "low_utilization",
            Severity.MEDIUM if a.summary.device_utilization < 0.3 else Severity.LOW,
            f"GPU {a.main_device} busy only {a.summary.device_utilization:.0%} of the window (idle by cause: {top})",
            None,
            1,
            idle,
            0.0,
            advice.LOW_UTILIZATION,
        )
    ]
