"""Ready-made traces (DESIGN.md's worked example and the stalls the analyzer must find) and their
simulated answers in the shape of the analyzer's output. They feed ``sample_traces/`` and golden tests."""

from __future__ import annotations

from collections.abc import Callable

from synth.simulation import GapTruth, JsonDict, SyncTruth
from synth.trace import (
    DATALOADER_SPAN,
    DropWaits,
    PipelineFigures,
    RuntimeCosts,
    SynthTrace,
    UserFrame,
    WhatIfKnobs,
    _as_written,
)

__all__ = [
    "DATALOADER_SPAN",
    "DropWaits",
    "PipelineFigures",
    "RuntimeCosts",
    "SynthTrace",
    "UserFrame",
    "WhatIfKnobs",
    "clean_pipeline",
    "copy_on_compute_stream",
    "ground_truth",
    "input_bound_loop",
    "item_in_loop",
    "launch_bound_loop",
    "multistream_overlap",
    "pageable_copy_loop",
    "pinned_readback_with_event_sync",
    "pinned_readback_without_sync",
    "serialized_streams",
    "side_stream_copies",
    "whatif_table",
    "worked_example",
]


# ----- ground truth as JSON ----------------------------------------------------------------------


def ground_truth(sc: SynthTrace) -> JsonDict:
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
            "dur_us": _as_written(hi - lo),
            "basis": "steps",
        },
        "makespan_us": _as_written(sc.makespan_us),
        "wall_us": _as_written(sc.wall_us),
        "device": {
            "busy_us": _as_written(busy),
            "idle_us": _as_written(sc.window_us - busy),
            "utilization": round(busy / sc.window_us, 4) if sc.window_us else 0.0,
        },
        "steps": [
            {
                "name": st.name,
                "start_us": sc.abs_us(st.start_us),
                "dur_us": _as_written(st.dur_us),
                "device_busy_us": _as_written(sc.step_busy_us(st)),
                "device_idle_us": _as_written(st.dur_us - sc.step_busy_us(st)),
                "host_sync_wait_us": _as_written(st.host_sync_wait_us),
                "host_prep_us": _as_written(st.host_prep_us),
                "launched_device_us": _as_written(st.launched_device_us),
            }
            for st in sc.steps
        ],
        "sync_count": len(syncs),
        "avoidable_sync_count": sum(s.avoidable for s in syncs),
        "host_sync_wait_us": _as_written(sum(s.wait_us for s in syncs if _inside(s, lo, hi))),
        "syncs": [_sync_json(sc, s, gaps) for s in syncs],
        "gaps": [
            {
                "start_us": sc.abs_us(g.start_us),
                "end_us": sc.abs_us(g.end_us),
                "dur_us": _as_written(g.end_us - g.start_us),
                "cause": g.cause,
                "sync_index": g.sync_index,
            }
            for g in gaps
        ],
        "critical_path": {
            "length_us": _as_written(cp.length_us),
            "breakdown_us": {k: _as_written(v) for k, v in cp.breakdown_us.items()},
            "bottleneck": max(cp.breakdown_us, key=lambda k: cp.breakdown_us[k]),
        },
        "pipeline": None
        if pipe is None
        else {
            "host_prep_us": _as_written(pipe.host_prep_us),
            "device_us": _as_written(pipe.device_us),
            "batches": pipe.batches,
            "serial_us": _as_written(pipe.serial_us),
            "pipelined_us": _as_written(pipe.pipelined_us),
            "bottleneck": pipe.bottleneck,
        },
        "event_counts": dict(sorted(counts.items())),
    }


def _inside(s: SyncTruth, lo: float, hi: float) -> bool:
    return lo <= s.start_us < hi


def _sync_json(sc: SynthTrace, s: SyncTruth, gaps: list[GapTruth]) -> JsonDict:
    return {
        "index": s.index,
        "kind": s.kind.value,
        "api": s.api,
        "op": s.op,
        "start_us": sc.abs_us(s.start_us),
        "wait_us": _as_written(s.wait_us),
        "blocked_us": _as_written(s.blocked_us),
        "bubble_us": _as_written(sum(g.end_us - g.start_us for g in gaps if g.sync_index == s.index)),
        "calls": [
            {"api": c.api, "correlation": c.correlation, "dur_us": _as_written(c.end_us - c.start_us)}
            for c in s.calls
        ],
        "avoidable": s.avoidable,
        "reason": list(s.reasons),
        "call_site": None if s.call_site is None else {**vars(s.call_site)},
    }


