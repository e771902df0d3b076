"""Vocabulary of Kineto traces: event categories and runtime calls, old and new spellings, CUDA and HIP.

Classification is done once per distinct string (names are interned), never once per event.
"""

from __future__ import annotations

import re
from enum import IntEnum

import numpy as np
import numpy.typing as npt


class EventKind(IntEnum):
    """What an event is, independent of how a torch version spelled its category."""

    OTHER = 0  # a category we do not know; kept, counted, not analysed
    CPU_OP = 1  # aten operators and other RecordFunction scopes (`cpu_op`, legacy `Operator`)
    ANNOTATION = 2  # user annotations: ProfilerStep#N, record_function(...), DataLoader scopes
    PYTHON = 3  # python_function frames (with_stack=True)
    RUNTIME = 4  # CUDA/HIP runtime API calls on a host thread
    DRIVER = 5  # CUDA driver API calls (cuLaunchKernel...) on a host thread
    KERNEL = 6  # device activity
    MEMCPY = 7  # device activity
    MEMSET = 8  # device activity
    SYNC = 9  # CUPTI `cuda_sync` record on the device side (not activity)
    GPU_ANNOTATION = 10  # user annotation projected onto a stream (not activity)
    INSTANT = 11  # instant events (memory records...)
    TRACE_SPAN = 12  # the profiler's own "PyTorch Profiler (0)" span
    OVERHEAD = 13  # profiler overhead records (activity buffer requests)


#: Kinds that live on device streams; everything else lives on a host thread.
DEVICE_KINDS = frozenset(
    {EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET, EventKind.SYNC, EventKind.GPU_ANNOTATION}
)
#: Kinds whose intervals make a device busy.
ACTIVITY_KINDS = frozenset({EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET})
#: Kinds a host thread issues calls from (runtime or driver API).
API_KINDS = frozenset({EventKind.RUNTIME, EventKind.DRIVER})

_CATEGORIES: dict[str, EventKind] = {
    "cpu_op": EventKind.CPU_OP,
    "operator": EventKind.CPU_OP,
    "user_annotation": EventKind.ANNOTATION,
    "python_function": EventKind.PYTHON,
    "python": EventKind.PYTHON,
    "cuda_runtime": EventKind.RUNTIME,
    "runtime": EventKind.RUNTIME,
    "xpu_runtime": EventKind.RUNTIME,
    "privateuse1_runtime": EventKind.RUNTIME,
    "cuda_driver": EventKind.DRIVER,
    "driver": EventKind.DRIVER,
    "privateuse1_driver": EventKind.DRIVER,
    "kernel": EventKind.KERNEL,
    "gpu_memcpy": EventKind.MEMCPY,
    "memcpy": EventKind.MEMCPY,
    "gpu_memset": EventKind.MEMSET,
    "memset": EventKind.MEMSET,
    "cuda_sync": EventKind.SYNC,
    "gpu_user_annotation": EventKind.GPU_ANNOTATION,
    "cpu_instant_event": EventKind.INSTANT,
    "trace": EventKind.TRACE_SPAN,
    "overhead": EventKind.OVERHEAD,
}

#: Flow categories linking a launch to its device activity (new and legacy spellings).
LAUNCH_FLOW_CATEGORIES = frozenset({"ac2g", "async_cpu_to_gpu"})
#: Other flow categories we know and ignore without counting them as unknown.
OTHER_FLOW_CATEGORIES = frozenset({"fwdbwd", "critical_path", "forward_backward"})


#: Category families of accelerators other than CUDA/HIP, by suffix: any runtime or driver API
#: (``mtia_runtime``, ``xpu_runtime``, ``glow_runtime``...) and device activity. A profiler range
#: (``cuda_profiler_range``: CUPTI range-profiler mode) is the device time of one kernel; command-processor
#: events (``mtia_ccp_events``) are the commands a device stream executed, told apart by their name.
_RUNTIME_SUFFIXES = ("_runtime",)
_DRIVER_SUFFIXES = ("_driver",)
_RANGE_SUFFIXES = ("_profiler_range",)
_COMMAND_SUFFIXES = ("_ccp_events",)


def event_kind(category: str) -> EventKind:
    """Map a category string (any spelling) to its kind; unknown categories are ``OTHER``. Command
    categories map to ``KERNEL`` here; ``command_kind`` refines them by event name."""
    lower = category.lower()
    known = _CATEGORIES.get(lower)
    if known is not None:
        return known
    if lower.endswith(_RUNTIME_SUFFIXES):
        return EventKind.RUNTIME
    if lower.endswith(_DRIVER_SUFFIXES):
        return EventKind.DRIVER
    if lower.endswith(_RANGE_SUFFIXES + _COMMAND_SUFFIXES):
        return EventKind.KERNEL
    return EventKind.OTHER


