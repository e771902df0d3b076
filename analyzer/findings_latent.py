"""Findings that come from what the program did rather than from device activity: would-be syncs on a
CPU-only run, and input advice that knows the program's DataLoader.

A CPU-only run cannot show a sync, but the collector's sidecar saw each sync-prone call and whether its
tensor would live on the accelerator (``on_device``, from ``stallscope.collector.origin``). A site is reported when
its tensor would be on the device and it is called inside the profiled steps in most of them (a call
outside the steps, at setup or after the loop, is never a loop finding). Per-token scalar reads in a
loop without an optimizer (a decode loop) get decode advice, not training advice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from stallscope.analyzer.syncs import SyncKind

if TYPE_CHECKING:
    from stallscope.analyzer.analysis import Analysis
    from stallscope.analyzer.findings import Finding

_OP_KIND = (  # first match wins: "getitem" must not read as "item"
    (("nonzero", "masked_select", "getitem", "setitem", "unique", "repeat_interleave", "where", "bincount"),
     SyncKind.DATA_DEPENDENT),
    (("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "equal", "allclose", "__format__",
      "__repr__"), SyncKind.SCALAR_READ),
    (("synchronize",), SyncKind.BLANKET),
    (("cpu", "numpy", "to", "copy_"), SyncKind.TO_HOST),
)  # fmt: skip

DECODE_ADVICE = (
    "A decode loop needs each token on the host, so the wait itself stays, but the device need not idle "
    "through it: launch the next step before reading this one back (overlap the readback with the next "
    "launch), copy the token `non_blocking=True` into pinned memory and wait on an event, and check for "
    "EOS every k tokens instead of every token (finished sequences run a few extra tokens)."
)


WOULD_SYNC = "would_sync"  # the rules of this module start so (``would_sync_scalar_read``...)
UNMEASURED = "cost not measurable without a GPU"  # what the views say of such a finding's cost


def measured(rule: str) -> bool:
    """Whether a finding's cost was measured: a would-be sync of a CPU-only run has none (there was no
    GPU to wait for), and the views say so instead of "costs 0 us"."""
    return not rule.startswith(WOULD_SYNC)


def op_kind(op: str) -> SyncKind:
    """The sync kind a sync-prone call would have on a GPU, from its op name (the collector already
    decided from the call's arguments whether it would sync at all)."""
    name = op.rsplit(".", 1)[-1].lower()
    return next((k for names, k in _OP_KIND if any(w in name for w in names)), SyncKind.OTHER)


def _in_steps(a: Analysis, times: np.ndarray) -> np.ndarray:
    """Which call times fall inside a profiled step (inside the window when there are no steps)."""
    if not a.steps:
        return (times >= a.window.start_us) & (times <= a.window.end_us)
    inside = np.zeros(len(times), dtype=bool)
    for s in a.steps:
        inside |= (times >= s.start_us) & (times <= s.start_us + s.dur_us)
    return inside


def _decode_loop(a: Analysis, kind: SyncKind, op: str, per_step: float) -> bool:
    """Per-token reads deciding when to stop: scalar reads in a loop without an optimizer, several per
    step, or one per step of a loop whose steps are marked by hand (or found from forward or generate calls)."""
    if kind != SyncKind.SCALAR_READ or a.sidecar is None:
        return False
    source = a.sidecar.run.get("step_source")
    if source == "optimizer":
        return False
    return per_step >= 4 or (
        source in ("explicit", "forward", "generate") and op.endswith(("item", "__bool__"))
    )


def would_sync_on_gpu(a: Analysis) -> list[Finding]:
    """On a CPU-only run: each sync-prone site whose tensor would be on the accelerator, called in the
    profiled steps (in at least half of them), with the advice it would need on a GPU (no cost can be
    measured). Without steps, a site needs two calls in the window."""
    from stallscope.analyzer.findings import _ADVICE, Finding, Severity

    if a.main_device is not None or a.sidecar is None:
        return []
    side = a.sidecar
    counts: dict[int, int] = {}
    for times, index in side.by_thread.values():
        for i in index[_in_steps(a, times)].tolist():
            if side.site_on_device(i):
                counts[i] = counts.get(i, 0) + 1
    needed = max(1.0, len(a.steps) / 2) if a.steps else 2.0
    where = "in the profiled steps" if a.steps else "in the profiled run"
    out = []
    for i, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        if n < needed:
            continue
        op, site = side.ops[i], side.sites[i]
        kind = op_kind(op)
        decode = _decode_loop(a, kind, op, n / max(len(a.steps), 1))
        title = f"`{op}` at {site}: {n}x {where}; on a GPU it would block the host ({kind.value})"
        if decode:
            title = f"decode loop reads each token back: `{op}` at {site}, {n}x {where}; on a GPU each waits"
        out.append(
            Finding(
                "would_sync_decode" if decode else f"would_sync_{kind.value}",
                Severity.MEDIUM,
                title,
                site,
                n,
                0.0,
                0.0,
                DECODE_ADVICE if decode else _ADVICE[kind],
            )
        )
    return out


def input_advice(run: dict[str, Any]) -> str:
    """What to change in the program's data loading, from the DataLoaders the collector saw (sidecar
    ``run.dataloaders``); the generic advice when none was recorded."""
    loaders = [d for d in run.get("dataloaders") or [] if isinstance(d, dict)]
    workers = [int(d["num_workers"]) for d in loaders if isinstance(d.get("num_workers"), int)]
    if not workers or max(workers) == 0:
        return (
            "Load data in the background: `DataLoader(num_workers=N, pin_memory=True, prefetch_factor=2, "
            "persistent_workers=True)`, and copy batches with `non_blocking=True`."
        )
    n = max(workers)
    loader = next(d for d in loaders if d.get("num_workers") == n)
    prefetch = loader.get("prefetch_factor") or 2
    extra = [] if loader.get("pin_memory") else ["`pin_memory=True` (with `non_blocking=True` copies)"]
    if not loader.get("persistent_workers"):
        extra.append("`persistent_workers=True` (no worker restart each epoch)")
    also = f"; also {', '.join(extra)}" if extra else ""
    return (
        f"The DataLoader already has num_workers={n} and still cannot keep up: make each sample cheaper "
        f"(`__getitem__`: decode, augment and convert less per sample, or do it once ahead of time), add "
        f"workers (`num_workers={2 * n}` if the CPU has the cores), or deepen the queue "
        f"(`prefetch_factor={2 * prefetch}`){also}."
    )
