"""Decoded trace document -> columnar ``TraceModel``: validation, interning, lanes, steps and links.

Work is done per column with list comprehensions and numpy, never per event with Python objects kept.
"""

from __future__ import annotations

import mmap
import platform
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from stallscope.analyzer.core.arrays import distinct, time_order
from stallscope.analyzer.core.errors import TraceError
from stallscope.analyzer.core.model import (
    F64,
    I64,
    NO_ID,
    Device,
    EventTable,
    Lane,
    LaneKind,
    LoadReport,
    Mask,
    Step,
    TraceModel,
)
from stallscope.analyzer.core.names import (
    ACTIVITY_KINDS,
    API_KINDS,
    DEVICE_KINDS,
    LAUNCH_FLOW_CATEGORIES,
    MEMORY_EVENT,
    STEP_PREFIX,
    ApiKind,
    EventKind,
    api_kind,
    event_kind,
    is_range_category,
)
from stallscope.analyzer.core.numbers import parse_uint
from stallscope.analyzer.load.accelerators import (
    accelerator_labels,
    device_side_calls,
    format_notes,
    refine_commands,
)
from stallscope.analyzer.load.counters import CounterBuilder
from stallscope.analyzer.load.links import resolve_links
from stallscope.analyzer.load.raw import (
    EMPTY_ARGS,
    Batch,
    CounterSample,
    Document,
    RawArgs,
    RawEvent,
    counter_samples,
    paused_gc,
)
from stallscope.analyzer.load.stream import decode_batch

# event phases as small codes: 0 unknown, 1 complete ("X"), 2 instant, 3 flow, 4 metadata, 5 counter
# (counter values are read from the batch's ``counters``, see ``stallscope.analyzer.load.counters``)
_PHASE = {"X": 1, "i": 2, "I": 2, "s": 3, "f": 3, "t": 3, "M": 4, "C": 5}
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
#: device events linked to the host call that issued them
_LINKED_KINDS = (*ACTIVITY_KINDS, EventKind.SYNC)
_MAX_CAPACITY = 1 << 28  # values a column is allocated for at its first batch, at most (``_Columns``)
_MAX_US = 2.0**62  # about 146,000 years: times beyond it could overflow float64 when subtracted


class _Interner:
    """Values (strings, raw pid/tid) to dense int codes, shared across columns."""

    def __init__(self) -> None:
        self.codes: dict[Any, int] = {}

    def codes_of(self, values: list[Any]) -> I64:
        table = self.codes
        for v in dict.fromkeys(values):  # distinct values, in C; few compared to events
            if v not in table:
                table[v] = len(table)
        return np.fromiter(map(table.__getitem__, values), dtype=np.int64, count=len(values))

    def values(self) -> list[Any]:
        return list(self.codes)


def _ids(values: list[Any]) -> I64:
    """Integer ids with ``-1`` for absent; strings of digits are accepted, anything else is absent."""
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, ValueError, OverflowError):
        return np.array([_clean_id(v) for v in values], dtype=np.int64)


def _clean_id(value: Any) -> int:
    if type(value) is int and _I64_MIN <= value <= _I64_MAX:
        return value
    if isinstance(value, str):
        number = parse_uint(value)
        return NO_ID if number is None else number
    return NO_ID


def _floats(values: list[float | None]) -> F64:
    """Timestamps/durations as float64; absent ones become NaN (the decoder admits only numbers)."""
    try:
        return np.fromiter(values, dtype=np.float64, count=len(values))
    except TypeError:
        return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def build_model(
    doc: Document,
    path: str,
    fmt: str,
    progress: Callable[[str], None] | None = None,
    max_events: int | None = None,
    parts: Iterator[_Part] | None = None,
) -> TraceModel:
    """Turn a decoded document into the columnar model; malformed events are skipped and counted. More
    than ``max_events`` timed events is a ``TraceError`` as soon as the batch that passes it arrives
    (memory grows with events, however small each is in the file). ``parts``: the document's batches
    made columns already (``stallscope.analyzer.load.decode_pool``), in its order, instead of ``doc.batches``."""
    with paused_gc():  # only acyclic lists and arrays are made here; collections would just cost time
        return _build(doc, path, fmt, progress or (lambda _msg: None), max_events, parts)