def is_range_category(category: str) -> bool:
    """CUPTI range-profiler ranges: one per kernel, laid out by the profiler rather than timed."""
    return category.lower().endswith(_RANGE_SUFFIXES)


def is_command_category(category: str) -> bool:
    """Device command streams whose event names say what each command did (``mtia_ccp_events``)."""
    return category.lower().endswith(_COMMAND_SUFFIXES)


_COMMAND_COPY = re.compile(r"dma|memcpy|copy|transfer", re.IGNORECASE)
_COMMAND_SET = re.compile(r"memset|fill", re.IGNORECASE)
_COMMAND_SYNC = re.compile(r"event|wait|sync|barrier|signal|fence", re.IGNORECASE)


def command_kind(name: str) -> EventKind:
    """Kind of a device command by its name: copies (``dma_request``), memsets, stream-side waits and
    event records (``event_wait``, ``event_record``: not activity, like CUPTI's ``cuda_sync`` records),
    and execution (``pe_exe``, ``merge``...: a kernel)."""
    if _COMMAND_SYNC.search(name):
        return EventKind.SYNC
    if _COMMAND_SET.search(name):
        return EventKind.MEMSET
    if _COMMAND_COPY.search(name):
        return EventKind.MEMCPY
    return EventKind.KERNEL


def is_known_category(category: str) -> bool:
    return event_kind(category) != EventKind.OTHER


class ApiKind(IntEnum):
    """What a runtime/driver call does, as far as who-waits-for-whom is concerned."""

    NONE = 0  # not an API call, or an API call that neither launches nor waits
    LAUNCH = 1  # kernel launch
    GRAPH_LAUNCH = 2  # CUDA graph launch (many kernels, one call)
    MEMCPY = 3  # synchronous or asynchronous copy (blocking is decided per call)
    MEMSET = 4
    SYNC_DEVICE = 5  # device-wide synchronize
    SYNC_STREAM = 6
    SYNC_EVENT = 7
    EVENT_RECORD = 8
    STREAM_WAIT = 9  # cudaStreamWaitEvent: device-side wait, host does not block
    MALLOC = 10
    FREE = 11
    QUERY = 12  # cudaEventQuery / cudaStreamQuery: polls, never blocks


_EXACT_API: dict[str, ApiKind] = {}
for _kind, _names in {
    ApiKind.SYNC_DEVICE: ("DeviceSynchronize", "CtxSynchronize", "ThreadSynchronize"),
    ApiKind.SYNC_STREAM: ("StreamSynchronize",),
    ApiKind.SYNC_EVENT: ("EventSynchronize",),
    ApiKind.EVENT_RECORD: ("EventRecord", "EventRecordWithFlags"),
    ApiKind.STREAM_WAIT: ("StreamWaitEvent",),
    ApiKind.GRAPH_LAUNCH: ("GraphLaunch",),
    ApiKind.QUERY: ("EventQuery", "StreamQuery"),
    ApiKind.MALLOC: ("Malloc", "MallocHost", "HostAlloc", "MallocManaged", "MemAlloc", "MallocAsync"),
    ApiKind.FREE: ("Free", "FreeHost", "MemFree", "FreeAsync"),
}.items():
    for _n in _names:
        for _prefix in ("cuda", "cu", "hip"):
            _EXACT_API[_prefix + _n] = _kind


def api_kind(name: str) -> ApiKind:
    """Classify a CUDA/HIP runtime or driver call by name (``cudaLaunchKernel``, ``cuLaunchKernelEx``,
    ``hipExtLaunchKernel``, ``cudaMemcpyAsync``, ``hipMemcpyWithStream``...)."""
    exact = _EXACT_API.get(name)
    if exact is not None:
        return exact
    if not name.startswith(("cu", "hip")):
        return _other_api(name)
    if "Graph" in name:
        return ApiKind.NONE
    if "Launch" in name and "Kernel" in name:
        return ApiKind.LAUNCH
    if "Memcpy" in name:
        return ApiKind.MEMCPY
    if "Memset" in name:
        return ApiKind.MEMSET
    return ApiKind.NONE


def _other_api(name: str) -> ApiKind:
    """Runtime calls of other accelerators, by the words in their name (MTIA ``synchronizeStream``,
    ``recordEvent``, ``enqueueCommand memcpyHtoDAsync``, ``enqueueCommand waitOnEvent``,
    ``runFunction - job_prep_and_submit_for_execution``; XPU ``urEnqueueKernelLaunch``, ``urEventWait``,
    ``urQueueFinish``). A wait on an event is the device's when it is enqueued (or on a stream), else the
    host's. Names that say none of these are ``NONE``."""
    lower = name.lower()
    if "synchroniz" in lower or "finish" in lower:
        if "stream" in lower or "queue" in lower:
            return ApiKind.SYNC_STREAM
        return ApiKind.SYNC_EVENT if "event" in lower else ApiKind.SYNC_DEVICE
    if "event" in lower and "record" in lower:
        return ApiKind.EVENT_RECORD
    if "event" in lower and "wait" in lower:
        queued = "enqueue" in lower or "stream" in lower
        return ApiKind.STREAM_WAIT if queued else ApiKind.SYNC_EVENT
    if "query" in lower:
        return ApiKind.QUERY
    if "memcpy" in lower:
        return ApiKind.MEMCPY
    if "memset" in lower:
        return ApiKind.MEMSET
    if "launch" in lower or "submit" in lower:
        return ApiKind.LAUNCH
    return ApiKind.NONE


