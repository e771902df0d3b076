"""Every advice text a finding gives, in one place: what to change in the program, per problem.

A finding's title says what happened and its numbers what it cost; its advice says what to do. The texts
name PyTorch APIs exactly (they are copied into code by users) and never promise a saving: savings come
from the what-if replays, in the finding's own fields.
"""

from __future__ import annotations

from typing import Any

from stallscope.analyzer.passes.critical import Kind
from stallscope.analyzer.passes.syncs import SyncKind

#: the caching allocator synchronising in the steady state (cudaFree/cudaMalloc)
ALLOCATOR = (
    "The caching allocator synchronised (cudaFree/cudaMalloc in the steady state): avoid "
    "`torch.cuda.empty_cache()` in the loop, keep tensor shapes stable, and consider "
    "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`."
)

#: a sync that could go, per kind (``false_sync_*`` on a GPU, ``would_sync_*`` on a CPU-only run)
SYNC: dict[SyncKind, str] = {
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
    SyncKind.ALLOCATOR: ALLOCATOR,
    SyncKind.RUNTIME: "The runtime's launch call returns only when its work is done: the host waits in it.",
    SyncKind.OTHER: "This call blocks the host until the device catches up; remove it from the loop if you can.",
}


DECODE = (
    "A decode loop needs each token on the host, so the wait itself stays, but the device need not idle "
    "through it: launch the next step before reading this one back (overlap the readback with the next "
    "launch), copy the token `non_blocking=True` into pinned memory and wait on an event, and check for "
    "EOS every k tokens instead of every token (finished sequences run a few extra tokens)."
)


OUTPUT_READBACK = (
    "Reading the result back once per call is needed (it is what the program prints or returns), so "
    "this wait stays: it is one wait per call, not one per token. Keep it there, outside the inner "
    "loop; to hide it, launch the next call before reading this one's result (copy it "
    "`non_blocking=True` into pinned memory and wait on an event just before the host uses it)."
)


def distributions_validate(call: str) -> str:
    """A read made by torch.distributions' argument checks (``validate_args``) inside ``call``
    (``torch.distributions.Categorical``, ``torch.distributions.Normal.log_prob``)."""
    parts = call.removeprefix("torch.distributions.").split(".")
    cls = parts[0] if parts[0][:1].isupper() else "Categorical"
    return (
        f"The read is torch.distributions checking its arguments (`validate_args`) inside `{call}`: "
        "building a distribution or calling `log_prob` with validation on tests its parameters or "
        "sample on the host, and on a GPU that waits for the device. Turn the checks off in the loop: "
        f"`{cls}(..., validate_args=False)`, or once for all with "
        "`torch.distributions.Distribution.set_default_validate_args(False)` (keep them on while "
        "debugging)."
    )


#: scalar reads by what they are, for the ops whose fix is not "read it less often"
_BRANCH_OPS = ("__bool__", "is_nonzero", "equal", "allclose", "__contains__")
_PRINT_OPS = ("__repr__", "__format__")


INNER_LOOP_READS = (
    "This value is read back many times per training step: an inner loop that needs it on the host "
    "each time (an action for the environment, `action.item()` after `dist.sample()`; a per-sample "
    "decision). Each read waits for the device: batch the inner loop (vectorised environments, one "
    "`.tolist()` for the whole batch instead of one `.item()` per element), run a small policy on the "
    "host, or keep the values on the device until the step needs them."
)


def scalar_read(op: str, per_step: float = 1.0) -> str:
    """The advice for a scalar read in a training loop, by its op: a Python branch on a tensor, a
    printed tensor, a value read many times a step (an inner loop), or a value read back once a step
    (``.item()``, ``float(t)``: accumulate, read every N steps)."""
    name = op.rsplit(".", 1)[-1]
    if per_step >= 4 and name not in _PRINT_OPS:
        return INNER_LOOP_READS
    if name in _BRANCH_OPS:
        return (
            "A Python `if` (or `assert`, `while`) on a tensor reads it back to decide: decide on the "
            "device instead (`torch.where(cond, a, b)`, masks), check every N steps, or take a "
            "debugging check out of the loop."
        )
    if name in _PRINT_OPS:
        return (
            "Printing or formatting a tensor copies it to the host: log every N steps, or keep the "
            "values on the device (`total += loss.detach()`) and print them after the loop."
        )
    return SYNC[SyncKind.SCALAR_READ]