#: What-if scenarios (DESIGN.md section 4) as re-simulation knobs.
WHATIFS: dict[str, WhatIfKnobs] = {
    "no_avoidable_syncs": WhatIfKnobs(drop_waits=DropWaits.AVOIDABLE),
    "no_syncs": WhatIfKnobs(drop_waits=DropWaits.ALL),
    "device_2x": WhatIfKnobs(device_scale=0.5),
    "host_2x": WhatIfKnobs(host_scale=0.5),
    "input_overlapped": WhatIfKnobs(input_scale=0.0),
}


def whatif_table(build: Callable[[WhatIfKnobs], SynthTrace]) -> list[JsonDict]:
    """Re-run a trace script under each what-if and report its wall time (``SynthTrace.wall_us``)."""
    base = build(WhatIfKnobs()).wall_us
    out = []
    for name, knobs in WHATIFS.items():
        wall = build(knobs).wall_us
        out.append(
            {"scenario": name, "predicted_wall_us": _as_written(wall), "saving_us": _as_written(base - wall)}
        )
    return out


# ----- ready-made traces -------------------------------------------------------------------------

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
    whatif: WhatIfKnobs | None = None,
) -> SynthTrace:
    """DESIGN.md's two-stage example: host prep P ("prep" annotation), then kernels totalling G.

    Serial: every batch ends in ``torch.cuda.synchronize()`` (avoidable: blanket, repeated), so the run takes
    about n(P+G). Pipelined: no sync in the loop, one final synchronize in the last step, so the host preps
    batch i+1 while the device runs batch i: about P + G + (n-1)max(P, G). One ProfilerStep per batch.
    """
    kind = "pipelined" if pipelined else "serial"
    bound = "_hostbound" if prep_ms > gpu_ms else ""
    sc = SynthTrace(f"worked_example_{kind}{bound}", whatif=whatif)
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
    whatif: WhatIfKnobs | None = None,
) -> SynthTrace:
    """Many tiny kernels, each behind an ``aten::add`` whose host time (``op_self_us`` + launch + op
    overhead, 32 µs by default) far exceeds the kernel's: the device idles between kernels; host-bound.
    One final sync."""
    sc = SynthTrace("launch_bound", whatif=whatif)
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
    whatif: WhatIfKnobs | None = None,
) -> SynthTrace:
    """A training loop calling ``loss.item()`` every step inside ``train.py(42): train_step``.

    Each step: 3 forward kernels (``fwd_us`` each), ``loss.item()`` (scalar_read sync, avoidable: repeated;
    call site train.py:42 train_step), ``log_us`` of host logging, 3 backward kernels (``bwd_us`` each).
    The last step ends with ``torch.cuda.synchronize()`` (not avoidable).
    """
    sc = SynthTrace("item_in_loop", whatif=whatif)
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
    steps: int = 4, copy_us: float = 250.0, kernel_us: float = 500.0, *, whatif: WhatIfKnobs | None = None
) -> SynthTrace:
    """``x.to("cuda", non_blocking=True)`` from pageable memory at the top of every step.

    The copy waits behind the previous step's kernels on the same stream and the call blocks until it ends:
    a sync in disguise (pageable_copy, avoidable: pageable_copy, repeated). Then 3 kernels of ``kernel_us``.
    """
    sc = SynthTrace("pageable_copy_loop", whatif=whatif)
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


def input_bound_loop(
    steps: int = 4,
    load_us: float = 3000.0,
    copy_us: float = 100.0,
    kernel_us: float = 300.0,
    *,
    whatif: WhatIfKnobs | None = None,
) -> SynthTrace:
    """Slow single-process data loading every step while the device waits; pinned non_blocking HtoD, then 3
    kernels. No sync in the loop, one final synchronize. Input-bound."""
    sc = SynthTrace("input_bound", whatif=whatif)
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
    steps: int = 4, copy_us: float = 400.0, kernel_us: float = 300.0, *, whatif: WhatIfKnobs | None = None
) -> SynthTrace:
    """Compute on stream 7, prefetch copies on stream 20: batch i+1's HtoD overlaps batch i's kernels.

    Step i: ``stream 7 waits on event(copy i)`` (cudaStreamWaitEvent), 3 kernels on 7, then copy i+1 on 20 and
    record its event. The last step records an event on 7 and waits for it (cudaEventSynchronize, not
    avoidable). Copy 0 is issued in step 0 before its wait.
    """
    sc = SynthTrace("multistream_overlap", whatif=whatif)
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
    whatif: WhatIfKnobs | None = None,
) -> SynthTrace:
    """A well-pipelined loop: the host queues each step's kernels well ahead of the device, no syncs in the
    loop, one final synchronize in the last step. Device-bound; zero avoidable syncs."""
    sc = SynthTrace("clean_pipeline", whatif=whatif)
    with sc.py_frame("train.py", 10, "main"):
        for i in range(steps):
            with sc.step(), sc.py_frame("train.py", 30, "train_step"):
                for _ in range(kernels):
                    with sc.op("aten::linear", self_us=op_self_us):
                        sc.launch(GEMM, kernel_us)
                if i == steps - 1:
                    sc.synchronize()
    return sc


