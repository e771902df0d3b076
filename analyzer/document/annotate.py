"""The annotated trace: the original trace file with the analysis added as extra tracks
(``stallscope.analyzer.document.tracks``), one file that Perfetto UI and chrome://tracing open.

The original is copied through, never rebuilt: its event list is cut into pieces of a few MB at event
boundaries (as the loader's streaming path cuts it) and each piece is written as it was read, byte for
byte, so every value (and every key the loader does not read) stays as the profiler wrote it. Each piece is
decoded only for its events' ``pid``, ``tid`` and flow ``id`` (to choose a pid and flow ids of its own that
no event uses, and to find each lane's thread). The added events follow the original ones in the same
list; the keys around the list (``displayTimeUnit``, ``deviceProperties``...) are kept in place. Memory
holds one piece, not the trace. A document the cutting does not fit (a piece that does not decode, a
``traceEvents`` that is not where it seemed) is rewritten whole instead, in memory, keeping every top-level
value as its text.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import re
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import IO, Any, cast

import msgspec

from stallscope.analyzer.analysis import Analysis
from stallscope.analyzer.core.errors import TraceError
from stallscope.analyzer.core.model import EventTable, Lane
from stallscope.analyzer.document.anchors import Anchors
from stallscope.analyzer.document.encoding import encode_compact
from stallscope.analyzer.document.tracks import Added, Awaited, analysis_events, flow_lanes, free_pid
from stallscope.analyzer.load.stream import NotStreamable, TooLarge, blocks

_gzip_lib: ModuleType
try:  # Intel ISA-L compresses several times faster than zlib; optional, same API
    from isal import igzip as _gzip_lib  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # pragma: no cover - platform without isal wheels
    _gzip_lib = gzip

_GZIP_MAGIC = b"\x1f\x8b"
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_CUT = re.compile(rb"\}\s*,\s*\{")
PIECE_BYTES = 8 << 20  # bytes of events per piece copied through
_ADDED_BATCH = 4096  # added events encoded at a time


class _Probe(msgspec.Struct, gc=False):
    """What the copy reads of each original event (every other field is skipped, not decoded; ``args``
    only for device activity)."""

    pid: Any = None
    tid: Any = None
    id: Any = None
    cat: Any = None
    args: msgspec.Raw = msgspec.Raw(b"null")


class _StreamArgs(msgspec.Struct, gc=False):
    device: Any = None
    stream: Any = None
    stream_id: Any = None


_PROBES = msgspec.json.Decoder(list[_Probe])
_STREAM_ARGS = msgspec.json.Decoder(_StreamArgs)
#: device activity's categories (old and new spellings; other accelerators' ``*_ccp_events`` too): the
#: events a device lane's arrows bind to
_ACTIVITY = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"})


@dataclass
class Annotated:
    """What ``write_annotated`` wrote."""

    path: Path
    original_events: int
    added: Added
    streamed: bool  # False: the document was rewritten whole (its layout did not allow cutting)


@dataclass
class _Seen:
    """What the copy learns of the original events as they pass."""

    events: int = 0
    pids: set[str] = field(default_factory=set)
    threads: dict[tuple[str, str], tuple[Any, Any]] = field(default_factory=dict)
    #: a device stream as the loader keys it (device, stream as text) -> the pid and tid its activity is
    #: written under (old traces write ``"tid": "stream 7"``)
    streams: dict[tuple[str, str], tuple[Any, Any]] = field(default_factory=dict)
    max_id: int = 0

    def note(self, probes: list[_Probe]) -> None:
        self.events += len(probes)
        threads = self.threads
        for p in probes:
            key = (_text(p.pid), _text(p.tid))
            if key not in threads:
                threads[key] = (p.pid, p.tid)
                self.pids.add(key[0])
            if type(p.id) is int and p.id > self.max_id:
                self.max_id = p.id
            if isinstance(p.cat, str) and (p.cat.lower() in _ACTIVITY or p.cat.endswith("_ccp_events")):
                self._stream(p)

    def _stream(self, p: _Probe) -> None:
        """The loader's key of a device activity's lane: (``args.device`` or pid, ``args.stream`` or
        ``args.stream_id`` or tid)."""
        try:
            a = _STREAM_ARGS.decode(p.args)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        device = a.device if a.device is not None else p.pid
        stream = next((x for x in (a.stream, a.stream_id) if x is not None), p.tid)
        self.streams.setdefault((_text(device), _text(stream)), (p.pid, p.tid))

    def endpoints(self, lanes: Sequence[Lane]) -> list[tuple[Any, Any] | None]:
        """Each lane's thread as the trace's events write it (None: no event of the trace is on it)."""
        out: list[tuple[Any, Any] | None] = []
        for lane in lanes:
            key = (lane.pid, lane.tid)
            found = self.streams.get(key) if lane.on_device else None
            out.append(found or self.threads.get(key))
        return out


def _text(value: Any) -> str:
    """A pid or tid as the loader's lanes name it (``str`` of the JSON value)."""
    return str(value)