def optimizer_internal(call: str) -> str:
    """A sync inside an optimizer's own ``step`` (``torch.optim.LBFGS`` reads its loss and gradient
    norms back to decide when to stop): the user cannot move the reads, only make fewer of them."""
    return (
        f"These reads are inside `{call}`, not in your code: the optimizer reads the loss and gradient "
        "norms back on the host to decide its line search and when to stop (LBFGS: `float(loss)` and "
        "the `tolerance_grad` / `tolerance_change` tests, every inner iteration), and on a GPU each one "
        "waits. They are part of the algorithm: make fewer of them (a smaller `max_iter` per `step`; "
        "the default `line_search_fn=None` reads less than `'strong_wolfe'`), or use an optimizer "
        "whose step reads nothing back (`torch.optim.Adam`, `torch.optim.SGD`). Nothing in the "
        "closure needs changing for them."
    )


def library_call(call: str, library: str) -> str:
    """A sync inside a library call the user's line made (no more specific advice for that library)."""
    return (
        f"The host read is made inside `{call}` ({library}), which your line calls: look for an option "
        "of that call that skips the check or conversion, call it less often (outside the loop, every "
        "N steps), or pass it host data where it only needs host data."
    )


def _package(module: str) -> str:
    """A module's package as advice names it: ``torch.optim`` for ``torch.optim.lbfgs``."""
    parts = module.split(".")
    return ".".join(parts[:2] if parts[0] == "torch" and len(parts) > 2 else parts[:1])


def _call_name(call: str, package: str) -> str:
    """``torch.optim.lbfgs.LBFGS.step`` -> ``torch.optim.LBFGS.step`` (the name users write)."""
    rest = call[len(package) + 1 :] if call.startswith(package + ".") else call
    parts = rest.split(".")
    # drop the private module under the package (``lbfgs``, ``categorical``) when a class follows it
    if len(parts) > 2 and parts[0].islower() and parts[1][:1].isupper():
        parts = parts[1:]
    name = ".".join(parts).removesuffix(".__init__")
    return f"{package}.{name}" if call.startswith(package + ".") else name


def library_advice(library: str, call: str) -> tuple[str, str, str]:
    """For a sync made inside a library call of the user's line (the sidecar's ``library``,
    ``library_call``): (what the rule calls it: ``distribution_checks``, ``in_optimizer`` or
    ``in_library``; the call as users write it, in backticks, with its package; the advice)."""
    package = _package(library)
    name = _call_name(call, package)
    named = f"`{name}` ({package})"
    if package == "torch.distributions":
        return "distribution_checks", named, distributions_validate(name)
    if package == "torch.optim":
        return "in_optimizer", named, optimizer_internal(name)
    return "in_library", named, library_call(name, package)


LAUNCH_BOUND = (
    "Cut per-kernel launch cost: capture the loop body in a CUDA graph (`torch.cuda.graphs` / "
    "`torch.compile(mode='reduce-overhead')`), fuse small ops (`torch.compile`), or batch more "
    "work per kernel."
)

COMMUNICATION = (
    "Overlap the collectives with compute: DDP already all-reduces gradient buckets during the backward "
    "pass (tune `bucket_cap_mb`, set `gradient_as_bucket_view=True`, keep `torch.cuda.synchronize()` and "
    "`.item()` out of the backward), FSDP prefetches (`forward_prefetch=True`, `backward_prefetch`); "
    "bucket many small collectives into fewer large ones; and find whom they wait for: one rank's trace "
    "cannot tell time spent waiting for a late rank from transfer time, so run `stallscope analyze FOLDER` "
    "on every rank's trace of the job: its stragglers say which rank made the others wait."
)

LOW_UTILIZATION = (
    "Fix the findings above first; then raise the work per step (batch size, fused kernels) so the "
    "device has more to do per host step."
)

MEMORY_NEAR_CAPACITY = (
    "Make room before it runs out: recompute activations (`torch.utils.checkpoint`), use a smaller "
    "batch with gradient accumulation, drop references to tensors you no longer need (losses kept "
    "for logging: `.detach()` or `.item()` them), and set "
    "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` to cut fragmentation (reserved far above "
    "allocated)."
)