def copy_on_compute_stream(
    steps: int = 4,
    copy_us: float = 300.0,
    kernel_us: float = 400.0,
    kernels: int = 3,
    *,
    whatif: WhatIfKnobs | None = None,
) -> SynthTrace:
    """``x.to("cuda", non_blocking=True)`` from pinned memory on the compute stream (7) at the top of
    every step, then ``kernels`` kernels on 7: the copy of batch i+1 queues behind batch i's kernels, so
    copies and compute never overlap (``copy_compute_serialized``). The host runs ahead (no sync in the
    loop, one final synchronize): device-bound, with the copies on the critical path. Call site
    train.py:30 train_step."""
    sc = SynthTrace("copy_on_compute_stream", whatif=whatif)
    with sc.py_frame("train.py", 10, "main"):
        for i in range(steps):
            with sc.step(), sc.py_frame("train.py", 30, "train_step"):
                sc.to_device(8 << 20, copy_us, pinned=True, non_blocking=True, stream=7)
                for _ in range(kernels):
                    with sc.op("aten::linear", self_us=10):
                        sc.launch(GEMM, kernel_us, stream=7)
                if i == steps - 1:
                    sc.synchronize()
    return sc


def side_stream_copies(
    steps: int = 4,
    copy_us: float = 300.0,
    kernel_us: float = 400.0,
    kernels: int = 3,
    *,
    whatif: WhatIfKnobs | None = None,
) -> SynthTrace:
    """The clean twin of ``copy_on_compute_stream``: the same pinned copies on a side stream (20), batch
    i+1 prefetched while batch i computes on 7. Each step's compute waits on the event recorded after its
    copy (cudaStreamWaitEvent); one final synchronize."""
    sc = SynthTrace("side_stream_copies", whatif=whatif)
    copy_stream, compute = 20, 7
    with sc.py_frame("train.py", 10, "main"):
        ready = None
        for i in range(steps):
            with sc.step(), sc.py_frame("train.py", 30, "train_step"):
                if ready is None:
                    sc.to_device(8 << 20, copy_us, pinned=True, non_blocking=True, stream=copy_stream)
                    ready = sc.event_record(copy_stream)
                sc.stream_wait_event(compute, ready)
                for _ in range(kernels):
                    with sc.op("aten::linear", self_us=10):
                        sc.launch(GEMM, kernel_us, stream=compute)
                if i + 1 < steps:  # prefetch the next batch on the side stream
                    sc.to_device(8 << 20, copy_us, pinned=True, non_blocking=True, stream=copy_stream)
                    ready = sc.event_record(copy_stream)
                else:
                    sc.synchronize()
    return sc


def serialized_streams(
    steps: int = 4,
    main_us: float = 400.0,
    side_us: float = 300.0,
    *,
    serialized: bool = True,
    whatif: WhatIfKnobs | None = None,
) -> SynthTrace:
    """Compute on stream 7 (3 kernels of ``main_us``) and independent side work on stream 20 (2 kernels of
    ``side_us``) every step. Serialized: stream 20 waits on an event recorded after the compute, and the
    next step's compute waits on an event recorded after the side work, so the two streams never run at
    the same time (``streams_never_overlapped``). Not serialized (the clean twin): no waits, the side work
    overlaps the compute. One final synchronize."""
    sc = SynthTrace("serialized_streams" if serialized else "overlapped_streams", whatif=whatif)
    main, side = 7, 20
    with sc.py_frame("train.py", 10, "main"):
        side_done = None
        for i in range(steps):
            with sc.step(), sc.py_frame("train.py", 30, "train_step"):
                if side_done is not None:
                    sc.stream_wait_event(main, side_done)
                for _ in range(3):
                    with sc.op("aten::linear", self_us=10):
                        sc.launch(GEMM, main_us, stream=main)
                if serialized:
                    sc.stream_wait_event(side, sc.event_record(main))
                for _ in range(2):
                    with sc.op("aten::add", self_us=10):
                        sc.launch(ADD, side_us, stream=side)
                if serialized:
                    side_done = sc.event_record(side)
                if i == steps - 1:
                    sc.synchronize()
    return sc