def annotated_name(trace_name: str) -> str:
    """The annotated trace's file name for a trace named ``trace_name``
    (``run.pt.trace.json.gz`` -> ``run.pt.trace.annotated.json.gz``; a folder or bundle ``run`` ->
    ``run.annotated.json.gz``)."""
    name = Path(trace_name.rstrip("/\\")).name or "trace"
    for suffix in (".gz", ".json"):
        name = name.removesuffix(suffix)
    return f"{name or 'trace'}.annotated.json.gz"


def write_annotated(
    trace: str | Path,
    doc: Mapping[str, Any],
    lanes: Sequence[Lane],
    out: str | Path,
    limit: int | None = None,
    awaited: Mapping[int, Awaited] | None = None,
    anchors: Anchors | None = None,
) -> Annotated:
    """Write ``trace`` (one trace file, ``.json`` or gzip) with the analysis ``doc`` of it (the
    ``stallscope.analysis/3`` document; ``lanes``: the trace model's lanes, whose ids the document uses)
    added, to ``out`` (gzip when its name ends in ``.gz``). ``awaited``: what each sync waited for
    (``awaited_by_sync``), when the caller has the analysis itself; ``anchors``: the slices of the lanes
    the arrows end on (``anchors_of``), so that each binds to one. The file is written beside ``out``
    and renamed into place, so ``out`` is never left half written. ``limit``: bytes of JSON allowed once
    inflated. ``TraceError`` when the trace cannot be read; ``OSError`` when ``out`` cannot be written."""
    src, target = Path(trace), Path(out)
    gz_out = target.name.endswith(".gz")
    tmp = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # the user's umask, as any file

    def analysis(seen: _Seen) -> tuple[Iterator[dict[str, Any]], Added]:
        """The added events, once every original event has been seen (its pid and flow ids are free)."""
        pid, first_id = free_pid(seen.pids), seen.max_id + 1
        return analysis_events(doc, seen.endpoints(lanes), pid, first_id, awaited, anchors)

    try:
        try:
            result = _write(src, tmp, gz_out, limit, analysis, streamed=True)
        except NotStreamable:
            try:
                result = _write(src, tmp, gz_out, limit, analysis, streamed=False)
            except NotStreamable as exc:
                raise TraceError(str(src), f"cannot copy: {exc}") from None
        tmp.replace(target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    result.path = target
    return result


def awaited_by_sync(a: Analysis) -> dict[int, Awaited]:
    """What each sync that waited for device work waited for, by sync id: the activity that ended last
    among those its calls waited for (the dependency graph's edges into the call's return), with the
    sync's thread. The document does not carry it; ``write_annotated`` draws an arrow for each."""
    g = a.graph
    out: dict[int, Awaited] = {}
    if g is None:
        return out
    for s in a.syncs:
        acts = [x for c in s.calls if 0 <= c < len(g.call_waits) for x in g.call_waits[c]]
        if acts:
            last = max(acts, key=lambda x: float(g.act_end[x]))
            out[s.id] = (s.thread, int(g.act_lane[last]), float(g.act_start[last]), float(g.act_end[last]))
    return out


def anchors_of(doc: Mapping[str, Any], events: EventTable, awaited: Mapping[int, Awaited] | None) -> Anchors:
    """The slices of the lanes the arrows of ``doc`` (and of ``awaited``) end on, from the trace model's
    events (a copy of those lanes' times: the model can go before the file is written)."""
    return Anchors(events, flow_lanes(doc, awaited))


def _is_gzip(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(2) == _GZIP_MAGIC
    except OSError as exc:
        raise TraceError(str(path), f"cannot read ({exc.strerror or exc})") from None


_Added = Callable[[], tuple[Iterator[dict[str, Any]], Added]]


def _write(
    src: Path,
    tmp: Path,
    gz_out: bool,
    limit: int | None,
    analysis: Callable[[_Seen], tuple[Iterator[dict[str, Any]], Added]],
    streamed: bool,
) -> Annotated:
    """One attempt at the copy: cut into pieces (``streamed``), or whole."""
    seen = _Seen()
    gzipped = _is_gzip(src)
    with _open_out(tmp, gz_out) as out:
        try:
            source = blocks(src, gzipped, limit)
            copy = _copy_streamed if streamed else _copy_whole
            added = copy(source, out, seen, lambda: analysis(seen))
        except TooLarge:
            raise TraceError(str(src), "more JSON than the inflated-size limit allows") from None
        except OSError as exc:
            if exc.filename == str(tmp) or not exc.filename:
                raise
            raise TraceError(str(src), f"cannot read ({exc.strerror or exc})") from None
    return Annotated(tmp, seen.events, added, streamed)


def _open_out(path: Path, gzipped: bool) -> IO[bytes]:
    if gzipped:
        return cast(IO[bytes], _gzip_lib.open(path, "wb"))
    return path.open("wb")


def _write_added(out: IO[bytes], make: _Added, first: bool) -> Added:
    """The added events, comma-separated, after the original ones (``first``: none came before)."""
    events, added = make()
    batch: list[dict[str, Any]] = []
    for event in events:
        batch.append(event)
        if len(batch) == _ADDED_BATCH:
            first = _write_list_items(out, batch, first)
            batch = []
    _write_list_items(out, batch, first)
    return added


def _write_list_items(out: IO[bytes], batch: list[dict[str, Any]], first: bool) -> bool:
    if not batch:
        return first
    out.write((b"\n" if first else b",\n") + encode_compact(batch)[1:-1])
    return False


# -- the streaming copy ---------------------------------------------------------------------------


def _copy_streamed(source: Iterator[bytes], out: IO[bytes], seen: _Seen, make: _Added) -> Added:
    """Copy the document, cutting its event list at event boundaries; add the analysis before the list's
    closing bracket. ``NotStreamable`` when a piece does not decode or the document around the list is
    not what it seemed (the caller rewrites it whole)."""
    head, pending = _head(source)
    out.write(head)
    first = True
    for block in itertools.chain((b"",), source):  # first what came with the head
        pending += block
        if len(pending) < PIECE_BYTES:
            continue
        cut = _last_cut(pending)
        if cut < 0:
            continue
        piece = bytes(pending[: cut + 1])
        seen.note(_probe(b"[" + piece + b"]"))
        out.write(piece if first else b"," + piece)
        first = False
        del pending[: pending.index(b",", cut) + 1]
    items, rest = _finish(pending)
    if items.strip():
        seen.note(_probe(b"[" + items + b"]"))
        out.write(items if first else b"," + items)
        first = False
    _check_top_level(head, rest)
    added = _write_added(out, make, first)
    out.write(b"]" + rest)
    return added


def _head(source: Iterator[bytes]) -> tuple[bytes, bytearray]:
    """The document up to and including its event list's ``[``, and what was read after it."""
    buf = b""
    for block in source:
        buf += block
        stripped = buf.lstrip()
        if stripped[:1] == b"[":  # a bare event list
            at = len(buf) - len(stripped) + 1
            return buf[:at], bytearray(buf[at:])
        match = _KEY.search(buf)
        if match:
            return buf[: match.end()], bytearray(buf[match.end() :])
        if len(buf) > 64 << 20:
            break
    raise NotStreamable("no traceEvents list near the start")


def _last_cut(text: bytearray) -> int:
    """Position of the ``}`` of the last ``} , {`` in ``text`` (-1 if none)."""
    pos = len(text)
    while True:
        pos = text.rfind(b"}", 0, pos)
        if pos < 0 or _CUT.match(text, pos):
            return pos


def _probe(text: bytes) -> list[_Probe]:
    try:
        return _PROBES.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
        raise NotStreamable(str(exc)) from None


def _finish(pending: bytearray) -> tuple[bytes, bytes]:
    """The last events' text (without the brackets) and what follows the list's ``]``."""
    try:
        text = "[" + pending.decode("utf-8")
        _, end = json.JSONDecoder().raw_decode(text)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise NotStreamable(str(exc)) from None
    return text[1 : end - 1].encode("utf-8"), text[end:].encode("utf-8")


def _check_top_level(head: bytes, rest: bytes) -> None:
    """The document without its events must be a JSON object with ``traceEvents`` (or the bare list)."""
    whole = head + b"]" + rest
    try:
        top = msgspec.json.decode(whole)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise NotStreamable(str(exc)) from None
    if isinstance(top, list):
        return
    if not isinstance(top, dict) or top.get("traceEvents") != []:
        raise NotStreamable("traceEvents is not the list that was cut")


# -- the whole-document rewrite -------------------------------------------------------------------

_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])


