"""Streaming decode of large traces: decompress block by block, cut the event list into batches at event
boundaries, decode each batch typed. Memory holds one block and one batch, never the whole document.

Cutting is optimistic: a cut is made at ``}`` ``,`` ``{`` between events. A cut inside a string would leave
an unterminated string, which fails to decode; any such surprise raises ``NotStreamable`` and the caller
falls back to decoding the whole document in memory (``stallscope.analyzer.load.raw.decode``), which has the precise
error messages. Nothing is ever silently mis-parsed.
"""

from __future__ import annotations

import json
import re
import sys
import zlib
from collections.abc import Iterator
from operator import attrgetter
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import numpy as np

from stallscope.analyzer.load.raw import (
    BATCH_BYTES,
    Batch,
    Document,
    RawEvent,
    counter_samples,
    counters_of_items,
    top_level,
)

_inflate_lib: ModuleType
try:  # Intel ISA-L inflates gzip about twice as fast as zlib; optional, same API
    from isal import isal_zlib as _inflate_lib  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # pragma: no cover - platform without isal wheels
    _inflate_lib = zlib


_BLOCK = 8 << 20
_HEAD_BYTES = 64 << 20  # the ``traceEvents`` key is looked for this far
_INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error, _inflate_lib.error)  # isal has its own
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_CUT = re.compile(rb"\}\s*,\s*\{")
_BATCH_DECODER = msgspec.json.Decoder(list[RawEvent])


class NotStreamable(Exception):
    """The document is not laid out the way the streaming path expects; decode it whole instead."""


class TooLarge(Exception):
    """The file inflates to more bytes than allowed (a decompression bomb, or a trace beyond the limit)."""


class OnlyWhitespace(Exception):
    """The file holds nothing but whitespace."""


class TooDeep(Exception):
    """The JSON nests deeper than the decoder allows (a nesting bomb): refused as it streams, before the
    document is held whole."""


_SKIPPER = msgspec.json.Decoder(msgspec.Raw)


def too_deep(text: bytes | bytearray | memoryview) -> bool:
    """Does this JSON text (a whole document, or only its start) nest deeper than the decoder allows?
    Parsed, not built: no objects are made. The parser reads left to right, so a prefix that is too deep
    belongs to a document that is too deep, and one that ends first (truncated) is not known to be."""
    try:
        _SKIPPER.decode(text)
    except RecursionError:
        return True
    except (msgspec.MsgspecError, UnicodeDecodeError, ValueError):
        return False
    return False


_SPECIAL = np.zeros(256, np.int8)  # the bytes that matter to nesting: quotes, backslashes, brackets
_SPECIAL[list(b'"\\[]{}')] = 1
_STEP = np.zeros(256, np.int64)
_STEP[list(b"[{")], _STEP[list(b"]}")] = 1, -1


def check_depth(source: Iterator[bytes]) -> None:
    """Read ``source`` (a document's blocks) and raise ``TooDeep`` as soon as its nesting (brackets
    outside strings) passes the interpreter's recursion limit, which no decoder of it reaches (they give
    up at or before it). Memory holds one block: the guard before a document is decoded whole."""
    limit = sys.getrecursionlimit()
    text = _Text()
    for data in _slices(source, 1 << 20):  # a MB at a time: the arrays made of it are a few times that
        if text.read(data) > limit:
            raise TooDeep()


class _Text:
    """JSON text read block by block: whether it ends inside a string, and its nesting (brackets outside
    strings), from the state where the previous block ended."""

    def __init__(self) -> None:
        self.depth, self.in_string, self.escaped = 0, False, False

    def read(self, data: np.ndarray) -> int:
        """Read the next block (bytes as ``uint8``); the deepest nesting inside it."""
        where = np.flatnonzero(_SPECIAL[data])
        chars = data[where]
        keep = np.ones(len(where), np.bool_)
        if self.escaped and len(where) and where[0] == 0:
            keep[0] = False  # the block starts with the character a backslash escaped
        self.escaped = False
        slashes = np.flatnonzero(chars == ord("\\"))
        if len(slashes):  # rare in traces: each backslash not itself escaped escapes the next byte
            taken = set()
            for k in slashes.tolist():
                pos = int(where[k])
                if not keep[k] or pos - 1 in taken:
                    continue
                taken.add(pos)
                if pos + 1 == len(data):
                    self.escaped = True
                elif k + 1 < len(where) and where[k + 1] == pos + 1:
                    keep[k + 1] = False
            keep[slashes] = False
        where, chars = where[keep], chars[keep]
        quotes = chars == ord('"')
        toggles = np.cumsum(quotes) + self.in_string  # odd: inside a string (a quote itself counts as inside)
        outside = (toggles % 2 == 0) & ~quotes
        steps = _STEP[chars[outside]]
        deepest = self.depth
        if len(steps):
            levels = np.cumsum(steps) + self.depth
            deepest = int(levels.max())
            self.depth = int(levels[-1])
        self.in_string = bool(toggles[-1] % 2) if len(toggles) else self.in_string
        return deepest


