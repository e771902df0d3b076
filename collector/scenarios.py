"""Ready-made scenarios (DESIGN.md's worked example and the stalls the analyzer must find) and their
simulated answers in the shape of the analyzer's output. They feed ``sample_traces/`` and golden tests."""

from __future__ import annotations

from collections.abc import Callable

from collector.scenario import (
    DATALOADER_SPAN,
    CallSite,
    Costs,
    DropWaits,
    Pipeline,
    Scenario,
    WhatIf,
    _num,
)
from collector.scenario_model import Gap, JsonDict, SyncTruth

__all__ = [
    "DATALOADER_SPAN",
    "CallSite",
    "Costs",
    "DropWaits",
    "Pipeline",
    "Scenario",
    "WhatIf",
    "clean_pipeline",
    "ground_truth",
    "input_bound",
    "item_in_loop",
    "launch_bound_loop",
    "multistream_overlap",
    "pageable_copy_loop",
    "whatif_table",
    "worked_example",
]


# ----- ground truth as JSON ----------------------------------------------------------------------


def ground_truth(sc: Scenario) -> JsonDict:
    """The simulated answers for ``sc`` in the shape of the analyzer's output (absolute trace-clock µs)."""
    lo, hi = sc.window
    busy = sc.device_busy_us
    cp = sc.critical_path()
    pipe = sc.pipeline()
    syncs = sc.syncs
    gaps = sc.gaps()
    counts: dict[str, int] = {}
    for e in sc.to_document()["traceEvents"]:
        key = f"{e['ph']}:{e.get('cat', '')}"
        counts[key] = counts.get(key, 0) + 1
    return {
        "scenario": sc.name,
        "window": {
            "start_us": sc.abs_us(lo),
            "end_us": sc.abs_us(hi),
            "dur_us": _num(hi - lo),
            "basis": "steps",
        },
        "makespan_us": _num(sc.makespan_us),
        "wall_us": _num(sc.wall_us),
        "device": {
            "busy_us": _num(busy),
            "idle_us": _num(sc.window_us - busy),
            "utilization": round(busy / sc.window_us, 4) if sc.window_us else 0.0,
        },
        "steps": [
            {
                "name": st.name,
                "start_us": sc.abs_us(st.start_us),
                "dur_us": _num(st.dur_us),
                "device_busy_us": _num(sc.step_busy_us(st)),
                "device_idle_us": _num(st.dur_us - sc.step_busy_us(st)),
                "host_sync_wait_us": _num(st.host_sync_wait_us),
                "host_prep_us": _num(st.host_prep_us),
                "launched_device_us": _num(st.launched_device_us),
            }
            for st in sc.steps
        ],
        "sync_count": len(syncs),
        "avoidable_sync_count": sum(s.avoidable for s in syncs),
        "host_sync_wait_us": _num(sum(s.wait_us for s in syncs if _inside(s, lo, hi))),
        "syncs": [_sync_json(sc, s, gaps) for s in syncs],
        "gaps": [
            {
                "start_us": sc.abs_us(g.start_us),
                "end_us": sc.abs_us(g.end_us),
                "dur_us": _num(g.end_us - g.start_us),
                "cause": g.cause,
                "sync_index": g.sync_index,
            }
            for g in gaps
        ],
        "critical_path": {
            "length_us": _num(cp.length_us),
            "breakdown_us": {k: _num(v) for k, v in cp.breakdown_us.items()},
            "bottleneck": max(cp.breakdown_us, key=lambda k: cp.breakdown_us[k]),
        },
        "pipeline": None
        if pipe is None
        else {
            "host_prep_us": _num(pipe.host_prep_us),
            "device_us": _num(pipe.device_us),
            "batches": pipe.batches,
            "serial_us": _num(pipe.serial_us),
            "pipelined_us": _num(pipe.pipelined_us),
            "bottleneck": pipe.bottleneck,
        },
        "event_counts": dict(sorted(counts.items())),
    }


def _inside(s: SyncTruth, lo: float, hi: float) -> bool:
    return lo <= s.start_us < hi


def _sync_json(sc: Scenario, s: SyncTruth, gaps: list[Gap]) -> JsonDict:
    return {
        "index": s.index,
        "kind": s.kind.value,
        "api": s.api,
        "op": s.op,
        "start_us": sc.abs_us(s.start_us),
        "wait_us": _num(s.wait_us),
        "blocked_us": _num(s.blocked_us),
        "bubble_us": _num(sum(g.end_us - g.start_us for g in gaps if g.sync_index == s.index)),
        "calls": [
            {"api": c.api, "correlation": c.correlation, "dur_us": _num(c.end_us - c.start_us)}
            for c in s.calls
        ],
        "avoidable": s.avoidable,
        "reason": list(s.reasons),
        "call_site": None if s.call_site is None else {**vars(s.call_site)},
    }


