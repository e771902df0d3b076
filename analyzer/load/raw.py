"""Typed decoding of Kineto JSON with msgspec: the only place that sees the file's raw shape.

The document is first split into one ``msgspec.Raw`` slice per event (cheap: no objects are made for the
event's fields), then decoded in batches into small typed structs, so memory holds at most one batch of
Python objects. A batch with a field of the wrong type anywhere falls back to converting its events one
by one, so a bad event is skipped and counted instead of failing the file.
"""

from __future__ import annotations

import gc
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from stallscope.analyzer.core.errors import TraceError

IdValue = int | str | None
BATCH = 1 << 16  # events per batch when slicing a document held in memory
BATCH_BYTES = 8 << 20  # bytes of JSON per batch when streaming
TOO_DEEP = "invalid JSON (nested too deeply)"


class RawArgs(msgspec.Struct, gc=False):
    """The ``args`` keys stallscope uses; all others are skipped by the decoder."""

    external_id: IdValue = msgspec.field(default=-1, name="External id")
    correlation: IdValue = -1
    stream: IdValue = -1
    stream_id: IdValue = -1  # other accelerators' runtime records (MTIA) name the stream so
    device: IdValue = -1
    bytes: IdValue = -1
    python_id: IdValue = msgspec.field(default=-1, name="Python id")
    python_parent_id: IdValue = msgspec.field(default=-1, name="Python parent id")
    cuda_sync_kind: str | None = None
    call_stack: str | None = msgspec.field(default=None, name="Call stack")  # legacy: "f.py(44): g;..."
    wait_on_stream: IdValue = -1
    wait_on_event_corr: IdValue = msgspec.field(default=-1, name="wait_on_cuda_event_record_corr_id")
    name: str | int | float | None = None  # metadata events: thread_name / process_name
    labels: str | None = None  # metadata events: process_labels ("CPU", "GPU 0")
    # ``[memory]`` instants (profile_memory=True): the caching allocator's totals after each event
    total_reserved: IdValue = msgspec.field(default=-1, name="Total Reserved")
    total_allocated: IdValue = msgspec.field(default=-1, name="Total Allocated")
    device_id: IdValue = msgspec.field(default=-1, name="Device Id")
    device_type: IdValue = msgspec.field(default=-1, name="Device Type")  # 0 CPU, 1 CUDA


EMPTY_ARGS = RawArgs()


class RawEvent(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = -1
    tid: int | str = -1
    ts: float | None = None
    dur: float | None = None
    id: IdValue = None
    args: RawArgs | None = None


class _Doc(msgspec.Struct, gc=False):
    traceEvents: list[msgspec.Raw] | None = None
    deviceProperties: list[dict[str, Any]] | None = None
    distributedInfo: dict[str, Any] | None = None
    displayTimeUnit: str | None = None
    baseTimeNanoseconds: int | None = None


#: one counter event: (name, pid as text, ts, {series key: value}, from a profiler range)
CounterSample = tuple[str, str, float, dict[str, float], bool]


@dataclass
class Batch:
    events: list[RawEvent]
    skipped: Counter[str] = field(default_factory=Counter)
    counters: list[CounterSample] = field(default_factory=list)


@dataclass
class Document:
    """Top-level facts of a trace and its events, to be consumed once, batch by batch."""

    batches: Iterator[Batch]
    size: int  # number of elements in the event list
    device_properties: list[dict[str, Any]]
    distributed_info: dict[str, Any]
    display_time_unit: str | None
    base_time_ns: int | None
    unknown_keys: list[str] = field(default_factory=list)  # top-level keys stallscope does not read


#: top-level keys torch.profiler/Kineto write that stallscope knows (read or deliberately not needed)
KNOWN_KEYS = frozenset(
    {
        "traceEvents", "deviceProperties", "distributedInfo", "displayTimeUnit", "baseTimeNanoseconds",
        "schemaVersion", "traceName", "trace_id", "record_shapes", "with_stack", "with_flops",
        "with_modules", "profile_memory", "cuda_runtime_version", "cuda_driver_version", "cupti_version",
        "hip_runtime_version", "roctracer_version", "rocprofiler_version", "metadata", "host_name",
        "stallscope",  # the sidecar a stallscope trace carries (stallscope.analyzer.load.sidecar.embedded_sidecar)
    }
)  # fmt: skip
_KEYS_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw])


def unknown_keys(data: bytes) -> list[str]:
    """Top-level keys of an object document that are not in ``KNOWN_KEYS`` (a cheap scan: values are
    skipped, not decoded)."""
    return sorted(k for k in _KEYS_DECODER.decode(data) if k not in KNOWN_KEYS)


_DOC_DECODER = msgspec.json.Decoder(_Doc)
_LEADING_SPACE = re.compile(rb"[ \t\r\n]*")
_RAW_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
_BATCH_DECODER = msgspec.json.Decoder(list[RawEvent])