_SPACE = b" \t\r\n"


class Blanks:
    """Keeps runs of whitespace between a buffer's tokens from growing it: a block of nothing but
    whitespace that comes while the buffer's text is outside a string adds at most one space (the same
    JSON: whitespace only separates tokens). A gzip of a few MB can hold GBs of whitespace between two
    events; memory holds one block of it. The text is read (``_Text``) only when such a block comes, from
    where it was last read: once over the buffer in all, however many blocks of whitespace follow."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        """The buffer now starts outside any string (at a cut between events, or the document's start)."""
        self.text, self.read_to = _Text(), 0

    def add(self, buffer: bytearray, block: bytes) -> None:
        """``buffer += block``, the block squeezed to at most one space when it is all whitespace outside
        a string."""
        # isspace stops at the first other byte (it also takes \v and \f, which JSON does not)
        if not block.isspace() or block.strip(_SPACE):
            buffer += block
            return
        for start in range(self.read_to, len(buffer), 1 << 20):
            self.text.read(np.frombuffer(buffer, np.uint8, min(1 << 20, len(buffer) - start), start))
        self.read_to = len(buffer)
        if self.text.in_string:
            buffer += block
            self.read_to = len(buffer)  # whitespace inside a string: no quote to read
        elif not buffer or buffer[-1] not in _SPACE:
            buffer += b" "
            self.read_to = len(buffer)


def _slices(source: Iterator[bytes], size: int) -> Iterator[np.ndarray]:
    for block in source:
        data = np.frombuffer(block, np.uint8)
        for start in range(0, len(data), size):
            yield data[start : start + size]


def blocks(path: Path, gzipped: bool, limit: int | None = None) -> Iterator[bytes]:
    """The file's bytes, gunzipped when ``gzipped``, in blocks of a few MB; ``TooLarge`` once more than
    ``limit`` bytes have come out (counted as they inflate: a bomb is never inflated whole)."""
    inflate: Any = _inflate_lib.decompressobj(wbits=47) if gzipped else None  # 47: gzip/zlib header
    fed = False  # the current gzip member has been given bytes
    total = 0
    with path.open("rb") as f:
        while True:
            data = f.read(_BLOCK)
            if not data:
                break
            if inflate is None:
                total += len(data)
                if limit is not None and total > limit:
                    raise TooLarge(total)
                yield data
                continue
            while data:
                try:
                    block = inflate.decompress(data, _BLOCK)
                except _INFLATE_ERRORS as exc:
                    raise NotStreamable(f"gzip: {exc}") from None
                fed = True
                total += len(block)
                if limit is not None and total > limit:
                    raise TooLarge(total)
                yield block
                data = inflate.unconsumed_tail
                if inflate.eof:  # the member ended: another may follow (``cat a.gz b.gz``), streamed alike
                    data = inflate.unused_data
                    inflate, fed = _inflate_lib.decompressobj(wbits=47), False
    if inflate is not None and fed and not inflate.eof:
        raise NotStreamable("truncated gzip")


def stream_document(source: Iterator[bytes]) -> Document:
    """A ``Document`` whose batches are decoded while ``source`` is read. Top-level facts (device
    properties, rank...) are filled in when the last batch has been produced."""
    doc = Document(iter(()), 0, [], {}, None, None)
    doc.batches = (
        _decode(piece, doc) if isinstance(piece, memoryview) else piece for piece in _pieces(source, doc)
    )
    return doc


def stream_pieces(source: Iterator[bytes]) -> tuple[Document, Iterator[memoryview | Batch]]:
    """``stream_document`` without the decoding: the event list cut into pieces, each the text of a JSON
    list of events (``decode_batch`` makes it a batch; valid only until the next piece is asked for: copy
    it to keep it) or, for the last events, a batch already decoded. The document's ``size`` counts only
    the decoded pieces; the caller adds the others'."""
    doc = Document(iter(()), 0, [], {}, None, None)
    return doc, _pieces(source, doc)


def decode_batch(text: bytes | memoryview, counters: bool = True) -> Batch:
    """One piece of ``stream_pieces``: its events, and (unless not ``counters``: the caller finds them)
    its counter samples when it holds any."""
    try:
        events = _BATCH_DECODER.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise NotStreamable(str(exc)) from None
    except RecursionError:  # the piece is the document's own text, read as the whole decode reads it
        raise TooDeep() from None
    batch = Batch(events)
    if counters and _holds_counters(events):
        batch.counters = counter_samples(text, batch.skipped)
    return batch


def _pieces(source: Iterator[bytes], doc: Document) -> Iterator[memoryview | Batch]:
    """The event list cut into pieces: the ``traceEvents`` list of an object document, or the document
    itself when it is a bare list of events (streamed alike: the same cuts, limits and guards)."""
    buf = bytearray()
    blanks = Blanks()  # whitespace between tokens never piles up: neither before the list nor in it
    bare, match = False, None
    for block in source:
        if not buf:  # whitespace before the document is dropped as it streams by, never held
            block = block.lstrip()
            if not block:
                continue
            bare = block[:1] == b"["
        probe = not buf  # the first block, and the last before giving up, are probed for a nesting bomb
        blanks.add(buf, block)
        if bare:
            break
        match = _KEY.search(buf)
        if match:
            break
        if len(buf) > _HEAD_BYTES or probe:
            if too_deep(buf):
                raise TooDeep()
            if len(buf) > _HEAD_BYTES:
                raise NotStreamable("no traceEvents list near the start")
    else:
        raise NotStreamable("no traceEvents list") if buf else OnlyWhitespace()
    if match is None:  # a bare list
        head, pending = None, buf  # starts with the list's '['
    else:
        head = bytes(buf[: match.end() - 1])
        pending = buf[match.end() - 1 :]  # starts with the list's '['
    del buf
    blanks.restart()
    uncut = BATCH_BYTES  # when ``pending`` grows this large without a cut, it is probed for depth
    for block in source:
        blanks.add(pending, block)
        if len(pending) < BATCH_BYTES:
            continue
        cut = _last_cut(pending)
        if cut > 0:
            yield from _prefix(pending, cut)
            blanks.restart()
            uncut = BATCH_BYTES
        elif len(pending) >= uncut:  # no event ends: one huge event, or a nesting bomb held as it grows
            if too_deep(pending):
                raise TooDeep()
            uncut = 2 * len(pending)  # probed again each time it doubles: linear in all
    cut = _last_cut(pending)
    if cut > 0:  # the last full piece, as every other (a decode worker may take it)
        yield from _prefix(pending, cut)
    last, rest = _finish(pending, doc)
    yield last
    if head is None:  # a bare list: nothing may follow it, and there are no top-level facts
        if rest.strip():
            raise NotStreamable("text after the event list")
    else:
        _top_level(head, rest, doc)


def _last_cut(text: bytearray) -> int:
    """Position of the ``}`` of the last ``} , {`` in ``text`` (-1 if none)."""
    pos = len(text)
    while True:
        pos = text.rfind(b"}", 0, pos)
        if pos < 0 or _CUT.match(text, pos):
            return pos


def _prefix(pending: bytearray, cut: int) -> Iterator[memoryview]:
    """``pending[:cut + 1]`` (it starts with '[') as a list, in place: the byte after the cut becomes ']'
    while the piece is out and the separating ',' becomes the '[' of what remains."""
    comma = pending.index(b",", cut)
    pending[cut + 1] = ord("]")
    with memoryview(pending) as view, view[: cut + 2] as piece:
        yield piece
    pending[comma] = ord("[")
    del pending[:comma]


def _holds_counters(events: list[RawEvent]) -> bool:
    """Does the decoded batch hold a counter event (``ph: "C"``) or a profiler range (a ``cat`` ending in
    ``_profiler_range``)? The test of ``counter_samples``, on the phases and categories already decoded:
    cheaper than scanning the batch's bytes for them (which a kernel's name can also make match)."""
    if "C" in set(map(_PH, events)):
        return True
    return any(c.lower().endswith("_profiler_range") for c in set(map(_CAT, events)))


_PH, _CAT = attrgetter("ph"), attrgetter("cat")


def _decode(text: memoryview, doc: Document) -> Batch:
    batch = decode_batch(text)
    doc.size += len(batch.events)
    return batch


def _finish(pending: bytearray, doc: Document) -> tuple[Batch, bytes]:
    """The last event (or none: ``pending`` holds no cut between events), then the closing ``]`` and what
    follows it (the rest of the top-level object)."""
    try:  # one event (or none) then ']': small, so the stdlib's prefix decoder is fine here
        text = pending.decode("utf-8")
        events, end = json.JSONDecoder().raw_decode(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotStreamable(str(exc)) from None
    except RecursionError:  # the stdlib's limit is not the decoder's: only the decoder's refuses
        raise (TooDeep() if too_deep(pending) else NotStreamable("nested deeper than json allows")) from None
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise NotStreamable("event list holds non-objects")
    try:
        last = msgspec.convert(events, list[RawEvent])
    except msgspec.ValidationError as exc:
        raise NotStreamable(str(exc)) from None
    doc.size += len(last)
    tail = Batch(last)
    tail.counters = counters_of_items(events, tail.skipped)
    return tail, text[end:].encode()


def _top_level(head: bytes, rest: bytes, doc: Document) -> None:
    try:
        facts = top_level(head + b"[]" + rest)
    except msgspec.MsgspecError as exc:
        raise NotStreamable(str(exc)) from None
    doc.device_properties, doc.distributed_info = facts.device_properties, facts.distributed_info
    doc.display_time_unit, doc.base_time_ns = facts.display_time_unit, facts.base_time_ns
    doc.unknown_keys = facts.unknown_keys
