"""Findings: one per problem and call site, grouped across steps, with cost, estimated saving and advice.

Each rule is a small function ``rule(a) -> list[Finding]`` over the finished analysis (it reads syncs, gaps,
steps, the critical path and the what-if replays; it never re-derives them). Severity follows the share of
the wall time a finding costs: high >= 10%, medium >= 2%, else low.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

import numpy as np

from stallscope.analyzer.arrays import distinct
from stallscope.analyzer.critical import Kind
from stallscope.analyzer.findings_latent import input_advice
from stallscope.analyzer.gaps import Cause
from stallscope.analyzer.numbers import ratio
from stallscope.analyzer.replay import Scenario
from stallscope.analyzer.sites import CallSite
from stallscope.analyzer.syncs import Reason, Sync, SyncKind

if TYPE_CHECKING:
    from stallscope.analyzer.analysis import Analysis


class Severity(str, Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    title: str
    call_site: CallSite | None
    count: int
    time_us: float  # what it cost: host time blocked plus device idle charged to it (per rule)
    est_saving_us: float  # from the what-if replay
    advice: str
    op: str | None = None  # without a call site: the op (or API) the finding is about, to tell sites apart


def sync_where(s: Sync) -> str:
    """Where a sync finding is, for its title: `` at file:line in function``, or without any stack the op."""
    return f" at {s.call_site}" if s.call_site else f" in {s.op or s.api} (no python stack)"


def site_key(f: Finding) -> object:
    """What makes two findings about the same place: the call site, else the op."""
    return f.call_site if f.call_site is not None else ("op", f.op)


_ADVICE = {
    SyncKind.SCALAR_READ: (
        "Keep the value on the device and read it every N steps (accumulate `total += loss.detach()`, "
        "then `.item()` once), or copy it with `non_blocking=True` into a pinned buffer and read it after "
        "an event: `buf.copy_(x, non_blocking=True); ev.record(); ...; ev.synchronize()`."
    ),
    SyncKind.TO_HOST: (
        "Avoid moving tensors to the host inside the loop (`.cpu()`, `.tolist()`, `.numpy()`): keep the "
        "work on the device, or copy `non_blocking=True` into pinned memory and wait on an event only "
        "when the value is needed."
    ),
    SyncKind.BLANKET: (
        "Remove `torch.cuda.synchronize()` from the loop: kernels on one stream already run in order. To "
        "time or to hand data to another stream, use `torch.cuda.Event` (record/wait) instead."
    ),
    SyncKind.DATA_DEPENDENT: (
        "The output shape depends on the data (`nonzero`, boolean masks, `unique`), so the host must wait "
        "for the result: use static-shape alternatives (`torch.where(mask, x, 0)`, `masked_fill`, "
        "`nonzero_static` / a fixed `size=`), or move the step out of the hot loop."
    ),
    SyncKind.PAGEABLE_COPY: (
        "`non_blocking=True` from pageable memory still waits for the stream: allocate the source in pinned "
        "memory (`tensor.pin_memory()`, `DataLoader(pin_memory=True)`) so the copy overlaps with compute."
    ),
    SyncKind.STREAM: (
        "A stream synchronize blocks the host until all queued work is done: wait on an event recorded "
        "after the work you need, or drop the wait."
    ),
    SyncKind.EVENT: "Wait for the event later, when the result is actually needed, or on the device (`wait_event`).",
    SyncKind.ALLOCATOR: (
        "The caching allocator synchronised (cudaFree/cudaMalloc in the steady state): avoid "
        "`torch.cuda.empty_cache()` in the loop, keep tensor shapes stable, and consider "
        "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`."
    ),
    SyncKind.OTHER: "This call blocks the host until the device catches up; remove it from the loop if you can.",
}

_TITLE = {
    SyncKind.SCALAR_READ: "`.item()` / scalar read syncs the GPU",
    SyncKind.TO_HOST: "copy to the host syncs the GPU",
    SyncKind.BLANKET: "`torch.cuda.synchronize()` in the loop",
    SyncKind.DATA_DEPENDENT: "data-dependent shape syncs the GPU",
    SyncKind.PAGEABLE_COPY: "non_blocking copy from pageable memory is synchronous",
    SyncKind.STREAM: "stream synchronize in the loop",
    SyncKind.EVENT: "event synchronize in the loop",
    SyncKind.ALLOCATOR: "allocator syncs in the steady state",
    SyncKind.OTHER: "blocking call in the loop",
}


def severity(time_us: float, wall_us: float) -> Severity:
    share = time_us / wall_us if wall_us > 0 else 0.0
    return Severity.HIGH if share >= 0.10 else Severity.MEDIUM if share >= 0.02 else Severity.LOW


def false_syncs(a: Analysis) -> list[Finding]:
    """Avoidable syncs, one finding per (call site, kind), cost = host blocked + device idle after them.
    The saving is the ``no_avoidable_syncs`` replay's, shared by the device idle each finding caused."""
    groups: dict[tuple[object, SyncKind], list[Sync]] = {}
    for s in a.syncs:
        if s.avoidable:
            key = (s.call_site if s.call_site else (s.op, s.api), s.kind)
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
        saving = max(total_saving, 0.0) * bubble / total_bubble
        reasons = sorted({r.value for s in syncs for r in s.reasons})
        first = syncs[0]
        where = sync_where(first)
        what = _TITLE[kind]
        if kind == SyncKind.BLANKET and "DeviceSynchronize" not in first.api:
            what = f"device-wide wait (`{first.api}`) in the loop"
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
                _ADVICE[kind],
                first.op or first.api,
            )
        )
    return out