def _build(
    doc: Document,
    path: str,
    fmt: str,
    progress: Callable[[str], None],
    max_events: int | None,
    parts: Iterator[_Part] | None,
) -> TraceModel:
    acc = _Accumulator(None if max_events is None else min(max_events, _MAX_CAPACITY))
    for item in doc.batches if parts is None else parts:
        if isinstance(item, Batch):
            acc.add(item)
        else:
            acc.merge(item)
            doc.size += item.size
        progress(f"decoded {acc.timed_seen:,} events")
        if max_events is not None and acc.timed_seen > max_events:
            raise TraceError(
                path, f"more than {max_events:,} events (the limit that comes with --max-inflated-mb)"
            )
    progress(f"linking {acc.timed_seen:,} events")
    if not acc.timed_seen:
        raise TraceError(path, _why_empty(doc.size, acc.skipped))
    cols, keep = acc.columns()
    if not keep.any():
        raise TraceError(path, "no events with a usable timestamp")
    if not keep.all():
        _select(cols, keep)
    unknown_categories = _unknown_categories(cols, acc.strings)
    notes = format_notes(cols, acc.strings.values())
    unpaired = _apply_launch_flows(cols, acc.flows())
    _permute(cols, time_order(cols["ts"], cols["dur"]))
    lanes = _assign_lanes(cols, acc.meta, acc.raw.values())
    counters = acc.counters.build({lane.device for lane in lanes if lane.on_device})
    table = resolve_links(cols)
    string_table = tuple(str(s) for s in acc.strings.values())
    unlinked = int(np.count_nonzero(table.activity_mask() & (table.launch < 0)))
    dist = doc.distributed_info
    return TraceModel(
        path=path,
        format=fmt,
        events=table,
        strings=string_table,
        lanes=lanes,
        devices=_devices(lanes, doc.device_properties, acc.memory_peaks),
        steps=_steps(table, lanes, string_table),
        rank=_int_or_none(dist.get("rank")),
        world_size=_int_or_none(dist.get("world_size")),
        display_time_unit=doc.display_time_unit,
        base_time_ns=doc.base_time_ns,
        report=LoadReport(
            skipped=dict(acc.skipped),
            unknown_categories=unknown_categories,
            unknown_phases=dict(acc.unknown_phases),
            unknown_keys=tuple(doc.unknown_keys),
            unpaired_flows=unpaired,
            unlinked_device_events=unlinked,
            notes=notes,
            counter_samples=len(counters),
        ),
        counters=counters,
    )


def _permute(cols: dict[str, Any], order: npt.NDArray[np.intp]) -> None:
    """Reorder every column by ``order`` (a permutation) in place: gathered into one scratch array, reused
    for every column, then copied back. The columns keep their memory (``_Columns``: a new array per
    column would be fresh memory for the kernel to find and zero, 0.9 GB at 10M events)."""
    n = len(order)
    scratch = np.empty(n * 8, dtype=np.uint8)
    owners = Counter(_owner(column) for column in cols.values())  # columns sharing memory are copied
    for name, column in cols.items():
        if (
            owners[_owner(column)] > 1
            or column.ndim != 1
            or len(column) != n
            or column.dtype.hasobject
            or column.dtype.itemsize > 8
            or not column.flags.writeable
        ):
            cols[name] = column[order]
            continue
        gathered = scratch[: n * column.dtype.itemsize].view(column.dtype)
        np.take(column, order, out=gathered)
        column[...] = gathered


def _owner(column: npt.NDArray[Any]) -> int:
    """Which memory the column is in (numpy points a view of a view at the first array's owner)."""
    return id(column.base if column.base is not None else column)


def _select(cols: dict[str, Any], index: npt.NDArray[Any]) -> None:
    """Apply a mask or permutation to every column in place, one column at a time (bounded peak memory)."""
    for name in list(cols):
        cols[name] = cols[name][index]


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _why_empty(size: int, skipped: Counter[str]) -> str:
    if size == 0:
        return "no events (the event list is empty)"
    if skipped.get("not an event object", 0) == size:
        return "not a trace: no element of the event list is an event object"
    return "no timed events (only metadata, flows or unusable events)"


def _take(events: list[Any], attr: str) -> list[Any]:
    return list(map(attrgetter(attr), events))


def _float_column(items: list[Any], attr: str) -> F64:
    """``_floats(_take(items, attr))`` without the intermediate list when every value is a number (the
    common case: one C loop from the structs into the array)."""
    try:
        return np.fromiter(map(attrgetter(attr), items), dtype=np.float64, count=len(items))
    except TypeError:
        return _floats(_take(items, attr))