AUTOREGRESSIVE_READBACK = (
    "Overlap the host's post-processing of token t with the device's step t+1: launch the next "
    "step before reading the token (keep sampled tokens on the device and feed them back as "
    "tensors), copy it `non_blocking=True` into a pinned buffer and wait on an event later, "
    "read several tokens back at once, or capture the step in a CUDA graph. Serving engines do "
    "this: TensorRT-LLM's overlap scheduler, SGLang's zero-overhead scheduler."
)

COPY_ON_SIDE_STREAM = (
    "Copy on a side stream so the copy overlaps with compute: from pinned memory "
    "(`DataLoader(pin_memory=True)` / `tensor.pin_memory()`), "
    "`with torch.cuda.stream(copy_stream): x = batch.to('cuda', non_blocking=True)` with "
    "`copy_stream = torch.cuda.Stream()`, then "
    "`torch.cuda.current_stream().wait_stream(copy_stream)` (or record/wait an event) and "
    "`x.record_stream(torch.cuda.current_stream())` before using it; prefetch the next batch "
    "while this one computes."
)

STREAMS_SERIALIZED = (
    "The streams are serialized: look for `torch.cuda.synchronize()`, `stream.synchronize()` or "
    "`wait_stream` between their work. Wait on an event recorded right after the work that is "
    "needed (`ev = torch.cuda.Event(); ev.record(side)` after the producer, "
    "`torch.cuda.current_stream().wait_event(ev)` just before the consumer), not on the whole "
    "stream, and issue independent work on the side stream before waiting."
)

UNSYNCHRONIZED_READBACK = (
    "A `non_blocking=True` copy to the host returns before the data has landed: reading the "
    "buffer now may see stale values. Record an event after the copy and wait on it before "
    "reading: `out = x.to('cpu', non_blocking=True); ev = torch.cuda.Event(); ev.record(); ...; "
    "ev.synchronize(); use(out)`."
)

#: a rank that arrived late at a collective (a job's ``straggler`` finding), by why it was late
STRAGGLER: dict[str, str] = {
    Kind.INPUT.value: (
        "Its data loading was slow: give the DataLoader more workers (`num_workers`), `pin_memory=True` and "
        "`prefetch_factor`, or move decoding/augmentation off the training process, so batches are ready."
    ),
    Kind.HOST.value: (
        "Its host did more work than the other ranks before the collective: balance the per-rank work "
        "(uneven shards, sequence lengths or embedding tables, rank-0-only logging or checkpointing)."
    ),
    Kind.SYNC.value: (
        "It blocked on the device before the collective: remove or defer the sync at the site named "
        "(`.item()`, `.cpu()`, `torch.cuda.synchronize()`), e.g. log every N steps on rank 0."
    ),
    Kind.DEVICE.value: (
        "Its GPU had more to compute than the others: balance the per-rank compute (shapes, sharding), "
        "or check that GPU for throttling."
    ),
    Kind.LAUNCH.value: (
        "Kernel launches held it back: fewer, larger kernels (fusion, `torch.compile`, CUDA graphs)."
    ),
    Kind.IDLE.value: "Its critical path waited on other streams: look at its own timeline before the collective.",
    "unknown": (
        "No kind of work in the interval explains it from this rank's trace. When it began the interval late, "
        "the delay came from before (the previous step, or its profiler started later): compare its "
        "timeline with a punctual rank's there."
    ),
}

_TENSOR_CORES_TF32 = (
    "Let matmuls use the tensor cores: `torch.backends.cuda.matmul.allow_tf32 = True` and "
    "`torch.backends.cudnn.allow_tf32 = True` (or `torch.set_float32_matmul_precision('high')`), "
    "or run the model under `torch.autocast('cuda', dtype=torch.bfloat16)`"
)
_TENSOR_CORES_FP16 = (
    "This GPU's tensor cores take FP16 (not TF32 or BF16): run the model under "
    "`torch.autocast('cuda', dtype=torch.float16)` with a `torch.cuda.amp.GradScaler`"
)
_TENSOR_CORES_TAIL = (
    "; for convolutions also use `model.to(memory_format=torch.channels_last)`. "
    "The saving is an estimate: check the accuracy and measure."
)


def tensor_cores(tf32: bool) -> str:
    """FP32 GEMMs on a tensor-core device: TF32/BF16 where the device has them, else FP16 autocast."""
    return (_TENSOR_CORES_TF32 if tf32 else _TENSOR_CORES_FP16) + _TENSOR_CORES_TAIL


def input_bound(run: dict[str, Any]) -> str:
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
