"""Findings about the device itself: allocator syncs, GEMMs that skip the tensor cores, memory near the
device's capacity, and autoregressive decode loops that read every token back.

As every rule (``registry``), each is a pure function ``rule(evidence) -> list[Finding]`` over what the passes
found (syncs, steps, graph, what-if replays, the model's devices); it changes nothing. Times are
µs on the trace clock.
"""

from __future__ import annotations

import statistics

import numpy as np

from stallscope.analyzer.core.arrays import distinct
from stallscope.analyzer.core.model import Device
from stallscope.analyzer.core.names import EventKind, gemm_kind
from stallscope.analyzer.core.numbers import duration_text, ratio
from stallscope.analyzer.evidence import Evidence
from stallscope.analyzer.findings import advice
from stallscope.analyzer.findings.base import Finding, Severity, severity, sync_site_key, sync_where
from stallscope.analyzer.passes.critical import Kind
from stallscope.analyzer.passes.replay import Costs, Scenario, replay_ends
from stallscope.analyzer.passes.syncs import Sync, SyncKind

# ----- allocator syncs ---------------------------------------------------------------------------------


def allocator_syncs(a: Evidence) -> list[Finding]:
    """``cudaFree`` (or a ``cudaMalloc`` that clearly waited) blocking the host in the steady state: inside a
    step other than the first (the first grows the caching allocator's pool). A site that syncs in most steps
    is avoidable (reason ``repeated``) and already reported by ``false_syncs`` as ``false_sync_allocator``:
    it is skipped here, so each site has exactly one finding. Cost: the host wait plus the device idle
    charged to them; saving: the replay with those calls no longer waiting."""
    groups: dict[object, list[Sync]] = {}
    reported: set[object] = set()
    for s in a.syncs:
        if s.kind != SyncKind.ALLOCATOR:
            continue
        if s.avoidable:
            reported.add(sync_site_key(s))
        elif s.step >= 1:
            groups.setdefault(sync_site_key(s), []).append(s)
    out = []
    for key, syncs in groups.items():
        if key in reported:
            continue
        bubble = sum(s.bubble_us for s in syncs)
        cost = sum(s.wait_us for s in syncs) + bubble
        first = syncs[0]
        where = sync_where(first)
        steps = len({s.step for s in syncs})
        out.append(
            Finding(
                "allocator_sync",
                severity(bubble + 0.1 * cost, a.window.dur_us),
                f"`{first.api}` synchronised the device{where}: {len(syncs)}x in {steps} of "
                f"{len(a.steps)} steps after the first",
                first.call_site,
                len(syncs),
                cost,
                _saving_without(a, frozenset(c for s in syncs for c in s.calls)),
                advice.ALLOCATOR,
                first.op or first.api,
            )
        )
    return out


def _saving_without(a: Evidence, calls: frozenset[int]) -> float:
    """What the replay saves when ``calls`` no longer wait (their host time stays)."""
    g = a.graph
    if g is None or a.frame is None or not calls:
        return 0.0
    base, without = replay_ends(g, a.frame, [Costs(), Costs(no_wait=calls)])
    return max(base - without, 0.0)


# ----- communication -----------------------------------------------------------------------------------

_COMM_PATH_SHARE = 0.10  # collectives' share of the critical path before the rule speaks


def communication_bound(a: Evidence) -> list[Finding]:
    """Collective kernels (NCCL/RCCL) on the critical path: at least 10% of it, or a 2x faster
    communication saving 5% of the window. Cost: their time on the path; saving: the
    ``communication_overlapped`` replay (collectives take no time on their streams), which models what
    overlapping them with compute could win at most."""
    cp, w = a.critical, a.whatif
    if cp is None or w is None or a.main_device is None:
        return []
    on_path = cp.breakdown_us.get(Kind.COMMUNICATION, 0.0)
    window = a.window.dur_us
    if on_path < _COMM_PATH_SHARE * window and w.sensitivity_us.get("communication", 0.0) < 0.05 * window:
        return []
    usage = next((d for d in a.devices if d.id == a.main_device), None)
    split = (
        f"; the GPU ran compute {ratio(usage.compute_us, window):.0%} of the window, collectives alone "
        f"{ratio(usage.communication_us, window):.0%}"
        if usage is not None
        else ""
    )
    return [
        Finding(
            "communication_bound",
            severity(on_path, window),
            f"collectives (NCCL/RCCL) on the critical path: {duration_text(on_path)}, "
            f"{ratio(on_path, window):.0%} of the window{split}",
            None,
            int(np.count_nonzero(cp.kind == list(Kind).index(Kind.COMMUNICATION))),
            on_path,
            max(w.saving(Scenario.COMMUNICATION_OVERLAPPED), 0.0),
            advice.COMMUNICATION,
        )
    ]