def memcpy_is_async(name: str) -> bool:
    """``cudaMemcpyAsync`` may return before the copy ends; ``cudaMemcpy`` and ``hipMemcpyWithStream`` block."""
    return "Async" in name


#: Device-side sync record kinds (``args.cuda_sync_kind`` or the event name).
SYNC_RECORD_KINDS = ("Stream Sync", "Event Sync", "Context Sync", "Stream Wait Event")

STEP_PREFIX = "ProfilerStep#"


def is_annotation_name(name: str) -> bool:
    """A ``record_function`` scope that legacy traces file as an operator: ``ProfilerStep#5``,
    ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``, ``Optimizer.step#SGD.step``. It
    names a region of the program, never the operation that synchronised."""
    return name.startswith(STEP_PREFIX) or ("#" in name and "::" not in name)


#: the instant event torch.profiler(profile_memory=True) writes for each allocation and free
MEMORY_EVENT = "[memory]"


# ----- kernel names: matrix multiplies and the tensor cores ------------------------------------------

#: matrix-multiply and convolution kernels (cuBLAS, cuBLASLt, cuDNN, CUTLASS); not GEMV (memory-bound: tensor
#: cores do not help it) and not ``convert`` kernels
_GEMM_LIKE = re.compile(
    r"gemm|conv(?!ert)|cudnn|cutlass|xmma|hmma|wmma|gmma|matmul|nvjet|fprop|dgrad|wgrad", re.IGNORECASE
)
_GEMV = re.compile(r"gemv", re.IGNORECASE)
#: tensor-core kernels, broadly (a false match only silences the rule): cuBLAS/cuDNN instruction shapes
#: (h884, h1688, s1688, i8816...), the MMA families (hmma, wmma, xmma, gmma), CUTLASS ``tensorop``, the
#: sm90+/nvjet cuBLAS kernels, and any reduced precision in the name (tf32, bf16, f16, fp8, int8)
_TENSOR_CORE = re.compile(
    r"884|1688|16816|8816|16832|hmma|wmma|xmma|gmma|tensorop|tf32|bf16|f16|fp16|half|hcudnn|fp8|e4m3|e5m2|"
    r"int8|i8i8|_tc_|tensorcore|sm9\d_|sm1\d\d_|nvjet",
    re.IGNORECASE,
)
#: FP32 kernels that run on the CUDA cores: cuBLAS ``sgemm`` (volta_sgemm_128x64_nn, ampere_sgemm_...),
#: cuDNN ``*_convolve_sgemm`` and ``scudnn``, CUTLASS ``simt``
_FP32_GEMM = re.compile(r"sgemm|scudnn|simt", re.IGNORECASE)


def gemm_kind(name: str) -> str:
    """ "tensor_core", "fp32" or "" (not a GEMM-like kernel, or a GEMV) for one kernel name."""
    if not _GEMM_LIKE.search(name) or _GEMV.search(name):
        return ""
    if _TENSOR_CORE.search(name):
        return "tensor_core"
    return "fp32" if _FP32_GEMM.search(name) else ""


#: collective communication kernels: NCCL/RCCL/MSCCL (``ncclKernel_AllReduce_...``, ``ncclDevKernel_Generic``,
#: ``rcclKernel...``), and ROCm's and others' all-reduce/all-gather kernels named after the collective
_COLLECTIVE = re.compile(
    r"(?<![a-z])(?:nccl|rccl|msccl)|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|sendrecv",
    re.IGNORECASE,
)


def is_collective(name: str) -> bool:
    """A device activity that moves data between ranks (a collective or point-to-point kernel)."""
    return _COLLECTIVE.search(name) is not None


def collective_strings(strings: tuple[str, ...], names: npt.NDArray[np.int32]) -> npt.NDArray[np.bool_]:
    """Per name index in ``names`` (indices into ``strings``), whether it names a collective kernel: each
    distinct string is classified once."""
    out = np.zeros(len(names), dtype=np.bool_)
    if not len(names):
        return out
    ids, inverse = np.unique(names, return_inverse=True)
    flags = np.array([is_collective(strings[i]) if i >= 0 else False for i in ids.tolist()], dtype=np.bool_)
    return np.asarray(flags[inverse.ravel()])