def _id_column(items: list[Any], attr: str) -> I64:
    """``_ids(_take(items, attr))``, straight from the structs when every value is an int64."""
    try:
        return np.fromiter(map(attrgetter(attr), items), dtype=np.int64, count=len(items))
    except (TypeError, ValueError, OverflowError):
        return _ids(_take(items, attr))


# args columns (column, RawArgs attribute), read for every event or only for the kinds that carry them
_COMMON_ARGS = (("external_id", "external_id"), ("correlation", "correlation"))
_PYTHON_ARGS = (("python_id", "python_id"), ("python_parent_id", "python_parent_id"))
_DEVICE_ARGS = (
    ("stream", "stream"),
    ("stream_id", "stream_id"),
    ("device", "device"),
    ("bytes", "bytes"),
    ("wait_stream", "wait_on_stream"),
    ("wait_corr", "wait_on_event_corr"),
)

Parts = dict[str, list[npt.NDArray[Any]]]
_STRING_CODES = frozenset({"cat", "name", "stack"})  # columns of codes into the interned strings
_RAW_CODES = frozenset({"pid", "tid"})  # ... into the interned raw pid/tid values


@dataclass
class _Part:
    """One batch's columns built by a fresh ``_Accumulator`` (by a decode worker, or by the process that
    merges them): codes index the part's own ``strings`` and ``raw`` until ``_Accumulator.merge`` maps
    them."""

    size: int  # elements of the batch (events of every phase)
    strings: list[Any]
    raw: list[Any]
    columns: dict[str, npt.NDArray[Any]]
    flow_columns: dict[str, npt.NDArray[Any]]
    meta: list[RawEvent]
    skipped: Counter[str]
    unknown_phases: Counter[str]
    timed_seen: int
    memory_peaks: dict[int, tuple[int, int]]
    counters: list[CounterSample]


def part_of(piece: bytes | memoryview | Batch) -> _Part:
    """A piece of ``stream_pieces`` decoded and made columns, apart from every other batch."""
    with paused_gc():
        batch = piece if isinstance(piece, Batch) else decode_batch(piece, counters=False)
        acc = _Accumulator()
        holds_counters = acc._add_events(batch.events)  # its counter samples: ``merge`` adds them
        if holds_counters and not isinstance(piece, Batch):  # read as ``decode_batch`` reads them
            batch.counters = counter_samples(piece, batch.skipped)
        acc.skipped.update(batch.skipped)
        return _Part(
            len(batch.events),
            acc.strings.values(),
            acc.raw.values(),
            acc.parts.single(),  # one batch: one array each
            {name: values[0] for name, values in acc.flow_parts.items()},
            acc.meta,
            acc.skipped,
            acc.unknown_phases,
            acc.timed_seen,
            acc.memory_peaks,
            batch.counters,
        )


def _mapped(codes: I64, table: I64) -> I64:
    """A part's codes as the accumulator's (``NO_ID`` stays)."""
    out = codes.copy()
    known = codes != NO_ID
    out[known] = table[codes[known]]
    return out


