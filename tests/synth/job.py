"""Synthetic multi-rank jobs: one ``SynthTrace`` per rank, joined by collectives, with planted stragglers.

Each rank runs the same training step: data loading (``train.py:88``), host preparation (``train.py:95``),
forward kernels, more host work, backward kernels, then an all-reduce on its own stream (NCCL-shaped: a
``ncclDevKernel_AllReduce_...`` kernel under ``c10d::allreduce_`` > ``record_param_comms`` >
``nccl:all_reduce``, with ``Collective name``, ``Process Group Name``, ``In msg nelems`` and ``dtype``
args) that the next step's compute waits for, and ``loss.item()`` (``train.py:110``), so no host runs ahead
into the next step. A ``Plant`` makes one rank late before one collective:
``input`` (slower data loading), ``host`` (more host work before its forward) or ``sync`` (a
``torch.cuda.synchronize()`` at ``train.py:102`` that throws away the host's lead).

A collective ends when its last rank has arrived plus the transfer time, so a rank's kernel lasts its wait
plus the transfer. Arrivals depend on earlier collectives' ends, so the ranks are simulated again until the
durations settle (at most one round per collective). Each rank's clock can carry a planted offset.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

from synth.trace import SynthTrace

COMM_STREAM = 20
TRANSFER_US = 150.0
_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


@dataclass(frozen=True)
class Plant:
    """Make ``rank`` late before the collective of step ``step`` (0-based) by ``us`` of ``cause``."""

    rank: int
    step: int
    cause: str  # "input", "host" or "sync"
    us: float = 0.0  # input/host: the extra time; sync: unused (it costs the host work it un-overlaps)


@dataclass(frozen=True)
class Shape:
    """Per-step costs shared by every rank (µs)."""

    input_us: float = 200.0
    prep_us: float = 100.0
    fwd_kernels: tuple[float, ...] = (600.0, 600.0, 800.0)
    mid_host_us: float = 1500.0  # host work between forward and backward (overlaps the device)
    bwd_kernels: tuple[float, ...] = (900.0, 900.0, 400.0)
    nelems: int = 4_194_304


@dataclass(frozen=True)
class JobTruth:
    """What was simulated: per step, each rank's arrival at the collective (its own relative clock) and
    the files written."""

    arrivals: tuple[dict[int, float], ...]
    offsets_us: dict[int, int]
    files: tuple[Path, ...]

    def straggler(self, step: int) -> int:
        a = self.arrivals[step]
        return max(a, key=lambda r: (a[r], -r))

    def skew_us(self, step: int) -> float:
        a = self.arrivals[step]
        return max(a.values()) - min(a.values())


@dataclass
class _Rank:
    trace: SynthTrace
    collectives: list[int] = field(default_factory=list)  # correlation ids, one per step


def _rank(rank: int, world: int, steps: int, shape: Shape, plants: list[Plant], durs: list[float]) -> _Rank:
    sc = SynthTrace(f"job-rank{rank}", rank=rank, world_size=world, pid=1000 + rank, tid=1000 + rank)
    out = _Rank(sc)
    mine = {(p.step, p.cause): p.us for p in plants if p.rank == rank}
    for s in range(steps):
        with sc.step(), sc.py_frame("train.py", 80, "train"):
            with sc.py_frame("train.py", 88, "load_batch"):
                sc.untraced(2.0)  # Python before the call: the frame encloses what it calls
                sc.data_loading(shape.input_us + mine.get((s, "input"), 0.0))
            with sc.py_frame("train.py", 95, "prepare"):
                sc.untraced(2.0)
                sc.host("aten::index", shape.prep_us + mine.get((s, "host"), 0.0))
            with sc.op("aten::linear"):
                for k, us in enumerate(shape.fwd_kernels):
                    sc.launch(f"sm90_gemm_fwd_{k}", us)
            if (s, "sync") in mine:
                with sc.py_frame("train.py", 102, "log_loss"):
                    sc.untraced(2.0)
                    with sc.op("aten::log"):
                        sc.synchronize()
            sc.host("aten::zero_", shape.mid_host_us)
            with sc.op("autograd::engine::evaluate_function: MmBackward0"):
                for k, us in enumerate(shape.bwd_kernels):
                    sc.launch(f"sm90_gemm_bwd_{k}", us)
            out.collectives.append(_allreduce(sc, durs[s]))
            with sc.py_frame("train.py", 110, "report"):
                sc.untraced(2.0)
                sc.item()  # every rank reads its loss: the host keeps no lead from step to step
    return out


def _allreduce(sc: SynthTrace, dur_us: float) -> int:
    ready = sc.event_record(7)
    sc.stream_wait_event(COMM_STREAM, ready)
    with (
        sc.op("c10d::allreduce_"),
        sc.op("record_param_comms"),
        sc.op("nccl:all_reduce", cat="user_annotation"),
    ):
        corr = sc.launch(_KERNEL, dur_us, stream=COMM_STREAM)
    done = sc.event_record(COMM_STREAM)
    sc.stream_wait_event(7, done)
    return corr


def _arrivals(ranks: dict[int, _Rank]) -> list[dict[int, float]]:
    out: list[dict[int, float]] = []
    for r, rk in ranks.items():
        by_corr = {a.correlation: a.start_us for a in rk.trace.activities}
        for s, corr in enumerate(rk.collectives):
            if len(out) <= s:
                out.append({})
            out[s][r] = by_corr[corr]
    return out


def build_job(
    folder: Path,
    world: int,
    steps: int,
    plants: list[Plant] | None = None,
    offsets_us: dict[int, int] | None = None,
    shape: Shape | None = None,
) -> JobTruth:
    """Simulate the job and write ``rank<r>.pt.trace.json.gz`` per rank into ``folder``."""
    plants = plants or []
    shape = shape or Shape()
    offsets = {r: (offsets_us or {}).get(r, 0) for r in range(world)}
    durs = {r: [TRANSFER_US] * steps for r in range(world)}
    ranks: dict[int, _Rank] = {}
    for _ in range(steps + 2):
        ranks = {r: _rank(r, world, steps, shape, plants, durs[r]) for r in range(world)}
        arrivals = _arrivals(ranks)
        new = {r: [max(a.values()) - a[r] + TRANSFER_US for a in arrivals] for r in range(world)}
        if new == durs:
            break
        durs = new
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for r, rk in ranks.items():
        rk.trace.base_ts_us += offsets[r]  # the rank's clock runs that far ahead of rank 0's
        files.append(_write(rk, folder / f"rank{r}.pt.trace.json.gz", shape))
    return JobTruth(tuple(_arrivals(ranks)), offsets, tuple(files))


def _write(rk: _Rank, path: Path, shape: Shape) -> Path:
    """The rank's trace, its collective kernels carrying the args torch >= 2.1 writes."""
    doc = rk.trace.to_document()
    mine = set(rk.collectives)
    for e in doc["traceEvents"]:
        args = e.get("args") or {}
        if e.get("cat") == "kernel" and args.get("correlation") in mine:
            args.update(
                {
                    "Collective name": "allreduce",
                    "Process Group Name": "0",
                    "In msg nelems": shape.nelems,
                    "Out msg nelems": shape.nelems,
                    "dtype": "Float",
                }
            )
    with path.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        gz.write(json.dumps(doc).encode())
    return path