def decode(data: bytes, path: str) -> Document:
    """Decode a Kineto/Chrome trace document (an object with ``traceEvents`` or a bare event list)."""
    first = _LEADING_SPACE.match(data)
    head = data[first.end() : first.end() + 64] if first else data[:64]
    if not head:
        raise TraceError(path, "empty file")
    if head[:1] not in (b"{", b"["):
        raise TraceError(path, "not JSON (does not start with '{' or '[')")
    with paused_gc():
        try:
            if head[:1] == b"[":
                raws = _RAW_LIST_DECODER.decode(data)
                return Document(_batches(raws), len(raws), [], {}, None, None)
            doc = _DOC_DECODER.decode(data)
        except msgspec.ValidationError:
            return _decode_lenient(data, path)
        except msgspec.DecodeError as exc:
            raise TraceError(path, _describe_json_error(exc)) from None
        except (RecursionError, UnicodeDecodeError) as exc:
            raise TraceError(path, _describe_unusable(exc)) from None
    if doc.traceEvents is None:
        raise TraceError(path, "not a trace: JSON object without a 'traceEvents' list")
    return Document(
        _batches(doc.traceEvents),
        len(doc.traceEvents),
        doc.deviceProperties or [],
        doc.distributedInfo or {},
        doc.displayTimeUnit,
        doc.baseTimeNanoseconds,
        unknown_keys(data),
    )


def top_level(data: bytes) -> Document:
    """Only the top-level facts of a document whose event list is empty (used by the streaming path)."""
    doc = _DOC_DECODER.decode(data)
    return Document(
        iter(()),
        0,
        doc.deviceProperties or [],
        doc.distributedInfo or {},
        doc.displayTimeUnit,
        doc.baseTimeNanoseconds,
        unknown_keys(data),
    )


class paused_gc:
    """Pause the cyclic garbage collector: millions of small acyclic objects are made and freed here."""

    def __enter__(self) -> None:
        self.was_enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.was_enabled:
            gc.enable()


def _describe_json_error(exc: msgspec.DecodeError) -> str:
    text = str(exc)
    if "truncated" in text.lower():
        return "truncated JSON (the file ends in the middle of the document)"
    return f"invalid JSON ({text})"


def _describe_unusable(exc: RecursionError | UnicodeDecodeError) -> str:
    if isinstance(exc, RecursionError):
        return TOO_DEEP
    return f"invalid JSON (not UTF-8 text: {exc.reason} at byte {exc.start})"


def _batches(raws: list[msgspec.Raw]) -> Iterator[Batch]:
    for start in range(0, len(raws), BATCH):
        chunk = raws[start : start + BATCH]
        buf = b"[" + b",".join(chunk) + b"]"
        try:
            batch = Batch(_BATCH_DECODER.decode(buf))
        except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
            # each slice is well-formed JSON (the split checked it): the trouble is inside one event
            # (wrong type, bad UTF-8, number out of range). One by one: only the bad event is skipped.
            batch = _convert_each(chunk)
        if might_hold_counters(buf):
            batch.counters = counter_samples(buf, batch.skipped)
        yield batch
    raws.clear()  # release the slices (and with them the document's bytes) as soon as possible


class _Probe(msgspec.Struct, gc=False):
    """Just enough of an event to find counters; ``args`` stays undecoded until it is one."""

    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    pid: Any = -1
    ts: Any = None
    args: msgspec.Raw = msgspec.Raw(b"null")


_PROBE_DECODER = msgspec.json.Decoder(list[_Probe])
_RANGE_MARK = b"_profiler_range"


def might_hold_counters(buf: bytes | bytearray, end: int | None = None) -> bool:
    """A cheap byte scan: could this slice of JSON hold a counter event (``"ph": "C"``) or a profiler
    range? Most traces have neither, and then nothing more is decoded."""
    stop = len(buf) if end is None else end
    return buf.find(b'"C"', 0, stop) >= 0 or buf.find(_RANGE_MARK, 0, stop) >= 0


def counter_samples(text: bytes | memoryview, skipped: Counter[str]) -> list[CounterSample]:
    """The counter samples of a JSON list of events: ``ph: "C"`` events (one series per numeric key of
    their ``args``) and profiler ranges (``*_profiler_range``: the metrics of one kernel). Counter events
    without a usable time or value are counted in ``skipped``; a list that does not decode is left to the
    typed decoder, which counts its events."""
    try:
        probes = _PROBE_DECODER.decode(text)
    except (msgspec.MsgspecError, UnicodeDecodeError):
        return []
    out: list[CounterSample] = []
    for p in probes:
        is_range = p.ph == "X" and isinstance(p.cat, str) and p.cat.lower().endswith("_profiler_range")
        if p.ph == "C" or is_range:
            try:
                args = msgspec.json.decode(p.args)
            except (msgspec.MsgspecError, UnicodeDecodeError):
                args = None
            _keep(counter_sample(p.name, p.pid, p.ts, args, is_range), p.ph == "C", out, skipped)
    return out