def _pinned_readback(name: str, steps: int, kernel_us: float, copy_us: float, *, synced: bool) -> SynthTrace:
    sc = SynthTrace(name)
    with sc.py_frame("infer.py", 10, "main"):
        for i in range(steps):
            with sc.step(), sc.py_frame("infer.py", 25, "predict"):
                for _ in range(3):
                    with sc.op("aten::linear", self_us=10):
                        sc.launch(GEMM, kernel_us)
                # out = logits.to("cpu", non_blocking=True): a pinned output, the call returns at once
                with sc.op("aten::to"), sc.op("aten::_to_copy"), sc.op("aten::copy_"):
                    sc.memcpy("DtoH", 1 << 20, copy_us, pinned=True, non_blocking=True)
                if synced:
                    sc.event_synchronize(sc.event_record())
                sc.host("postprocess", 50, cat="user_annotation")
                if i == steps - 1:
                    sc.synchronize()
    return sc


def pinned_readback_without_sync(
    steps: int = 4, kernel_us: float = 300.0, copy_us: float = 20.0
) -> SynthTrace:
    """``out = logits.to("cpu", non_blocking=True)`` into pinned memory, then host post-processing, every
    step, with nothing waiting for the copy: the host may read the buffer before the data lands
    (``unsynchronized_pinned_readback``; the last step's final synchronize does wait for it). Call site
    infer.py:25 predict."""
    return _pinned_readback("pinned_readback_without_sync", steps, kernel_us, copy_us, synced=False)


def pinned_readback_with_event_sync(
    steps: int = 4, kernel_us: float = 300.0, copy_us: float = 20.0
) -> SynthTrace:
    """The clean twin of ``pinned_readback_without_sync``: an event recorded after the copy and
    ``event.synchronize()`` before the host reads the buffer."""
    return _pinned_readback("pinned_readback_with_event_sync", steps, kernel_us, copy_us, synced=True)


# ----- device findings (stallscope.analyzer.findings.device): planted cases and their clean twins ------------------

SGEMM = "ampere_sgemm_128x64_tn"
SCONV = "void cudnn::detail::implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, true, false, true>"
ARGMAX = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, "
    "at::native::ArgMaxOps<c10::BFloat16>, unsigned int, long, 4> >"
)
EMPTY_CACHE_FRAME = "torch/cuda/memory.py(170): empty_cache"


def allocator_free_in_loop(
    steps: int = 5,
    kernels: int = 4,
    kernel_us: float = 300.0,
    every: int = 1,
    *,
    whatif: WhatIfKnobs | None = None,
) -> SynthTrace:
    """``torch.cuda.empty_cache()`` at ``train.py(30): train_step`` in every ``every``-th step after the
    first: its cudaFree waits for the whole device (an ``allocator`` sync), then the next step's kernels.
    With ``every=1`` the site syncs in most steps (avoidable: repeated, reported as
    ``false_sync_allocator``); with ``every=2`` of 6 steps only now and then (``allocator_sync``)."""
    sc = SynthTrace(f"allocator_free_in_loop_every{every}", whatif=whatif)
    with sc.py_frame("train.py", 10, "main"):
        for i in range(steps):
            with sc.step(), sc.py_frame("train.py", 30, "train_step"):
                for _ in range(kernels):
                    with sc.op("aten::linear", self_us=40):
                        sc.launch(GEMM, kernel_us)
                if i >= 1 and i % every == 0:
                    repeated = every == 1 and steps >= 3
                    with sc.py_call(EMPTY_CACHE_FRAME):
                        sc.cuda_free(avoidable=repeated, reasons=("repeated",) if repeated else ())
                if i == steps - 1:
                    sc.synchronize()
    return sc


def allocator_warmup(
    steps: int = 5, kernels: int = 4, kernel_us: float = 300.0, *, whatif: WhatIfKnobs | None = None
) -> SynthTrace:
    """Clean twin of ``allocator_free_in_loop``: the caching allocator grows its pool in the first step
    (cudaMalloc, and one cudaFree that waits), then reuses its blocks: no allocator sync in the steady
    state."""
    sc = SynthTrace("allocator_warmup", whatif=whatif)
    with sc.py_frame("train.py", 10, "main"):
        for i in range(steps):
            with sc.step(), sc.py_frame("train.py", 30, "train_step"):
                for _ in range(kernels):
                    if i == 0:
                        with sc.op("aten::empty"):
                            sc.cuda_malloc()
                    with sc.op("aten::linear", self_us=40):
                        sc.launch(GEMM, kernel_us)
                if i == 0:
                    sc.cuda_free()
                if i == steps - 1:
                    sc.synchronize()
    return sc


