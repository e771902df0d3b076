"""Accelerators other than CUDA/HIP in the loader: what kind of work each event is and how their device
lanes are named. Per distinct string where possible, vectorised over events otherwise.

- command categories (``mtia_ccp_events``): the event name says copy, wait or execution;
- runtime records written on a device's own process are the device side of a sync;
- a device process labelled with another accelerator's kind ("MTIA 17") names its lanes;
- profiler-range device time (CUPTI range-profiler mode) is placed, not timed: the model says so.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from stallscope.analyzer.core.arrays import distinct
from stallscope.analyzer.core.model import I64
from stallscope.analyzer.core.names import (
    ACTIVITY_KINDS,
    API_KINDS,
    EventKind,
    command_kind,
    is_command_category,
    is_range_category,
)
from stallscope.analyzer.core.numbers import parse_uint
from stallscope.analyzer.load.raw import RawEvent


def refine_commands(kind: npt.NDArray[np.int8], cols: dict[str, Any], values: list[Any]) -> None:
    """Device command categories (``mtia_ccp_events``): the event name says copy, wait or execution."""
    is_command = np.array([isinstance(v, str) and is_command_category(v) for v in values], dtype=np.bool_)
    selected = is_command[cols["cat"]]
    if not selected.any():
        return
    names = cols["name"][selected]
    by_name = {int(c): int(command_kind(str(values[c]))) for c in distinct(names).tolist()}
    kind[selected] = np.fromiter(map(by_name.__getitem__, names.tolist()), dtype=np.int8, count=len(names))


def device_side_calls(kind: npt.NDArray[np.int8], pid: I64) -> None:
    """Runtime records written on a device's own process (MTIA writes the device side of each
    ``synchronize`` there, with the host call's correlation) are device sync records, not host calls."""
    is_api = np.isin(kind, list(API_KINDS))
    if not is_api.any():
        return
    device_pids = distinct(pid[np.isin(kind, list(ACTIVITY_KINDS))])
    # only processes that hold nothing but device work: a trace writing kernels under the host's own pid
    # keeps its runtime calls as calls
    host_pids = distinct(pid[np.isin(kind, [EventKind.CPU_OP, EventKind.ANNOTATION, EventKind.PYTHON])])
    device_only = np.setdiff1d(device_pids, host_pids, assume_unique=True)
    kind[is_api & np.isin(pid, device_only)] = EventKind.SYNC


def format_notes(cols: dict[str, Any], values: list[Any]) -> tuple[str, ...]:
    """What the reader of the analysis must know about how this trace's device time was recorded."""
    present = distinct(cols["cat"]).tolist()
    ranges = [str(values[c]) for c in present if isinstance(values[c], str) and is_range_category(values[c])]
    if not ranges:
        return ()
    return (
        f"device time comes from {', '.join(ranges)} events (CUPTI range-profiler mode): one range per "
        "kernel, placed by the profiler rather than timed, so idle gaps and waits against them are "
        "approximate",
    )


def accelerator_labels(meta: list[RawEvent]) -> dict[int, str]:
    """Device index -> its process label when that names an accelerator other than a GPU ("MTIA 17"):
    Kineto labels a device's process with its kind and index."""
    labels: dict[int, str] = {}
    for m in meta:
        if m.name != "process_labels" or m.args is None or not isinstance(m.args.labels, str):
            continue
        kind, _, index = m.args.labels.strip().partition(" ")
        number = parse_uint(index)
        if number is not None and kind.isalpha() and kind.upper() not in ("GPU", "CPU"):
            labels[number] = f"{kind} {index}"
    return labels