#: What-if scenarios (DESIGN.md section 4) as re-simulation knobs.
WHATIFS: dict[str, WhatIf] = {
    "no_avoidable_syncs": WhatIf(drop_waits=DropWaits.AVOIDABLE),
    "no_syncs": WhatIf(drop_waits=DropWaits.ALL),
    "device_2x": WhatIf(device_scale=0.5),
    "host_2x": WhatIf(host_scale=0.5),
    "input_overlapped": WhatIf(input_scale=0.0),
}


def whatif_table(build: Callable[[WhatIf], Scenario]) -> list[JsonDict]:
    """Re-run a scenario script under each what-if and report its wall time (``Scenario.wall_us``)."""
    base = build(WhatIf()).wall_us
    out = []
    for name, knobs in WHATIFS.items():
        wall = build(knobs).wall_us
        out.append({"scenario": name, "predicted_wall_us": _num(wall), "saving_us": _num(base - wall)})
    return out


# ----- ready-made scenarios ----------------------------------------------------------------------

GEMM = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_kernel__5x_cublas"
)
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"
)
ITEM_FRAME = "<built-in method item of Tensor object at 0x7f3a2c1b5e40>"


def worked_example(
    prep_ms: float = 2.0,
    gpu_ms: float = 6.0,
    batches: int = 3,
    *,
    pipelined: bool,
    kernels_per_batch: int = 2,
    whatif: WhatIf | None = None,
) -> Scenario:
    """DESIGN.md's two-stage example: host prep P ("prep" annotation), then kernels totalling G.

    Serial: every batch ends in ``torch.cuda.synchronize()`` (avoidable: blanket, repeated), so the run takes
    about n(P+G). Pipelined: no sync in the loop, one final synchronize in the last step, so the host preps
    batch i+1 while the device runs batch i: about P + G + (n-1)max(P, G). One ProfilerStep per batch.
    """
    kind = "pipelined" if pipelined else "serial"
    bound = "_hostbound" if prep_ms > gpu_ms else ""
    sc = Scenario(f"worked_example_{kind}{bound}", whatif=whatif)
    with sc.py_frame("worked_example.py", 1, "<module>"), sc.py_frame("worked_example.py", 20, "run"):
        for b in range(batches):
            with sc.step(), sc.py_frame("worked_example.py", 8, "train_step"):
                sc.host("prep", prep_ms * 1000, cat="user_annotation")
                for _ in range(kernels_per_batch):
                    with sc.op("aten::mm"):
                        sc.launch(GEMM, gpu_ms * 1000 / kernels_per_batch)
                if not pipelined:
                    sc.synchronize(avoidable=True, reasons=("blanket", "repeated"))
                elif b == batches - 1:
                    sc.synchronize()
    return sc


def launch_bound_loop(
    steps: int = 4,
    kernels_per_step: int = 40,
    kernel_us: float = 3.0,
    op_self_us: float = 25.0,
    *,
    whatif: WhatIf | None = None,
) -> Scenario:
    """Many tiny kernels, each behind an ``aten::add`` whose host time (``op_self_us`` + launch + op
    overhead, 32 µs by default) far exceeds the kernel's: the device idles between kernels; host-bound.
    One final sync."""
    sc = Scenario("launch_bound", whatif=whatif)
    with sc.py_frame("launch_bound.py", 1, "<module>"):
        for i in range(steps):
            with sc.step(), sc.py_frame("launch_bound.py", 5, "step_fn"):
                for _ in range(kernels_per_step):
                    with sc.op("aten::add", self_us=op_self_us):
                        sc.launch(ADD, kernel_us)
                if i == steps - 1:
                    sc.synchronize()
    return sc


def item_in_loop(
    steps: int = 4,
    fwd_us: float = 400.0,
    bwd_us: float = 800.0,
    log_us: float = 200.0,
    *,
    whatif: WhatIf | None = None,
) -> Scenario:
    """A training loop calling ``loss.item()`` every step inside ``train.py(42): train_step``.

    Each step: 3 forward kernels (``fwd_us`` each), ``loss.item()`` (scalar_read sync, avoidable: repeated;
    call site train.py:42 train_step), ``log_us`` of host logging, 3 backward kernels (``bwd_us`` each).
    The last step ends with ``torch.cuda.synchronize()`` (not avoidable).
    """
    sc = Scenario("item_in_loop", whatif=whatif)
    with sc.py_frame("train.py", 10, "main"):
        for i in range(steps):
            with sc.step(), sc.py_frame("train.py", 42, "train_step"):
                with sc.py_frame("torch/nn/modules/module.py", 1743, "_call_impl"):
                    for _ in range(3):
                        with sc.op("aten::linear", self_us=150), sc.op("aten::addmm"):
                            sc.launch(GEMM, fwd_us)
                with sc.py_call(ITEM_FRAME):
                    sc.item(avoidable=True, reasons=("repeated",))
                sc.host("log_metrics", log_us, cat="user_annotation")
                for _ in range(3):
                    with (
                        sc.op("autograd::engine::evaluate_function: AddmmBackward0", self_us=150),
                        sc.op("aten::mm"),
                    ):
                        sc.launch(GEMM, bwd_us)
                if i == steps - 1:
                    sc.synchronize()
    return sc