def _keep(
    sample: CounterSample | None, counter: bool, out: list[CounterSample], skipped: Counter[str]
) -> None:
    if sample is not None:
        out.append(sample)
    elif counter:  # a range without metrics is still a range (a kernel); a counter without values is lost
        skipped["counter event without a numeric time and value"] += 1


def counter_sample(name: Any, pid: Any, ts: Any, args: Any, is_range: bool) -> CounterSample | None:
    """One event's counter values (numbers only; booleans and text are not counters), or None."""
    if not isinstance(args, dict) or type(ts) not in (int, float) or not isinstance(name, str):
        return None
    values = {str(k): float(v) for k, v in args.items() if type(v) in (int, float) and abs(v) < 2.0**63}
    if not values:
        return None
    return name, str(pid), float(ts), values, is_range


def counters_of_items(items: list[Any], skipped: Counter[str]) -> list[CounterSample]:
    """``counter_samples`` for events already decoded as Python objects (the lenient and tail paths)."""
    out: list[CounterSample] = []
    for e in items:
        if not isinstance(e, dict):
            continue
        cat = e.get("cat")
        is_range = e.get("ph") == "X" and isinstance(cat, str) and cat.lower().endswith("_profiler_range")
        if e.get("ph") == "C" or is_range:
            sample = counter_sample(e.get("name"), e.get("pid"), e.get("ts"), e.get("args"), is_range)
            _keep(sample, e.get("ph") == "C", out, skipped)
    return out


def _convert_each(items: list[Any]) -> Batch:
    """Convert decoded items, or undecoded ``Raw`` slices, one by one; skip and count the unusable."""
    batch = Batch([])
    for item in items:
        if isinstance(item, msgspec.Raw):
            try:
                item = msgspec.json.decode(item)
            except (msgspec.MsgspecError, UnicodeDecodeError) as exc:  # number out of range, bad UTF-8
                batch.skipped[_undecodable(exc)] += 1
                continue
        if not isinstance(item, dict):
            batch.skipped["not an event object"] += 1
            continue
        try:
            batch.events.append(msgspec.convert(item, RawEvent))
        except msgspec.ValidationError as exc:
            batch.skipped[_wrong_type(str(exc))] += 1
    return batch


def _wrong_type(message: str) -> str:
    """'Expected `float | null`, got `str` - at `$.ts`' -> 'ts: not a number (str)'."""
    field = message.rsplit("at `$.", 1)[-1].rstrip("`") if "at `$." in message else "event"
    got = message.split("got `", 1)[-1].split("`", 1)[0] if "got `" in message else "?"
    wanted = "not a number" if "float" in message or "int" in message else "wrong type"
    return f"{field}: {wanted} ({got})"


def _undecodable(exc: Exception) -> str:
    """'Number out of range - at `$[...]`' -> 'event: number out of range'."""
    if isinstance(exc, UnicodeDecodeError) or "utf-8" in str(exc).lower():  # msgspec >= 0.23 says so itself
        return "event: not UTF-8 text"
    return "event: " + str(exc).split(" - at ", 1)[0].lower()


def _decode_lenient(data: bytes, path: str) -> Document:
    """Slow path for documents whose top level has unexpected types: decode untyped, keep what fits."""
    try:
        doc = msgspec.json.decode(data)
    except (msgspec.MsgspecError, RecursionError, UnicodeDecodeError) as exc:
        raise TraceError(path, f"unusable JSON ({exc})") from None
    if isinstance(doc, dict):
        items = doc.get("traceEvents")
        if not isinstance(items, list):
            raise TraceError(path, "not a trace: JSON object without a 'traceEvents' list")
        top = doc
    elif isinstance(doc, list):
        items, top = doc, {}
    else:
        raise TraceError(path, f"not a trace: top-level JSON {type(doc).__name__}")
    props = top.get("deviceProperties")
    dist = top.get("distributedInfo")
    unit = top.get("displayTimeUnit")
    base = top.get("baseTimeNanoseconds")
    batch = _convert_each(items)
    batch.counters = counters_of_items(items, batch.skipped)
    return Document(
        iter([batch]),
        len(items),
        [p for p in props if isinstance(p, dict)] if isinstance(props, list) else [],
        dist if isinstance(dist, dict) else {},
        unit if isinstance(unit, str) else None,
        base if isinstance(base, int) and not isinstance(base, bool) else None,
        sorted(k for k in top if k not in KNOWN_KEYS),
    )