def _copy_whole(source: Iterator[bytes], out: IO[bytes], seen: _Seen, make: _Added) -> Added:
    """The document decoded to its top-level values' text, each written back as it was; the event list
    as its events' text, the added events after them."""
    data = b"".join(source)
    stripped = data.lstrip()
    try:
        if stripped[:1] == b"[":
            events = _RAWS.decode(data)
            out.write(b"[")
            added = _copy_events(events, out, seen, make)
            out.write(b"]\n")
            return added
        top = _TOP.decode(data)
        events = _RAWS.decode(top["traceEvents"])
    except (msgspec.DecodeError, msgspec.ValidationError, KeyError, UnicodeDecodeError) as exc:
        raise NotStreamable(f"not a trace document ({exc})") from None
    out.write(b"{")
    for i, (key, value) in enumerate(top.items()):
        out.write((b"," if i else b"") + encode_compact(key) + b":")
        if key == "traceEvents":
            out.write(b"[")
            added = _copy_events(events, out, seen, make)
            out.write(b"]")
        else:
            out.write(bytes(value))
    out.write(b"}\n")
    return added


def _copy_events(events: list[msgspec.Raw], out: IO[bytes], seen: _Seen, make: _Added) -> Added:
    for start in range(0, len(events), 1 << 16):
        chunk = b",".join(bytes(e) for e in events[start : start + (1 << 16)])
        try:
            seen.note(_PROBES.decode(b"[" + chunk + b"]"))
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
            seen.note([_probe_one(e) for e in events[start : start + (1 << 16)]])
        out.write((b"," if start else b"") + chunk)
    return _write_added(out, make, not events)


def _probe_one(raw: msgspec.Raw) -> _Probe:
    """One event that did not decode with the others (a number out of range, not an object): what it
    has of a pid and tid, or nothing."""
    try:
        value = msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return _Probe()
    if not isinstance(value, dict):
        return _Probe()
    args = value.get("args")
    raw = msgspec.Raw(msgspec.json.encode(args if isinstance(args, dict) else None))
    return _Probe(value.get("pid"), value.get("tid"), value.get("id"), value.get("cat"), raw)
