"""The findings rules, in one list, and how their findings are put together.

A rule is a small pure function ``rule(evidence) -> list[Finding]`` over what the passes found (syncs,
gaps, steps, the critical path, the what-if replays: ``Evidence``); it never re-derives them. To add one,
write it in the module of its kind (host, device, latent, streams), its advice in ``advice``, and list it
here.
"""

from __future__ import annotations

from collections.abc import Callable

from stallscope.analyzer.evidence import Evidence
from stallscope.analyzer.findings import device, host, latent, streams
from stallscope.analyzer.findings.base import Finding, Severity, site_key

Rule = Callable[[Evidence], list[Finding]]

#: every rule, in the order their findings are listed when they tie
RULES: tuple[Rule, ...] = (
    host.false_syncs,
    host.input_bound,
    host.launch_bound,
    host.low_utilization,
    latent.would_sync_on_gpu,
    streams.copy_compute_serialized,
    streams.streams_never_overlapped,
    streams.unsynchronized_pinned_readback,
    device.communication_bound,
    device.allocator_syncs,
    device.tensor_cores_unused,
    device.memory_near_capacity,
    device.autoregressive_readback,
)


def find_findings(a: Evidence) -> tuple[Finding, ...]:
    """Every rule's findings, one per problem and site, most expensive first (saving, then severity, then
    cost, then how often it happened: on a CPU-only run, where costs are 0, the call made most often in
    the loop); low utilization, whose advice is to fix the others first, comes last. A decode loop's readback is reported once, as ``autoregressive_readback`` (it says what can and cannot be won),
    not also as a generic scalar-read false sync at the same site."""
    found = [f for rule in RULES for f in rule(a)]
    decode_sites = {site_key(f) for f in found if f.rule == "autoregressive_readback"}
    found = [
        f
        for f in found
        if not (f.rule in ("false_sync_scalar_read", "false_sync_to_host") and site_key(f) in decode_sites)
    ]
    rank = {Severity.HIGH: 0, Severity.MEDIUM: 1, Severity.LOW: 2}
    return tuple(
        sorted(
            found,
            key=lambda f: (
                f.rule == "low_utilization",  # its advice: "fix the findings above first"
                -f.est_saving_us,
                rank[f.severity],
                -f.time_us,
                -f.count,
                f.rule,
            ),
        )
    )