def gemm_loop(
    steps: int = 4,
    kernels: int = 4,
    kernel_us: float = 400.0,
    *,
    precision: str = "fp32",
    compute_major: int = 9,
    whatif: WhatIfKnobs | None = None,
) -> SynthTrace:
    """A device-bound loop of matmuls and a convolution on an H100 (``compute_major`` overrides its
    deviceProperties). ``precision="fp32"``: cuBLAS ``sgemm`` and cuDNN ``implicit_convolve_sgemm`` kernels
    (CUDA cores); ``"bf16"``: the sm90 tensor-core kernels."""
    fp32 = precision == "fp32"
    props = {} if compute_major == 9 else {"computeMajor": compute_major, "computeMinor": 0}
    sc = SynthTrace(f"{precision}_gemm_loop", device_properties=props, whatif=whatif)
    with sc.py_frame("train.py", 10, "main"):
        for i in range(steps):
            with sc.step(), sc.py_frame("train.py", 30, "train_step"):
                with sc.op("aten::conv2d", self_us=20):
                    sc.launch(SCONV if fp32 else GEMM, kernel_us)
                for _ in range(kernels):
                    with sc.op("aten::mm", self_us=20):
                        sc.launch(SGEMM if fp32 else GEMM, kernel_us)
                    with sc.op("aten::add", self_us=10):
                        sc.launch(ADD, kernel_us / 10)
                if i == steps - 1:
                    sc.synchronize()
    return sc


def memory_pressure(
    steps: int = 4,
    reserved_share: float = 0.95,
    kernel_us: float = 300.0,
    *,
    whatif: WhatIfKnobs | None = None,
) -> SynthTrace:
    """A loop recorded with ``profile_memory=True``: each step allocates activations until the caching
    allocator holds ``reserved_share`` of the H100's 80 GB, then frees them. ``[memory]`` instants carry the
    allocator's totals."""
    total = 85018279936
    sc = SynthTrace(f"memory_pressure_{round(reserved_share * 100)}", whatif=whatif)
    reserved = int(total * reserved_share) // (2 << 20) * (2 << 20)
    block = reserved // 8
    with sc.py_frame("train.py", 10, "main"):
        for i in range(steps):
            with sc.step(), sc.py_frame("train.py", 30, "train_step"):
                for k in range(4):
                    with sc.op("aten::empty"):
                        sc.memory(reserved, block * (k + 5), block)
                    with sc.op("aten::linear", self_us=20):
                        sc.launch(GEMM, kernel_us)
                for k in range(4):
                    sc.memory(reserved, block * (7 - k), -block)
                if i == steps - 1:
                    sc.synchronize()
    return sc


def decode_loop(
    tokens: int = 8,
    layers: int = 6,
    kernel_us: float = 40.0,
    post_us: float = 150.0,
    *,
    readback: bool = True,
    whatif: WhatIfKnobs | None = None,
) -> SynthTrace:
    """Autoregressive decoding, one ProfilerStep per token at ``generate.py(30): decode_step``: ``layers``
    kernels and an argmax, then (``readback``) ``next_token.item()`` and ``post_us`` of host
    post-processing (detokenize, stop check) while the device idles; the next step launches only after
    that. Without ``readback`` (the clean twin) tokens stay on the device and are read once at the end."""
    sc = SynthTrace(f"decode_loop_{'readback' if readback else 'on_device'}", whatif=whatif)
    with sc.py_frame("generate.py", 10, "generate"):
        for i in range(tokens):
            with sc.step(), sc.py_frame("generate.py", 30, "decode_step"):
                for _ in range(layers):
                    with sc.op("aten::linear", self_us=5):
                        sc.launch(GEMM, kernel_us)
                with sc.op("aten::argmax", self_us=5):
                    sc.launch(ARGMAX, 5.0)
                if readback:
                    with sc.py_call(ITEM_FRAME):
                        sc.item(avoidable=True, reasons=("repeated",))
                    sc.host("detokenize", post_us, cat="user_annotation")
                else:
                    with sc.op("aten::copy_", self_us=5):
                        sc.launch(ADD, 2.0)
                    if i == tokens - 1:
                        with sc.py_call(ITEM_FRAME):
                            sc.item()
    return sc
