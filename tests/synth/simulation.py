"""Discrete-event model behind the synthetic Kineto trace builder (see ``synth.trace``).

A script of host work, launches, copies and syncs is simulated eagerly: every call computes its own times from
the host thread's clock and the device streams' state, so the model is deterministic and needs no event queue.
Host work is sequential per thread; each stream runs its activities in FIFO order; an activity starts at
``max(launch start + launch latency, previous activity end on the stream, awaited cross-stream event)``; a
blocking call returns at ``max(start + own cost, awaited device work end + return latency)``.

Every start remembers which constraint bound it, so the simulated critical path is known exactly
(``SynthTrace.critical_path``). Times are microseconds relative to the trace start; ``SynthTrace.base_ts_us`` is
added when the Kineto document is written.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

JsonDict = dict[str, Any]

#: CUPTI callback ids Kineto writes as ``args.cbid``.
CBID = {
    "cudaLaunchKernel": 211,
    "cudaMemcpyAsync": 41,
    "cudaMemsetAsync": 51,
    "cudaStreamSynchronize": 131,
    "cudaDeviceSynchronize": 165,
    "cudaEventRecord": 135,
    "cudaEventSynchronize": 137,
    "cudaStreamWaitEvent": 147,
    "cudaMalloc": 20,
    "cudaFree": 22,
}


class ExpectedSyncKind(str, enum.Enum):
    """What the analyzer should call a sync (DESIGN.md section 4, "Sync")."""

    SCALAR_READ = "scalar_read"
    TO_HOST = "to_host"
    DATA_DEPENDENT = "data_dependent"
    BLANKET = "blanket"
    STREAM = "stream"
    EVENT = "event"
    PAGEABLE_COPY = "pageable_copy"
    ALLOCATOR = "allocator"
    OTHER = "other"


class SegmentKind(str, enum.Enum):
    """Kinds of critical-path segment (DESIGN.md section 4, "Critical path")."""

    HOST = "host"  # host thread doing work (not data loading)
    INPUT = "input"  # host thread inside a data-loading span
    DEVICE = "device"  # a kernel / memcpy / memset running
    LAUNCH = "launch"  # from the runtime call's start to the device start it bound
    SYNC = "sync"  # from the awaited device work's end to the blocking call's return
    IDLE = "idle"  # nothing explains the time (never produced by this model)


class DropWaits(str, enum.Enum):
    """Which blocking calls stop blocking in a what-if re-simulation."""

    NONE = "none"
    AVOIDABLE = "avoidable"
    ALL = "all"


@dataclass(frozen=True)
class RuntimeCosts:
    """Fixed costs of the simulated runtime, in microseconds."""

    launch_cpu_us: float = 5.0  # host duration of a non-blocking runtime call (launch, async copy, memset)
    launch_latency_us: float = 5.0  # runtime call start -> earliest start of its device activity
    sync_cpu_us: float = 3.0  # own host cost of a sync call when nothing is pending
    sync_return_us: float = 2.0  # awaited device work end -> blocking call returns
    event_record_cpu_us: float = 2.0  # host duration of cudaEventRecord / cudaStreamWaitEvent
    op_enter_us: float = 1.0  # an op's start -> its first child
    op_exit_us: float = 1.0  # an op's last child -> its end


@dataclass(frozen=True)
class WhatIfKnobs:
    """Changes applied while simulating, used to compute what-if ground truth by re-running a script."""

    device_scale: float = 1.0  # multiplies every device duration
    host_scale: float = 1.0  # multiplies every host cost (not launch latency, not sync return)
    input_scale: float = 1.0  # multiplies data-loading durations (0 = loading moved off the thread)
    drop_waits: DropWaits = DropWaits.NONE


@dataclass(frozen=True)
class UserFrame:
    """Innermost user frame: ``line`` is the function's first line, as Kineto's python_function names say."""

    file: str
    line: int
    function: str


@dataclass(frozen=True)
class Activity:
    """One simulated device activity (kernel, memcpy or memset)."""

    index: int
    cat: str
    name: str
    stream: int
    start_us: float
    end_us: float
    correlation: int
    launch_api: str
    launch_start_us: float
    launch_tid: int
    step: int | None  # index into SynthTrace.steps of the step that launched it
    bound_by: str  # "launch", "stream" or "event": which constraint set start_us
    pred: int | None  # index of the activity that bound start_us ("stream"/"event")


@dataclass(frozen=True)
class SyncCall:
    """One blocking runtime call belonging to a sync."""

    api: str
    correlation: int
    start_us: float
    end_us: float
    blocked_us: float  # time beyond the call's own cost spent waiting for the device


@dataclass(frozen=True)
class SyncTruth:
    """One user-level sync (all blocking runtime calls under one user operation)."""

    index: int
    kind: ExpectedSyncKind
    api: str  # the call that blocked longest
    op: str | None  # the aten op above the calls, if any
    tid: int
    start_us: float
    end_us: float
    wait_us: float  # summed duration of the blocking runtime calls
    blocked_us: float  # summed time beyond the calls' own cost
    calls: tuple[SyncCall, ...]
    step: int | None
    avoidable: bool
    reasons: tuple[str, ...]
    call_site: UserFrame | None


@dataclass(frozen=True)
class StepTruth:
    """A ``ProfilerStep#N`` span and the simulated figures inside it."""

    index: int
    name: str
    start_us: float
    end_us: float
    host_sync_wait_us: float  # summed duration of blocking sync calls inside the step
    launched_device_us: float  # busy time (union) of device work launched in the step

    @property
    def dur_us(self) -> float:
        return self.end_us - self.start_us

    @property
    def host_prep_us(self) -> float:
        """Host time in the step not spent blocked in syncs (the pipeline model's P)."""
        return self.dur_us - self.host_sync_wait_us