# ----- tensor cores ------------------------------------------------------------------------------------

_TC_MIN_SHARE = 0.10  # FP32 GEMM time, as a share of the device's busy time, before the rule speaks


def _compute_major(device: Device) -> int | None:
    major = device.properties.get("computeMajor")
    return major if isinstance(major, int) and not isinstance(major, bool) else None


def tensor_cores_unused(a: Evidence) -> list[Finding]:
    """A tensor-core capable device (compute capability 7.0 or newer) running its matrix multiplies and
    convolutions in FP32 on the CUDA cores: FP32 GEMM kernels take at least 10% of its busy time and no
    GEMM-like kernel in the window uses the tensor cores. Cost: that kernel time. Saving: assuming tensor
    cores halve those kernels, the ``device_2x`` replay's saving scaled by their share of the busy time (no
    saving when the device is not the bottleneck)."""
    device = next((d for d in a.model.devices if d.id == a.main_device), None)
    if device is None or a.graph is None:
        return []
    major = _compute_major(device)
    if major is None or major < 7:
        return []
    g, model = a.graph, a.model
    inside = (g.act_device == device.id) & (g.act_end > a.window.start_us) & (g.act_start < a.window.end_us)
    kernels = np.flatnonzero(inside & (model.events.kind[g.act_event] == EventKind.KERNEL))
    # classify each distinct kernel name once (names are interned), then add up per kernel in numpy
    codes = model.events.name[g.act_event[kernels]]
    kind = {c: gemm_kind(model.strings[c]) for c in distinct(codes).tolist()}
    if any(k == "tensor_core" for k in kind.values()):
        return []  # some GEMM uses the tensor cores: mixed precision is on
    fp32 = np.array([kind[c] == "fp32" for c in codes.tolist()], dtype=np.bool_)
    chosen = kernels[fp32]
    starts = np.maximum(g.act_start[chosen], a.window.start_us)
    fp32_us = float(np.sum(np.minimum(g.act_end[chosen], a.window.end_us) - starts))
    fp32_count = len(chosen)
    names = {model.strings[c] for c, k in kind.items() if k == "fp32"}
    busy = a.summary.device_busy_us
    if not names or busy <= 0 or fp32_us <= 0 or fp32_us < _TC_MIN_SHARE * busy:
        return []  # no FP32 GEMM time (a subnormal busy time makes its 10% zero): nothing to say
    share = fp32_us / busy
    compute_2x = a.whatif.sensitivity_us.get("device", 0.0) if a.whatif else 0.0
    saving = max(compute_2x, 0.0) * share  # compute 2x halves every compute kernel: keep these ones' share
    tf32 = major >= 8
    example = min(names, key=lambda n: (len(n), n))  # ties by name: a set's order varies with the hash seed
    return [
        Finding(
            "tensor_cores_unused",
            severity(saving, a.window.dur_us),
            f"GPU {device.id} ({device.name}, compute capability {major}.x) runs its GEMMs in FP32 without tensor cores: "
            f"{fp32_count:,} kernels ({example}...), {share:.0%} of its busy time; saving assumes tensor "
            "cores halve them",
            None,
            fp32_count,
            fp32_us,
            saving,
            advice.tensor_cores(tf32),
        )
    ]


# ----- memory ------------------------------------------------------------------------------------------

_MEMORY_SHARE = 0.90  # peak reserved memory, as a share of the device's memory, before the rule speaks