def pageable_copy_loop(
    steps: int = 4, copy_us: float = 250.0, kernel_us: float = 500.0, *, whatif: WhatIf | None = None
) -> Scenario:
    """``x.to("cuda", non_blocking=True)`` from pageable memory at the top of every step.

    The copy waits behind the previous step's kernels on the same stream and the call blocks until it ends:
    a sync in disguise (pageable_copy, avoidable: pageable_copy, repeated). Then 3 kernels of ``kernel_us``.
    """
    sc = Scenario("pageable_copy_loop", whatif=whatif)
    with sc.py_frame("train.py", 10, "main"):
        for i in range(steps):
            with sc.step(), sc.py_frame("train.py", 30, "train_step"):
                sc.to_device(
                    4 << 20,
                    copy_us,
                    pinned=False,
                    non_blocking=True,
                    avoidable=True,
                    reasons=("pageable_copy", "repeated"),
                )
                for _ in range(3):
                    with sc.op("aten::conv2d", self_us=100):
                        sc.launch(GEMM, kernel_us)
                if i == steps - 1:
                    sc.synchronize()
    return sc


def input_bound(
    steps: int = 4,
    load_us: float = 3000.0,
    copy_us: float = 100.0,
    kernel_us: float = 300.0,
    *,
    whatif: WhatIf | None = None,
) -> Scenario:
    """Slow single-process data loading every step while the device waits; pinned non_blocking HtoD, then 3
    kernels. No sync in the loop, one final synchronize. Input-bound."""
    sc = Scenario("input_bound", whatif=whatif)
    with sc.py_frame("train.py", 10, "main"):
        for i in range(steps):
            with sc.step():
                with sc.py_frame("torch/utils/data/dataloader.py", 626, "__next__"):
                    sc.data_loading(load_us)
                with sc.py_frame("train.py", 30, "train_step"):
                    sc.to_device(8 << 20, copy_us, pinned=True, non_blocking=True)
                    for _ in range(3):
                        with sc.op("aten::linear", self_us=10):
                            sc.launch(GEMM, kernel_us)
                    if i == steps - 1:
                        sc.synchronize()
    return sc


def multistream_overlap(
    steps: int = 4, copy_us: float = 400.0, kernel_us: float = 300.0, *, whatif: WhatIf | None = None
) -> Scenario:
    """Compute on stream 7, prefetch copies on stream 20: batch i+1's HtoD overlaps batch i's kernels.

    Step i: ``stream 7 waits on event(copy i)`` (cudaStreamWaitEvent), 3 kernels on 7, then copy i+1 on 20 and
    record its event. The last step records an event on 7 and waits for it (cudaEventSynchronize, not
    avoidable). Copy 0 is issued in step 0 before its wait.
    """
    sc = Scenario("multistream_overlap", whatif=whatif)
    copy_stream, compute = 20, 7
    with sc.py_frame("train.py", 10, "main"):
        for i in range(steps):
            with sc.step(), sc.py_frame("train.py", 30, "train_step"):
                if i == 0:
                    with sc.op("aten::copy_"):
                        sc.memcpy("HtoD", 8 << 20, copy_us, pinned=True, stream=copy_stream)
                    ready = sc.event_record(copy_stream)
                sc.stream_wait_event(compute, ready)
                for _ in range(3):
                    with sc.op("aten::linear", self_us=10):
                        sc.launch(GEMM, kernel_us, stream=compute)
                if i + 1 < steps:
                    with sc.op("aten::copy_"):
                        sc.memcpy("HtoD", 8 << 20, copy_us, pinned=True, stream=copy_stream)
                    ready = sc.event_record(copy_stream)
                else:
                    sc.event_synchronize(sc.event_record(compute))
    return sc


def clean_pipeline(
    steps: int = 5,
    kernels: int = 5,
    kernel_us: float = 300.0,
    op_self_us: float = 40.0,
    *,
    whatif: WhatIf | None = None,
) -> Scenario:
    """A well-pipelined loop: the host queues each step's kernels well ahead of the device, no syncs in the
    loop, one final synchronize in the last step. Device-bound; zero avoidable syncs."""
    sc = Scenario("clean_pipeline", whatif=whatif)
    with sc.py_frame("train.py", 10, "main"):
        for i in range(steps):
            with sc.step(), sc.py_frame("train.py", 30, "train_step"):
                for _ in range(kernels):
                    with sc.op("aten::linear", self_us=op_self_us):
                        sc.launch(GEMM, kernel_us)
                if i == steps - 1:
                    sc.synchronize()
    return sc