@dataclass(frozen=True)
class PathSegment:
    """One piece of the simulated critical path, on a host thread or a stream."""

    kind: SegmentKind
    lane: str  # "host:<tid>" or "stream:<id>"
    name: str
    start_us: float
    end_us: float


@dataclass(frozen=True)
class CriticalPathTruth:
    """The simulated critical path of the window: its length, time per segment kind, and segments in order."""

    length_us: float
    breakdown_us: dict[str, float]
    segments: tuple[PathSegment, ...]


@dataclass(frozen=True)
class GapTruth:
    """A simulated device idle interval inside the window, with the cause DESIGN.md's rules give it."""

    start_us: float
    end_us: float
    cause: str  # sync | input | launch | dependency | host | unknown
    sync_index: int | None  # the sync charged with it (cause "sync")


@dataclass(frozen=True)
class CudaEvent:
    """Handle returned by ``SynthTrace.event_record``."""

    event_id: int
    stream: int
    correlation: int
    activity: int | None  # the last activity on the stream when recorded (None: stream was empty)


@dataclass
class _Wait:
    tid: int
    device_end_us: float
    return_us: float
    activity: int


@dataclass
class _Thread:
    tid: int
    clock: float = 0.0
    stack: list[JsonDict] = field(default_factory=list)  # open cpu_op / user_annotation / python_function
    py_ids: list[int] = field(default_factory=list)


@dataclass
class _SyncGroup:
    kind: ExpectedSyncKind
    op: str | None
    avoidable: bool
    reasons: tuple[str, ...]
    calls: list[SyncCall] = field(default_factory=list)