def memory_near_capacity(a: Evidence) -> list[Finding]:
    """The caching allocator's peak reserved memory (``[memory]`` instants of ``profile_memory=True``) is at
    least 90% of the device's memory (``deviceProperties.totalGlobalMem``): the next larger batch or
    sequence will fail with out-of-memory, or the allocator starts flushing its cache (cudaFree syncs). No
    time cost of its own."""
    out = []
    for d in a.model.devices:
        total = d.properties.get("totalGlobalMem")
        if not isinstance(total, int) or isinstance(total, bool) or total <= 0 or d.peak_reserved_bytes < 0:
            continue
        share = d.peak_reserved_bytes / total
        if share < _MEMORY_SHARE:
            continue
        gib = 1 << 30
        out.append(
            Finding(
                "memory_near_capacity",
                Severity.MEDIUM,
                f"GPU {d.id} memory near capacity: peak reserved {d.peak_reserved_bytes / gib:.1f} GiB of "
                f"{total / gib:.1f} GiB ({share:.0%}), peak allocated {max(d.peak_allocated_bytes, 0) / gib:.1f} GiB",
                None,
                1,
                0.0,
                0.0,
                advice.MEMORY_NEAR_CAPACITY,
            )
        )
    return out


# ----- autoregressive decode ---------------------------------------------------------------------------

_DECODE_MIN_STEPS = 4
_DECODE_MAX_STEP_US = 200_000.0  # decode steps are short: a token every few ms, at most 0.2 s
_DECODE_SIMILAR = 0.8  # share of the steps within [0.5, 2] x the median step


def autoregressive_readback(a: Evidence) -> list[Finding]:
    """An autoregressive decode loop reading each step's result back: short steps of similar duration, each
    with one ``scalar_read`` / ``to_host`` sync at the same call site, after which the step launches nothing
    (the next step's launches come only after the sync returns) and the device idles (bubble > 0).

    Unlike ``false_sync_scalar_read`` (which says: keep the value on the device and read it rarely), the
    token is needed every step here; what is lost is the device idle while the host post-processes it. Cost
    and saving: the sum of the bubbles after those syncs (what overlapping the host's post-processing with
    the next step can win back; the wait itself is not saved, as the next token cannot be known early)."""
    g = a.graph
    n = len(a.steps)
    if g is None or n < _DECODE_MIN_STEPS:
        return []
    durations = [s.dur_us for s in a.steps]
    median = statistics.median(durations)
    similar = sum(1 for d in durations if 0.5 * median <= d <= 2.0 * median)
    if median > _DECODE_MAX_STEP_US or similar < _DECODE_SIMILAR * n:
        return []
    issued = np.sort(g.issued())
    groups: dict[object, list[Sync]] = {}
    for s in a.syncs:
        if s.kind in (SyncKind.SCALAR_READ, SyncKind.TO_HOST) and s.step >= 0:
            groups.setdefault((sync_site_key(s), s.kind), []).append(s)
    out = []
    for syncs in groups.values():
        steps = [s.step for s in syncs]
        if len(set(steps)) != len(steps) or len(steps) < max(_DECODE_MIN_STEPS - 1, n - 1):
            continue  # not exactly one readback per step in (nearly) every step
        last = [s for s in syncs if _last_in_step(a, g.call_end[list(s.calls)].max(), s.step, issued)]
        idle = [s for s in syncs if s.bubble_us > 0]
        if len(last) < len(syncs) - 1 or len(idle) < len(syncs) / 2:
            continue
        bubble = sum(s.bubble_us for s in syncs)
        first = syncs[0]
        where = sync_where(first)
        out.append(
            Finding(
                "autoregressive_readback",
                severity(bubble, a.window.dur_us),
                f"decode loop reads every token back{where}: {len(syncs)} of {n} steps, the GPU idles "
                f"{duration_text(bubble / len(syncs))} after each while the host post-processes (overlappable; the "
                "wait for the token itself is not)",
                first.call_site,
                len(syncs),
                bubble,
                bubble,
                advice.AUTOREGRESSIVE_READBACK,
                first.op or first.api,
            )
        )
    return out


def _last_in_step(a: Evidence, end: float, step: int, issued: np.ndarray) -> bool:
    """Nothing is issued to the device after ``end`` until the step ends (the next step's launches come
    after the readback returned)."""
    stop = a.model.steps[step].end_us
    k = int(np.searchsorted(issued, end, side="right"))
    return k >= len(issued) or bool(issued[k] >= stop)
