"""Findings that come from what the program did rather than from device activity: would-be syncs on a
CPU-only run, and input advice that knows the program's DataLoader.

A CPU-only run cannot show a sync, but the collector's sidecar saw each sync-prone call and whether its
tensor would live on the accelerator (``on_device``, from ``stallscope.collector.origin``). A site is reported when
its tensor would be on the device and it is called inside the profiled steps in most of them (a call
outside the steps, at setup or after the loop, is never a loop finding). The advice follows what the
code is: a read made inside a library the user's line calls names that call (torch.distributions'
argument checks, an optimizer's own reads, any other library); per-token scalar reads in a loop that
does not train (no optimizer, no backward pass: a decode loop) get decode advice; a result read back
once per step of such a loop is needed (low severity); the rest, training advice.
"""

from __future__ import annotations

import numpy as np

from stallscope.analyzer.evidence import Evidence
from stallscope.analyzer.findings import advice
from stallscope.analyzer.findings.base import Finding, Severity
from stallscope.analyzer.passes.syncs import SyncKind

_OP_KIND = (  # first match wins: "getitem" must not read as "item"
    (("nonzero", "masked_select", "getitem", "setitem", "unique", "repeat_interleave", "where", "bincount"),
     SyncKind.DATA_DEPENDENT),
    (("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "equal", "allclose", "__format__",
      "__repr__"), SyncKind.SCALAR_READ),
    (("synchronize",), SyncKind.BLANKET),
    (("cpu", "numpy", "to", "copy_"), SyncKind.TO_HOST),
)  # fmt: skip

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


def _in_steps(a: Evidence, times: np.ndarray) -> np.ndarray:
    """Which call times fall inside a profiled step (inside the window when there are no steps)."""
    if not a.steps:
        return (times >= a.window.start_us) & (times <= a.window.end_us)
    inside = np.zeros(len(times), dtype=bool)
    for s in a.steps:
        inside |= (times >= s.start_us) & (times <= s.start_us + s.dur_us)
    return inside


def _training(a: Evidence) -> bool:
    """Whether the profiled loop trains: its steps come from an optimizer, or the trace holds a backward
    pass (a loop that updates its parameters by hand, with no optimizer, still calls ``backward``)."""
    if a.sidecar is not None and a.sidecar.run.get("step_source") in ("optimizer", "backward"):
        return True
    return any(s.startswith("autograd::engine::evaluate_function") for s in a.model.strings)


def _decode_loop(a: Evidence, kind: SyncKind, op: str, per_step: float, training: bool) -> bool:
    """Per-token reads deciding when to stop: scalar reads in a loop that does not train (no optimizer,
    no backward pass), several per step, or one per step of a loop whose steps are marked by hand (or
    found from forward or generate calls)."""
    if kind != SyncKind.SCALAR_READ or a.sidecar is None or training:
        return False
    source = a.sidecar.run.get("step_source")
    return per_step >= 4 or (
        source in ("explicit", "forward", "generate") and op.endswith(("item", "__bool__"))
    )


_READBACK_OPS = ("tolist", "cpu", "numpy")


def _output_readback(op: str, per_step: float, training: bool) -> bool:
    """The result read back once per step of a loop that does not train (a sample's tokens turned into
    text: ``y[0].tolist()`` after ``generate``): needed, not a sync to remove."""
    return not training and per_step <= 1.5 and op.rsplit(".", 1)[-1] in _READBACK_OPS


def _library_finding(
    op: str, kind: SyncKind, site: object, n: int, where: str, library: str, call: str
) -> tuple[str, str, str]:
    """(rule, title, advice) of a would-be sync made inside a library call of the user's line."""
    tag, named, text = advice.library_advice(library, call)
    title = (
        f"`{op}` inside {named}, called at {site}: {n}x {where}; on a GPU it would block the host "
        f"({kind.value})"
    )
    return f"would_sync_{tag}", title, text


def would_sync_on_gpu(a: Evidence) -> list[Finding]:
    """On a CPU-only run: each sync-prone site whose tensor would be on the accelerator, called in the
    profiled steps (in at least half of them), with the advice it would need on a GPU (no cost can be
    measured). Without steps, a site needs two calls in the window."""
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
    training = _training(a)
    out = []
    for i, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        if n < needed:
            continue
        op, site = side.ops[i], side.sites[i]
        kind = op_kind(op)
        per_step = n / max(len(a.steps), 1)
        library, call = side.site_library(i)
        severity = Severity.MEDIUM
        if library and call:
            rule, title, text = _library_finding(op, kind, site, n, where, library, call)
        elif _decode_loop(a, kind, op, per_step, training):
            rule, text = "would_sync_decode", advice.DECODE
            title = f"decode loop reads each token back: `{op}` at {site}, {n}x {where}; on a GPU each waits"
        elif _output_readback(op, per_step, training):
            rule, text, severity = "would_sync_output_readback", advice.OUTPUT_READBACK, Severity.LOW
            title = (
                f"the result is read back once per step: `{op}` at {site}, {n}x {where}; on a GPU each waits"
            )
        else:
            rule = f"would_sync_{kind.value}"
            text = advice.scalar_read(op, per_step) if kind == SyncKind.SCALAR_READ else advice.SYNC[kind]
            title = f"`{op}` at {site}: {n}x {where}; on a GPU it would block the host ({kind.value})"
        out.append(Finding(rule, severity, title, site, n, 0.0, 0.0, text))
    return out