class _Columns:
    """The timed events' columns, batch by batch. With a ``capacity`` (the most events the trace may
    hold), each column is one array of that many values, allocated at its first batch and filled as the
    batches come: only the pages written are ever touched, and the finished column is a view of it, so
    the columns are never held twice (as the batches' arrays and as their concatenation; at 10M events
    that was 0.9 GB of fresh memory and 0.6 s of copying). Without one, or for a batch that does not fit
    (a type that differs, more values than the capacity), the batches are kept as a list and concatenated
    at the end, as ``np.concatenate`` would."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity
        self.order: list[str] = []  # the columns, in the order they first came
        self.lists: Parts = {}
        self.filled: dict[str, tuple[npt.NDArray[Any], int]] = {}  # column -> (its array, values written)

    def append(self, name: str, values: npt.NDArray[Any]) -> None:
        if name in self.filled:
            array, n = self.filled[name]
            if values.dtype == array.dtype and n + len(values) <= len(array):
                array[n : n + len(values)] = values
                self.filled[name] = (array, n + len(values))
                return
            del self.filled[name]  # from now on a list, starting with what was written
            self.lists[name] = [array[:n]]
        elif name not in self.lists:
            self.order.append(name)
            reserved = _reserve(self.capacity, values) if self.capacity is not None else None
            if reserved is not None:
                reserved[: len(values)] = values
                self.filled[name] = (reserved, len(values))
                return
        self.lists.setdefault(name, []).append(values)

    def pop(self, name: str) -> npt.NDArray[Any]:
        """The whole column (its batches go)."""
        self.order.remove(name)
        if name in self.filled:
            array, n = self.filled.pop(name)
            return array[:n]
        return np.concatenate(self.lists.pop(name))

    def single(self) -> dict[str, npt.NDArray[Any]]:
        """Each column of a store that was given one batch (``part_of``)."""
        return {name: self.lists[name][0] for name in self.order}


def _reserve(capacity: int, like: npt.NDArray[Any]) -> npt.NDArray[Any] | None:
    """An array of ``capacity`` values of ``like``'s type in an anonymous mapping that the kernel does not
    count against the memory it may promise (``MAP_NORESERVE``): its pages exist once written. Counted, a
    model's columns would promise GBs that a ``fork`` (the decode worker, the cache writer) must promise
    again, and it fails. None where that flag is not known (then the column is a list)."""
    if like.ndim != 1 or len(like) > capacity or like.dtype.hasobject or _NORESERVE is None:
        return None
    try:
        mapping = mmap.mmap(-1, max(capacity * like.dtype.itemsize, 1), flags=_PRIVATE_ANONYMOUS | _NORESERVE)
    except (OSError, ValueError, OverflowError):
        return None
    return np.frombuffer(mapping, dtype=like.dtype, count=capacity)


#: Linux's MAP_NORESERVE where its value is 0x4000 (x86 and Arm); elsewhere columns are lists
_NORESERVE = (
    getattr(mmap, "MAP_NORESERVE", 0x4000)
    if sys.platform.startswith("linux") and platform.machine() in ("x86_64", "aarch64", "arm64", "i686")
    else None
)
_PRIVATE_ANONYMOUS = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)


def _per_string(table: npt.NDArray[Any], strings: list[Any], of: Callable[[str], Any]) -> npt.NDArray[Any]:
    """``table`` (``of`` each interned string, in code order) grown to the strings interned since: ``of``
    of each new string, 0 for a value that is not one (a raw pid or tid)."""
    if len(table) >= len(strings):
        return table
    new = [of(v) if isinstance(v, str) else 0 for v in strings[len(table) :]]
    return np.concatenate([table, np.array(new, dtype=table.dtype)])


class _Accumulator:
    """Columns built batch by batch; strings and raw pid/tid values interned across batches.
    ``capacity``: the most timed events the trace may hold (``_Columns``)."""

    def __init__(self, capacity: int | None = None) -> None:
        self.strings = _Interner()
        self.raw = _Interner()
        self.parts = _Columns(capacity)
        self.flow_parts: Parts = {}
        self.meta: list[RawEvent] = []
        self.skipped: Counter[str] = Counter()
        self.unknown_phases: Counter[str] = Counter()
        self.timed_seen = 0
        self.memory_peaks: dict[int, tuple[int, int]] = {}  # device -> (reserved, allocated) peaks
        self.counters = CounterBuilder()
        self._kinds: npt.NDArray[np.int8] = np.zeros(0, dtype=np.int8)
        self._last_cat: I64 = np.zeros(0, dtype=np.int64)  # the category codes of the last batch added
        self._ranges: Mask = np.zeros(0, dtype=np.bool_)

    def add(self, batch: Batch) -> None:
        self.skipped.update(batch.skipped)
        self.counters.add(batch.counters)
        self._add_events(batch.events)

    def merge(self, part: _Part) -> None:
        """Add a batch built apart (``part_of``), as ``add`` would have added it: its strings and raw
        values are interned in the order it met them, so every code comes out the same."""
        self.skipped.update(part.skipped)
        self.counters.add(part.counters)
        self.unknown_phases.update(part.unknown_phases)
        self.meta.extend(part.meta)
        self.timed_seen += part.timed_seen
        for device, (reserved, allocated) in part.memory_peaks.items():
            self._peak(device, reserved, allocated)
        strings, raw = self.strings.codes_of(part.strings), self.raw.codes_of(part.raw)
        for name, values in part.columns.items():
            table = strings if name in _STRING_CODES else raw if name in _RAW_CODES else None
            self.parts.append(name, values if table is None else _mapped(values, table))
        for name, values in part.flow_columns.items():
            table = strings if name in _STRING_CODES else raw if name in _RAW_CODES else None
            self.flow_parts.setdefault(name, []).append(values if table is None else _mapped(values, table))

    def _add_events(self, events: list[RawEvent]) -> bool:
        """Add the batch's events; True when it holds counter samples (``counter_samples``: a counter
        event, or a complete event of a profiler range), which ``part_of`` then reads from its text."""
        if not events:
            return False
        phases = _take(events, "ph")
        phase = np.fromiter(map(_PHASE.get, phases, repeat(0)), dtype=np.int8, count=len(phases))
        if not phase.all():
            self.unknown_phases.update(p for p, c in zip(phases, phase.tolist(), strict=True) if not c)
        self.meta.extend(compress(events, (phase == 4).tolist()))
        is_timed = (phase == 1) | (phase == 2)
        timed = list(compress(events, is_timed.tolist()))
        self.timed_seen += len(timed)
        instant = phase[is_timed] == 2
        unlinked = self._add_timed(timed, instant) if timed else False
        self._add_flows(list(compress(events, (phase == 3).tolist())), positions=unlinked)
        if (phase == 5).any():
            return True
        return bool(timed) and bool(self._is_range()[self._last_cat[~instant]].any())

    def _add_timed(self, timed: list[RawEvent], instant: Mask) -> bool:
        """Add the batch's timed events; True when some launch call or device event in it carries no
        correlation id (an old trace: its flows' positions are then needed to link them)."""
        columns: dict[str, npt.NDArray[Any]] = {
            "ts": _float_column(timed, "ts"),
            "dur": _float_column(timed, "dur"),
            "instant": instant,
            "cat": self.strings.codes_of(_take(timed, "cat")),
            "name": self.strings.codes_of(_take(timed, "name")),
            "pid": self.raw.codes_of(_take(timed, "pid")),
            "tid": self.raw.codes_of(_take(timed, "tid")),
        }
        args: list[RawArgs] = [e.args or EMPTY_ARGS for e in timed]
        for column, attr in _COMMON_ARGS:
            columns[column] = _id_column(args, attr)
        kind = self.kind_of(columns["cat"])
        for fields, mask in (
            (_PYTHON_ARGS, kind == EventKind.PYTHON),
            (_DEVICE_ARGS, np.isin(kind, [*DEVICE_KINDS, *API_KINDS])),  # API: device-side records
        ):
            some = list(compress(args, mask.tolist())) if mask.any() else []
            for column, attr in fields:
                full = np.full(len(timed), NO_ID, dtype=np.int64)
                if some:
                    full[mask] = _id_column(some, attr)
                columns[column] = full
        stream_id = columns.pop("stream_id")
        columns["stream"] = np.where(columns["stream"] != NO_ID, columns["stream"], stream_id)
        columns["stack"] = self._stacks(args, kind == EventKind.CPU_OP)
        for name, values in columns.items():
            self.parts.append(name, values)
        self._last_cat = columns["cat"]
        memory = self.strings.codes.get(MEMORY_EVENT)
        if memory is not None and instant.any():
            self._add_memory(list(compress(args, (instant & (columns["name"] == memory)).tolist())))
        linked_kinds = np.isin(kind, [*_LINKED_KINDS, EventKind.RUNTIME, EventKind.DRIVER])
        return bool(np.any(linked_kinds & (columns["correlation"] < 0)))

    def _stacks(self, args: list[RawArgs], ops: Mask) -> I64:
        """Legacy ``args["Call stack"]`` of cpu_ops, interned (one string per distinct stack), else -1."""
        out = np.full(len(args), NO_ID, dtype=np.int64)
        if not ops.any():
            return out
        values = _take(list(compress(args, ops.tolist())), "call_stack")
        if not any(values):
            return out
        codes = self.strings.codes_of([v or "" for v in values])
        codes[codes == self.strings.codes.get("", NO_ID)] = NO_ID
        out[ops] = codes
        return out

    def _add_memory(self, args: list[RawArgs]) -> None:
        """Per-device peaks of the allocator totals that ``[memory]`` instants carry (device memory only)."""
        if not args:
            return
        device, device_type = _ids(_take(args, "device_id")), _ids(_take(args, "device_type"))
        reserved, allocated = _ids(_take(args, "total_reserved")), _ids(_take(args, "total_allocated"))
        on_device = (device >= 0) & (device_type != 0)
        for d in distinct(device[on_device]).tolist():
            mine = on_device & (device == d)
            self._peak(d, int(reserved[mine].max()), int(allocated[mine].max()))

    def _peak(self, device: int, reserved: int, allocated: int) -> None:
        """Raise the device's allocator peaks to ``reserved`` and ``allocated`` where they are higher."""
        old = self.memory_peaks.get(device, (-1, -1))
        self.memory_peaks[device] = (max(old[0], reserved), max(old[1], allocated))

    def _is_range(self) -> Mask:
        """Per interned string: is it a profiler range's category?"""
        self._ranges = _per_string(self._ranges, self.strings.values(), is_range_category)
        return self._ranges

    def kind_of(self, codes: I64) -> npt.NDArray[np.int8]:
        """EventKind of each category code."""
        self._kinds = _per_string(self._kinds, self.strings.values(), event_kind)
        return self._kinds[codes]

    def _add_flows(self, flows: list[RawEvent], positions: bool) -> None:
        """Launch flows: ids and direction always (to count ends without a partner); where they sit
        (thread, time) only when ``positions``, since only links without correlation ids need them."""
        cats = _take(flows, "cat")
        distinct = dict.fromkeys(cats)
        launch_cats = {
            c for c in distinct if c in LAUNCH_FLOW_CATEGORIES or c.lower() in LAUNCH_FLOW_CATEGORIES
        }
        if not launch_cats:
            return
        if len(launch_cats) < len(distinct):
            flows = list(compress(flows, [c in launch_cats for c in cats]))
        n = len(flows)
        columns = {
            "id": _id_column(flows, "id"),
            "start": np.fromiter(map("s".__eq__, _take(flows, "ph")), dtype=np.bool_, count=n),
        }
        if positions:
            columns["pid"] = self.raw.codes_of(_take(flows, "pid"))
            columns["tid"] = self.raw.codes_of(_take(flows, "tid"))
            columns["ts"] = _float_column(flows, "ts")
        else:
            columns["pid"] = columns["tid"] = np.full(n, NO_ID, dtype=np.int64)
            columns["ts"] = np.full(n, np.nan)
        for name, values in columns.items():
            self.flow_parts.setdefault(name, []).append(values)

    def flows(self) -> dict[str, npt.NDArray[Any]]:
        return {k: np.concatenate(v) for k, v in self.flow_parts.items()}

    def columns(self) -> tuple[dict[str, Any], Mask]:
        """Concatenate the batches, classify events and say which ones are usable (skipping is counted)."""
        cols: dict[str, Any] = {}
        for name in list(self.parts.order):  # one column at a time: the parts go as the column is made
            cols[name] = self.parts.pop(name)
        ts, dur, instant = cols["ts"], cols["dur"], cols.pop("instant")
        dur[instant & np.isnan(dur)] = 0.0
        bad_ts = ~np.isfinite(ts)
        bad_dur = ~bad_ts & ~np.isfinite(dur)
        negative = ~bad_ts & ~bad_dur & (dur < 0)
        out_of_range = ~bad_ts & ~bad_dur & ~negative & ((np.abs(ts) >= _MAX_US) | (dur >= _MAX_US - ts))
        for reason, mask in (
            ("timestamp missing or not a number", bad_ts),
            ("duration missing or not a number", bad_dur),
            ("negative duration", negative),
            ("time out of range", out_of_range),
        ):
            if mask.any():
                self.skipped[reason] += int(np.count_nonzero(mask))
        values = self.strings.values()
        api_of = np.array([api_kind(v) if isinstance(v, str) else 0 for v in values], dtype=np.int8)
        kind = self.kind_of(cols["cat"])
        refine_commands(kind, cols, values)
        device_side_calls(kind, cols["pid"])
        kind[instant] = EventKind.INSTANT
        host = ~np.isin(kind, list(DEVICE_KINDS))
        for column in ("stream", "device", "bytes", "wait_stream", "wait_corr"):  # of device events only
            cols[column][host] = NO_ID
        is_api = np.isin(kind, [EventKind.RUNTIME, EventKind.DRIVER])
        cols["kind"] = kind
        cols["api"] = np.where(is_api, api_of[cols["name"]], ApiKind.NONE).astype(np.int8)
        cols["name"] = cols["name"].astype(np.int32)
        cols["cat"] = cols["cat"].astype(np.int32)
        cols["stack"] = cols["stack"].astype(np.int32)
        return cols, ~(bad_ts | bad_dur | negative | out_of_range)


def _unknown_categories(cols: dict[str, Any], strings: _Interner) -> dict[str, int]:
    values = strings.values()
    other = cols["kind"] == EventKind.OTHER
    counts = np.bincount(cols["cat"][other], minlength=len(values))
    return {str(values[c]) or "(none)": int(counts[c]) for c in np.flatnonzero(counts)}


def _apply_launch_flows(cols: dict[str, Any], flows: dict[str, npt.NDArray[Any]]) -> int:
    """Count launch-flow ends (``ac2g``, legacy ``async_cpu_to_gpu``) with no partner, and use the flows to
    link launch calls and device events that carry no ``args.correlation`` (old traces)."""
    if not flows:
        return 0
    ids, start = flows["id"], flows["start"]
    valid = ids >= 0
    start_ids = distinct(ids[valid & start])
    finish_ids = distinct(ids[valid & ~start])
    unpaired = len(np.setxor1d(start_ids, finish_ids, assume_unique=True))
    corr = cols["correlation"]
    linkable = (corr < 0) & (np.isin(cols["kind"], list(_LINKED_KINDS)) | (cols["api"] != ApiKind.NONE))
    if not linkable.any():
        return unpaired
    at: dict[tuple[int, int, float], int] = {}
    for i in np.flatnonzero(linkable).tolist():
        at.setdefault((int(cols["pid"][i]), int(cols["tid"][i]), float(cols["ts"][i])), i)
    paired = valid & np.isin(ids, np.intersect1d(start_ids, finish_ids, assume_unique=True))
    for k in np.flatnonzero(paired).tolist():
        hit = at.get((int(flows["pid"][k]), int(flows["tid"][k]), float(flows["ts"][k])))
        if hit is not None:
            corr[hit] = int(ids[k])
    return unpaired


def _assign_lanes(cols: dict[str, Any], meta: list[RawEvent], raw_values: list[Any]) -> tuple[Lane, ...]:
    """Host events go to their thread (pid, tid); device events to (device, stream)."""
    kind = cols["kind"]
    numeric = np.array(
        [v if type(v) is int and _I64_MIN <= v <= _I64_MAX else NO_ID for v in raw_values], dtype=np.int64
    )
    on_device = np.isin(kind, list(DEVICE_KINDS))
    device = np.where(cols["device"] >= 0, cols["device"], numeric[cols["pid"]])
    stream = np.where(
        (cols["stream"] != NO_ID) | (kind == EventKind.SYNC), cols["stream"], numeric[cols["tid"]]
    )
    a = np.where(on_device, device, cols["pid"])
    b = np.where(on_device, stream, cols["tid"])
    # one int64 key per event: (on_device, a, b) with a and b replaced by their rank among distinct values
    a_values, a_code = _codes(a)
    b_values, b_code = _codes(b)
    width = np.int64(len(b_values))
    key = (on_device.astype(np.int64) * np.int64(len(a_values)) + a_code) * width + b_code
    unique_keys, inverse = _codes(key)
    cols["lane"] = inverse.astype(np.int32)
    names = _thread_names(meta)
    accelerators = accelerator_labels(meta)
    not_work = np.isin(kind, [EventKind.INSTANT, EventKind.TRACE_SPAN, EventKind.OVERHEAD])
    has_work = np.bincount(cols["lane"][~not_work], minlength=len(unique_keys)) > 0
    lanes = []
    for lane_id, k in enumerate(unique_keys.tolist()):
        rest, second_code = divmod(k, int(width))
        dev_flag, first_code = divmod(rest, len(a_values))
        first, second = int(a_values[first_code]), int(b_values[second_code])
        if dev_flag:
            lane_kind = LaneKind.STREAM if second >= 0 else LaneKind.DEVICE
            label = accelerators.get(first, "")
            lanes.append(Lane(lane_id, lane_kind, str(first), str(second), first, second, label))
        else:
            pid, tid = raw_values[first], raw_values[second]
            name = names.get((pid, tid), "")
            lane_kind = LaneKind.HOST if has_work[lane_id] else LaneKind.META
            lanes.append(Lane(lane_id, lane_kind, str(pid), str(tid), NO_ID, NO_ID, name))
    return tuple(lanes)


def _codes(values: I64) -> tuple[I64, I64]:
    """``np.unique(values, return_inverse=True)``. Columns of lanes (threads, streams, their keys) hold
    few values in a small range: then each value's rank comes from a lookup table indexed by the value,
    one linear pass, where the sort behind ``return_inverse`` is n log n and scatters across the column."""
    if not len(values):
        return distinct(values), np.zeros(0, dtype=np.int64)
    low, high = int(values.min()), int(values.max())
    if high - low > _LOOKUP_RANGE:
        values_seen, inverse = np.unique(values, return_inverse=True)
        return values_seen, inverse.reshape(-1).astype(np.int64)
    present = np.zeros(high - low + 1, dtype=np.bool_)
    present[values - low] = True
    rank = np.cumsum(present, dtype=np.int64) - 1
    return np.flatnonzero(present).astype(values.dtype) + low, rank[values - low]


_LOOKUP_RANGE = 1 << 20


def _thread_names(meta: list[RawEvent]) -> dict[tuple[Any, Any], str]:
    names: dict[tuple[Any, Any], str] = {}
    for m in meta:
        if m.name == "thread_name" and m.args is not None and isinstance(m.args.name, str):
            names[(m.pid, m.tid)] = m.args.name.strip()
    return names


def _devices(
    lanes: tuple[Lane, ...], properties: list[dict[str, Any]], memory_peaks: dict[int, tuple[int, int]]
) -> tuple[Device, ...]:
    by_id = {p.get("id"): p for p in properties if isinstance(p.get("id"), int)}
    ids = sorted({lane.device for lane in lanes if lane.on_device and lane.device >= 0})
    return tuple(
        Device(
            i,
            str(by_id.get(i, {}).get("name", f"device {i}")),
            by_id.get(i, {}),
            *memory_peaks.get(i, (-1, -1)),
        )
        for i in ids
    )


#: user annotations that name an iteration when a trace has no ``ProfilerStep#N`` ("iteration#12",
#: "train_step 3", "iter_5"): a number at the end, after the word iteration, iter or step
_ITERATION = re.compile(r"(?:^|[^a-z])(?:iteration|iter|step)[#_ -]?([0-9]+)$", re.IGNORECASE)


def _steps(table: EventTable, lanes: tuple[Lane, ...], strings: tuple[str, ...]) -> tuple[Step, ...]:
    """``ProfilerStep#N`` spans on host threads (annotations, or cpu_op in old traces); without them, the
    iterations a user annotated (at least two, on one thread, not overlapping)."""
    host = np.array([lane.kind == LaneKind.HOST for lane in lanes], dtype=np.bool_)
    spans = host[table.lane] & table.is_kind(EventKind.ANNOTATION, EventKind.CPU_OP)
    is_step_name = np.array([s.startswith(STEP_PREFIX) for s in strings], dtype=np.bool_)
    found = np.flatnonzero(is_step_name[table.name] & spans)
    if not len(found):
        return _annotated_iterations(table, strings, host)
    steps: list[Step] = []
    for i in found.tolist():
        name = strings[int(table.name[i])]
        suffix = name[len(STEP_PREFIX) :]
        number = parse_uint(suffix)
        number = len(steps) if number is None else number
        start = float(table.ts[i])
        steps.append(Step(name, number, start, start + float(table.dur[i]), int(table.lane[i]), i))
    return tuple(steps)


def _annotated_iterations(table: EventTable, strings: tuple[str, ...], host: Mask) -> tuple[Step, ...]:
    matches = [_ITERATION.search(s) for s in strings]
    numbers = [parse_uint(m.group(1)) if m is not None else None for m in matches]
    named = np.array([n is not None for n in numbers], dtype=np.bool_)
    found = np.flatnonzero(named[table.name] & host[table.lane] & (table.kind == EventKind.ANNOTATION))
    if len(found) < 2:
        return ()
    lane = int(np.bincount(table.lane[found]).argmax())
    steps: list[Step] = []
    for i in found[table.lane[found] == lane].tolist():
        start = float(table.ts[i])
        if steps and start < steps[-1].end_us:  # nested or overlapping: not a sequence of iterations
            continue
        name = strings[int(table.name[i])]
        number = numbers[int(table.name[i])]
        assert number is not None
        steps.append(Step(name, number, start, start + float(table.dur[i]), lane, i))
    return tuple(steps) if len(steps) >= 2 else ()