_USER_FRAME_EXCLUDES = ("torch/", "site-packages/", "threading.py", "multiprocessing/", "<")


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by ``intervals`` (overlaps counted once)."""
    total, cur_s, cur_e = 0.0, None, 0.0
    for s, e in sorted(intervals):
        if cur_s is None or s > cur_e:
            if cur_s is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_s is not None:
        total += cur_e - cur_s
    return total


class Simulation:
    """The simulation state and its raw event records; ``synth.trace.SynthTrace`` adds the script API."""

    def __init__(self, *, pid: int, tid: int, device: int, costs: RuntimeCosts, whatif: WhatIfKnobs) -> None:
        self.pid = pid
        self.main_tid = tid
        self.device = device
        self.costs = costs
        self.whatif = whatif
        self.threads: dict[int, _Thread] = {tid: _Thread(tid)}
        self.current = self.threads[tid]
        self.host_events: list[JsonDict] = []  # cpu_op, user_annotation, python_function (relative times)
        self.instant_events: list[JsonDict] = []  # [memory] instants (relative times)
        self.runtime_events: list[JsonDict] = []  # cuda_runtime with their flow tag
        self.device_events: list[JsonDict] = []  # kernel, gpu_memcpy, gpu_memset, cuda_sync
        self.activities: list[Activity] = []
        self.stream_tail: dict[int, int] = {}  # stream -> index of its last activity
        self.stream_floor: dict[int, int] = {}  # stream -> activity its next start must wait for
        self.streams: set[int] = set()
        self.waits: list[_Wait] = []
        self.input_spans: list[tuple[int, float, float]] = []
        self.syncs: list[SyncTruth] = []
        self.steps: list[StepTruth] = []
        self._open_step: int | None = None
        self._group: _SyncGroup | None = None
        self._ext = 0
        self._corr = 100
        self._py = 0
        self._ev_idx = 0
        self._event_id = 0

    # ----- ids and clocks -------------------------------------------------------------------------------

    def next_ext(self) -> int:
        self._ext += 1
        return self._ext

    def next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def next_py(self) -> int:
        self._py += 1
        return self._py

    def next_ev_idx(self) -> int:
        self._ev_idx += 1
        return self._ev_idx - 1

    def next_event_id(self) -> int:
        self._event_id += 1
        return self._event_id

    def host_cost(self, us: float) -> float:
        return us * self.whatif.host_scale

    def advance(self, us: float) -> None:
        self.current.clock += us

    def enclosing_ext(self) -> int | None:
        for span in reversed(self.current.stack):
            if span["cat"] in ("cpu_op", "user_annotation"):
                ext = span["args"]["External id"]
                assert isinstance(ext, int)
                return ext
        return None

    def enclosing_op(self) -> str | None:
        for span in reversed(self.current.stack):
            if span["cat"] == "cpu_op":
                name = span["name"]
                assert isinstance(name, str)
                return name
        return None

    def user_frame(self) -> UserFrame | None:
        for span in reversed(self.current.stack):
            if span["cat"] != "python_function":
                continue
            name = str(span["name"])
            if name.startswith(_USER_FRAME_EXCLUDES) or any(x in name for x in _USER_FRAME_EXCLUDES[:2]):
                continue
            head, _, func = name.partition("): ")
            file, _, line = head.rpartition("(")
            return UserFrame(file, int(line), func)
        return None

    # ----- host spans -------------------------------------------------------------------------------------

    @contextmanager
    def span(self, cat: str, name: str, args: JsonDict) -> Iterator[JsonDict]:
        """An X span on the current thread from the clock now to the clock when the block exits."""
        th = self.current
        ev: JsonDict = {"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": th.tid, "ts": th.clock}
        ev["dur"] = 0.0  # set when the block exits; keeps Kineto's key order
        ev["args"] = {**args, "Ev Idx": self.next_ev_idx()}
        self.host_events.append(ev)
        th.stack.append(ev)
        try:
            yield ev
        finally:
            th.stack.pop()
            ev["dur"] = th.clock - ev["ts"]

    # ----- device side ------------------------------------------------------------------------------------

    def enqueue(self, cat: str, name: str, stream: int, dur_us: float, api: str, args: JsonDict) -> Activity:
        """Put one activity on ``stream``, launched by a runtime call starting at the current clock."""
        t0 = self.current.clock
        corr = args["correlation"]
        candidates: list[tuple[float, int, str, int | None]] = [
            (t0 + self.costs.launch_latency_us, 0, "launch", None)
        ]
        tail = self.stream_tail.get(stream)
        if tail is not None:
            candidates.append((self.activities[tail].end_us, 2, "stream", tail))
        floor = self.stream_floor.get(stream)
        if floor is not None:
            candidates.append((self.activities[floor].end_us, 1, "event", floor))
        start, _, bound_by, pred = max(candidates, key=lambda c: (c[0], c[1]))
        act = Activity(
            index=len(self.activities),
            cat=cat,
            name=name,
            stream=stream,
            start_us=start,
            end_us=start + dur_us * self.whatif.device_scale,
            correlation=corr,
            launch_api=api,
            launch_start_us=t0,
            launch_tid=self.current.tid,
            step=self._open_step,
            bound_by=bound_by,
            pred=pred,
        )
        self.activities.append(act)
        self.stream_tail[stream] = act.index
        self.streams.add(stream)
        ev: JsonDict = {"ph": "X", "cat": cat, "name": name, "pid": self.device, "tid": stream}
        ev.update(ts=act.start_us, dur=act.end_us - act.start_us, args=args)
        self.device_events.append(ev)
        return act

    def runtime(self, api: str, start: float, end: float, corr: int, flow: str | None) -> None:
        """A cuda_runtime event; ``flow`` is "s" (flow start), "f" (Kineto's host-side finish) or None."""
        args: JsonDict = {}
        ext = self.enclosing_ext()
        if ext is not None:
            args["External id"] = ext
        args.update({"cbid": CBID[api], "correlation": corr})
        ev: JsonDict = {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": api,
            "pid": self.pid,
            "tid": self.current.tid,
        }
        ev.update(ts=start, dur=end - start, args=args, flow=flow)
        self.runtime_events.append(ev)

    def device_args(self, corr: int, stream: int) -> JsonDict:
        args: JsonDict = {}
        ext = self.enclosing_ext()
        if ext is not None:
            args["External id"] = ext
        args.update({"device": self.device, "context": 1, "stream": stream, "correlation": corr})
        return args

    def device_sync(self, name: str, tid: int, start: float, end: float, args: JsonDict) -> None:
        """A cuda_sync record inside the host call [start, end], as CUPTI reports it."""
        pad = min(1.0, (end - start) / 4)
        ev: JsonDict = {"ph": "X", "cat": "cuda_sync", "name": name, "pid": self.device, "tid": tid}
        ev.update(ts=start + pad, dur=end - start - 2 * pad, args={"cuda_sync_kind": name, **args})
        self.device_events.append(ev)

    # ----- blocking -------------------------------------------------------------------------------------

    @contextmanager
    def sync_group(
        self, kind: ExpectedSyncKind, op: str | None, avoidable: bool, reasons: tuple[str, ...]
    ) -> Iterator[None]:
        """Collect the blocking calls made inside the block into one user-level sync."""
        if self._group is not None:  # nested helper: the outer group owns the calls
            yield
            return
        group = _SyncGroup(kind, op, avoidable, reasons)
        self._group = group
        start = self.current.clock
        site = self.user_frame()
        try:
            yield
        finally:
            self._group = None
        if group.calls:
            longest = max(group.calls, key=lambda c: (c.end_us - c.start_us, -c.start_us))
            self.syncs.append(
                SyncTruth(
                    index=len(self.syncs),
                    kind=kind,
                    api=longest.api,
                    op=op,
                    tid=self.current.tid,
                    start_us=start,
                    end_us=self.current.clock,
                    wait_us=sum(c.end_us - c.start_us for c in group.calls),
                    blocked_us=sum(c.blocked_us for c in group.calls),
                    calls=tuple(group.calls),
                    step=self._open_step,
                    avoidable=avoidable,
                    reasons=reasons if avoidable else (),
                    call_site=site,
                )
            )

    def block(self, api: str, corr: int, own_cost_us: float, awaited: Activity | None) -> tuple[float, float]:
        """Advance the clock over a blocking call that waits for ``awaited``; returns (start, end)."""
        group = self._group
        t0 = self.current.clock
        own_end = t0 + self.host_cost(own_cost_us)
        dropped = self.whatif.drop_waits is DropWaits.ALL or (
            self.whatif.drop_waits is DropWaits.AVOIDABLE and group is not None and group.avoidable
        )
        t1 = own_end
        if awaited is not None and not dropped:
            device_ret = awaited.end_us + self.costs.sync_return_us
            if device_ret > own_end:
                t1 = device_ret
                self.waits.append(_Wait(self.current.tid, awaited.end_us, t1, awaited.index))
        self.current.clock = t1
        if group is not None:
            group.calls.append(SyncCall(api, corr, t0, t1, t1 - own_end))
        return t0, t1

    def last_on(self, streams: list[int]) -> Activity | None:
        acts = [self.activities[self.stream_tail[s]] for s in streams if s in self.stream_tail]
        acts += [self.activities[self.stream_floor[s]] for s in streams if s in self.stream_floor]
        return max(acts, key=lambda a: (a.end_us, a.index), default=None)

    # ----- steps ------------------------------------------------------------------------------------------

    def open_step(self) -> int:
        self._open_step = len(self.steps)
        return self._open_step

    def close_step(self, name: str, start: float) -> None:
        index = len(self.steps)
        end = self.current.clock
        wait = sum(s.wait_us for s in self.syncs if s.step == index)
        launched = union_length([(a.start_us, a.end_us) for a in self.activities if a.step == index])
        self.steps.append(StepTruth(index, name, start, end, wait, launched))
        self._open_step = None

    # ----- ground truth -----------------------------------------------------------------------------------

    def window(self) -> tuple[float, float]:
        """First to last profiled step if any, else first to last event (DESIGN.md section 4, "Window")."""
        if self.steps:
            return self.steps[0].start_us, self.steps[-1].end_us
        return self.extent()

    def extent(self) -> tuple[float, float]:
        """Earliest start and latest end of any host span, runtime call or device activity."""
        starts = [float(e["ts"]) for e in self.host_events + self.runtime_events]
        ends = [float(e["ts"]) + float(e["dur"]) for e in self.host_events + self.runtime_events]
        starts += [a.start_us for a in self.activities]
        ends += [a.end_us for a in self.activities]
        return (min(starts), max(ends)) if starts else (0.0, 0.0)

    def busy_intervals(self) -> list[tuple[float, float]]:
        """Merged intervals during which any stream of the device runs an activity."""
        merged: list[tuple[float, float]] = []
        for s, e in sorted((a.start_us, a.end_us) for a in self.activities):
            if merged and s <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], e))
            else:
                merged.append((s, e))
        return merged

    def busy_in(self, lo: float, hi: float) -> float:
        return sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in self.busy_intervals())

    def critical_path(self) -> CriticalPathTruth:
        """Walk back from the window end on the main thread, following the constraint that bound each start.

        Host time is split into ``input`` where it lies inside a data-loading span and ``host`` elsewhere;
        a blocking call that returned because the device finished contributes ``sync`` (return latency) and
        continues on the awaited activity; an activity bound by its launch contributes ``launch`` and
        continues on the launching thread. The segments tile the window exactly.
        """
        w0, w1 = self.window()
        segs: list[PathSegment] = []
        tid, t = self.main_tid, w1
        act: Activity | None = None
        while True:
            if act is None:
                waits = [w for w in self.waits if w.tid == tid and w.return_us <= t]
                wait = max(waits, key=lambda w: w.return_us, default=None)
                lo = max(wait.return_us if wait else w0, w0)
                segs.extend(self._host_segments(tid, lo, t))
                if wait is None or wait.return_us <= w0:
                    break
                segs.append(
                    PathSegment(SegmentKind.SYNC, f"host:{tid}", "sync return", wait.device_end_us, lo)
                )
                act = self.activities[wait.activity]
                continue
            lane = f"stream:{act.stream}"
            segs.append(PathSegment(SegmentKind.DEVICE, lane, act.name, max(act.start_us, w0), act.end_us))
            if act.start_us <= w0:
                break
            if act.bound_by == "launch":
                segs.append(
                    PathSegment(SegmentKind.LAUNCH, lane, act.launch_api, act.launch_start_us, act.start_us)
                )
                tid, t, act = act.launch_tid, act.launch_start_us, None
            else:
                assert act.pred is not None
                act = self.activities[act.pred]
        segs = [
            PathSegment(s.kind, s.lane, s.name, max(s.start_us, w0), min(s.end_us, w1))
            for s in reversed(segs)
            if min(s.end_us, w1) > max(s.start_us, w0)
        ]
        breakdown = {k.value: 0.0 for k in SegmentKind}
        for s in segs:
            breakdown[s.kind.value] += s.end_us - s.start_us
        return CriticalPathTruth(sum(breakdown.values()), breakdown, tuple(segs))

    def _host_segments(self, tid: int, lo: float, hi: float) -> list[PathSegment]:
        """Host time [lo, hi] on ``tid`` as host/input segments, latest first."""
        cuts = sorted(
            {lo, hi} | {x for t, s, e in self.input_spans if t == tid for x in (s, e) if lo < x < hi}
        )
        out = []
        for a, b in itertools.pairwise(cuts):
            inside = any(t == tid and s <= a and b <= e for t, s, e in self.input_spans)
            kind = SegmentKind.INPUT if inside else SegmentKind.HOST
            out.append(PathSegment(kind, f"host:{tid}", "data loading" if inside else "host", a, b))
        return out[::-1]

    def gaps(self, min_gap_us: float = 20.0) -> list[GapTruth]:
        """Idle intervals of at least ``min_gap_us`` inside the window, with their cause.

        A sync's wait is charged to the gaps that follow its return (before the next sync returns), up to its
        ``wait_us`` in total; otherwise the activity ending the gap decides: its launching thread inside data
        loading -> input; launch call started before the gap -> launch; bound by an event -> dependency;
        else host.
        """
        w0, w1 = self.window()
        idle, cursor = [], w0
        for s, e in [*self.busy_intervals(), (w1, w1)]:
            hi = min(s, w1)
            if hi > cursor and hi - cursor >= min_gap_us:
                idle.append((cursor, hi))
            cursor = max(cursor, e)
        budget = {sy.index: sy.wait_us for sy in self.syncs}
        out = []
        for lo, hi in idle:
            charged = [sy for sy in self.syncs if sy.end_us <= hi and budget[sy.index] > 0]
            sync = max(charged, key=lambda sy: sy.end_us, default=None)
            if sync is not None and not any(sync.end_us < o.end_us <= lo for o in self.syncs):
                budget[sync.index] -= hi - lo
                out.append(GapTruth(lo, hi, "sync", sync.index))
                continue
            ender = min((a for a in self.activities if a.start_us == hi), key=lambda a: a.index, default=None)
            cause = "unknown"
            if ender is not None:
                tid = ender.launch_tid
                if any(t == tid and s < hi and e > lo for t, s, e in self.input_spans):
                    cause = "input"
                elif ender.launch_start_us < lo:
                    cause = "launch"
                elif ender.bound_by == "event":
                    cause = "dependency"
                else:
                    cause = "host"
            out.append(GapTruth(lo, hi, cause, None))
        return out