def input_bound(a: Analysis) -> list[Finding]:
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
            input_advice(a.sidecar.run if a.sidecar is not None else {}),
        )
    ]


def launch_bound(a: Analysis) -> list[Finding]:
    """Many short kernels launched back to back, each taking less device time than the host spends per
    launch, on a host-bound path with the device under half busy. Cost and saving: the device idle of
    the short host gaps between launches (what cheaper launches could win back; the ``host_2x`` replay
    caps it)."""
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
    saving = min(cost, max(a.whatif.saving(Scenario.HOST_2X), 0.0)) if a.whatif else 0.0
    return [
        Finding(
            "launch_bound",
            severity(cost, a.window.dur_us),
            f"launch-bound: {len(calls):,} launches of {kernel_us:.1f} us median kernels, one every "
            f"{interval:.1f} us on the host; GPU {a.summary.device_utilization:.0%} busy",
            None,
            len(short),
            cost,
            saving,
            "Cut per-kernel launch cost: capture the loop body in a CUDA graph (`torch.cuda.graphs` / "
            "`torch.compile(mode='reduce-overhead')`), fuse small ops (`torch.compile`), or batch more "
            "work per kernel.",
        )
    ]


def low_utilization(a: Analysis) -> list[Finding]:
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
            "Fix the findings above first; then raise the work per step (batch size, fused kernels) so the "
            "device has more to do per host step.",
        )
    ]


RULES: tuple[Callable[[Analysis], list[Finding]], ...] = (
    false_syncs,
    input_bound,
    launch_bound,
    low_utilization,
)


def all_rules() -> tuple[Callable[[Analysis], list[Finding]], ...]:
    """This module's rules, then the stream rules and the device rules (imported here: they build on
    ``Finding`` and ``severity`` from this module)."""
    from stallscope.analyzer import findings_device, findings_latent, findings_streams

    return (*RULES, findings_latent.would_sync_on_gpu, *findings_streams.RULES, *findings_device.RULES)


def find_findings(a: Analysis) -> tuple[Finding, ...]:
    """Every rule's findings, one per problem and site, most expensive first (saving, then cost, then how
    often it happened: on a CPU-only run, where costs are 0, the call made most often in the loop). A decode
    loop's readback is reported once, as ``autoregressive_readback`` (it says what can and cannot be won),
    not also as a generic scalar-read false sync at the same site."""
    found = [f for rule in all_rules() for f in rule(a)]
    decode_sites = {site_key(f) for f in found if f.rule == "autoregressive_readback"}
    found = [
        f
        for f in found
        if not (f.rule in ("false_sync_scalar_read", "false_sync_to_host") and site_key(f) in decode_sites)
    ]
    return tuple(sorted(found, key=lambda f: (-f.est_saving_us, -f.time_us, -f.count, f.rule)))
