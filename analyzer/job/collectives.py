"""Collective kernels of one rank: which kernels are collectives, and what each one was.

A collective is an NCCL/RCCL kernel (``ncclKernel_AllReduce_...``, ``ncclDevKernel_...``, ``rcclKernel...``).
Its identity comes, best first, from the ``record_param_comms`` op that launched it or from the kernel's own
args (``Collective name``, ``Process Group Name``, ``Seq``, ``In msg nelems``, ``dtype``: torch >= 2.1
writes them), else from the ``nccl:<name>`` annotation above the launch, else from the kernel's name.
The model keeps no free-form args, so they are read by a second, narrow decode of the file that skips
every other key (``scan_args``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np

from stallscope.analyzer.core.model import TraceModel
from stallscope.analyzer.core.names import EventKind
from stallscope.analyzer.core.numbers import parse_uint
from stallscope.analyzer.load.loader import read_json_bytes
from stallscope.analyzer.load.raw import IdValue

_KERNEL = re.compile(r"\b[nr]ccl(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)
_MAX_UP = 12  # host levels searched above a launch call for the comms op and annotation


class _CommArgs(msgspec.Struct, gc=False):
    external_id: IdValue = msgspec.field(default=None, name="External id")
    correlation: IdValue = None
    collective: str | None = msgspec.field(default=None, name="Collective name")
    group: IdValue = msgspec.field(default=None, name="Process Group Name")
    seq: IdValue = msgspec.field(default=None, name="Seq")
    nelems: IdValue = msgspec.field(default=None, name="In msg nelems")
    dtype: str | None = None


class _CommEvent(msgspec.Struct, gc=False):
    name: str = ""
    cat: str = ""
    args: _CommArgs | None = None


class _CommDoc(msgspec.Struct, gc=False):
    traceEvents: list[_CommEvent] | None = None


_DECODER = msgspec.json.Decoder(_CommDoc)


@dataclass(frozen=True)
class CommArgs:
    collective: str | None
    group: str | None
    seq: int | None
    nelems: int | None
    dtype: str | None


@dataclass(frozen=True)
class ArgIndex:
    """Collective args by ``External id`` of ``record_param_comms`` ops and by correlation of kernels."""

    by_external_id: dict[int, CommArgs]
    by_correlation: dict[int, CommArgs]


def _int(v: IdValue) -> int | None:
    """An id or count written as a number or as ASCII digits (a leading minus allowed); None otherwise:
    ``"²"`` passes ``str.isdigit`` and ``int`` refuses it (``stallscope.analyzer.core.numbers``)."""
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        text = v.strip()
        number = parse_uint(text.removeprefix("-"))
        if number is not None:
            return -number if text.startswith("-") else number
    return None


def scan_args(path: str | Path) -> ArgIndex:
    """The collective args of a trace file. A file whose args cannot be read gives an empty index (the
    kernels and annotations still identify its collectives)."""
    try:
        doc = _DECODER.decode(read_json_bytes(Path(path)))
    except (msgspec.MsgspecError, UnicodeDecodeError, RecursionError):
        return ArgIndex({}, {})
    by_ext: dict[int, CommArgs] = {}
    by_corr: dict[int, CommArgs] = {}
    for e in doc.traceEvents or ():
        a = e.args
        if a is None or (a.collective is None and a.group is None and a.seq is None):
            continue
        args = CommArgs(
            a.collective, None if a.group is None else str(a.group), _int(a.seq), _int(a.nelems), a.dtype
        )
        if e.name == "record_param_comms" and (x := _int(a.external_id)) is not None:
            by_ext[x] = args
        elif e.cat.lower() == "kernel" and (c := _int(a.correlation)) is not None:
            by_corr[c] = args
    return ArgIndex(by_ext, by_corr)


@dataclass(frozen=True)
class Found:
    """A collective kernel of the model: its event index and identity."""

    event: int
    name: str
    group: str
    seq: int
    nelems: int
    dtype: str
    launch_event: int  # the host call that launched it (-1 when not linked)


def normalise(name: str) -> str:
    """``all_reduce`` / ``AllReduce`` / ``allreduce_`` -> ``allreduce`` (how ranks' spellings compare)."""
    return re.sub(r"[^a-z0-9]", "", name.lower().removeprefix("nccl:").removeprefix("c10d::"))


def find_collectives(model: TraceModel, args: ArgIndex) -> list[Found]:
    """Every collective kernel of the model, in start order."""
    ev = model.events
    kernel_names = np.array([bool(_KERNEL.search(s)) for s in model.strings], dtype=np.bool_)
    idx = np.flatnonzero((ev.kind == EventKind.KERNEL) & kernel_names[ev.name])
    out: list[Found] = []
    for k in idx.tolist():
        kernel = model.name_of(k)
        call = int(ev.launch[k])
        annotation, comms = _above(model, call)
        found = args.by_correlation.get(int(ev.correlation[k]))
        if comms >= 0 and int(ev.external_id[comms]) in args.by_external_id:
            found = args.by_external_id[int(ev.external_id[comms])]
        m = _KERNEL.search(kernel)
        name = (found.collective if found else None) or annotation or (m.group(1) if m else kernel)
        out.append(
            Found(
                k,
                normalise(name),
                (found.group if found else None) or "",
                found.seq if found and found.seq is not None else -1,
                found.nelems if found and found.nelems is not None else -1,
                (found.dtype if found else None) or "",
                call,
            )
        )
    return out


def _above(model: TraceModel, call: int) -> tuple[str | None, int]:
    """The ``nccl:<name>`` annotation and the ``record_param_comms`` op enclosing a launch call."""
    ev = model.events
    annotation: str | None = None
    comms = -1
    at = call
    for _ in range(_MAX_UP):
        if at < 0:
            break
        name = model.name_of(at)
        if annotation is None and name.startswith("nccl:"):
            annotation = name
        if comms < 0 and name == "record_param_comms":
            comms = at
        at = int(ev.parent[at])
    return annotation, comms
