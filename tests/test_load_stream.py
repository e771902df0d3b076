"""The streaming loader on the shapes it used to hold whole: a bare list of events (no ``{"traceEvents":
...}`` around it) streams as the wrapped form does, to the same model and analysis; whitespace between
the tokens of the event list is squeezed as it streams, never inside a string. (Memory is measured on
bombs in ``tests/test_bombs.py``.)"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_many_lanes import lanes_trace

from stallscope.analyzer.analysis import Analysis, analyze
from stallscope.analyzer.core.errors import TraceError
from stallscope.analyzer.load import decode_pool, loader, stream
from stallscope.analyzer.load.loader import load, load_file
from stallscope.analyzer.load.raw import RawEvent

#: real traces (``../shared/traces``) whose bare and wrapped forms are compared: counters, CUDA graphs
#: and a multi-rank job's rank, besides plain kernels
REAL = (
    "field/hta_a100_cupti_range_profiler.pt.trace.json.gz",
    "field/hta_mtia_inference_rank0.pt.trace.json.gz",
    "tracelens_h100_bert_small_pystack.pt.trace.json.gz",
    "hta_a100_nccl_2rank_rank0.pt.trace.json.gz",
)


def twins(folder: Path, events: list[Any], gzipped: bool, indent: int | None = None) -> tuple[Path, Path]:
    """The same events as a bare list and inside ``{"traceEvents": [...]}`` (nothing else)."""
    suffix = ".json.gz" if gzipped else ".json"
    bare, wrapped = folder / f"bare{suffix}", folder / f"wrapped{suffix}"
    for path, doc in ((bare, events), (wrapped, {"traceEvents": events})):
        text = json.dumps(doc, indent=indent).encode()
        path.write_bytes(gzip.compress(text, mtime=0) if gzipped else text)
    return bare, wrapped


def never_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make decoding a document whole fail: what loads after this was streamed."""

    def whole(_data: bytes, path: str) -> Any:
        raise AssertionError(f"{path} was decoded whole")

    monkeypatch.setattr(loader, "decode", whole)


def same_analysis(a: Analysis, b: Analysis) -> None:
    ea, eb = a.model.events, b.model.events
    assert len(ea) == len(eb) > 0
    for column in ("ts", "dur", "end", "kind", "lane", "correlation"):
        assert np.array_equal(getattr(ea, column), getattr(eb, column), equal_nan=True), column
    # names are codes into each model's strings, interned batch by batch: the texts are compared
    assert [a.model.strings[n] for n in ea.name] == [b.model.strings[n] for n in eb.name]
    assert [lane.label for lane in a.model.lanes] == [lane.label for lane in b.model.lanes]
    assert repr(a.model.counters) == repr(b.model.counters)
    assert a.summary == b.summary
    assert a.devices == b.devices
    assert a.gaps == b.gaps
    assert a.critical.length_us == b.critical.length_us
    assert [f.title for f in a.findings] == [f.title for f in b.findings]


def test_a_bare_list_streams_to_the_analysis_of_its_wrapped_twin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN 2,000 launches each onto its own device (1.5 MB of JSON: streamed), as a bare list and wrapped
    doc = lanes_trace(2000, "devices")
    bare, wrapped = twins(tmp_path, doc["traceEvents"], gzipped=False)
    assert bare.stat().st_size > 1 << 20
    # WHEN both are loaded, with decoding a document whole made to fail
    never_whole(monkeypatch)
    a, b = (analyze(load(p, use_cache=False)) for p in (bare, wrapped))
    # THEN both streamed, to the same events and answers
    same_analysis(a, b)
    assert [(d.id, d.activities) for d in a.devices] == [(i, 1) for i in range(2000)]


@pytest.mark.parametrize("name", REAL, ids=lambda n: n.split("/")[-1].split(".")[0])
def test_real_traces_as_bare_lists_give_their_wrapped_twins_answers(
    shared_traces: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # GIVEN a real trace's events as a bare list and wrapped, pretty-printed (streamed: at least 1 MB)
    events = json.loads(gzip.decompress((shared_traces / name).read_bytes()))["traceEvents"]
    bare, wrapped = twins(tmp_path, events, gzipped=False, indent=8)
    assert bare.stat().st_size >= 1 << 20
    never_whole(monkeypatch)
    # WHEN analysed THEN both stream, to the same answers
    same_analysis(*(analyze(load(p, use_cache=False)) for p in (bare, wrapped)))


def test_a_bare_list_streams_with_decode_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a bare list cut into many small pieces, and decode workers taken for any file
    bare, wrapped = twins(tmp_path, lanes_trace(2000, "streams")["traceEvents"], gzipped=False)
    monkeypatch.setattr(stream, "BATCH_BYTES", 64 << 10)
    monkeypatch.setattr(loader, "_WORKER_MIN_BYTES", 0)
    never_whole(monkeypatch)
    started = []
    start = decode_pool._start
    monkeypatch.setattr(decode_pool, "_start", lambda *a: started.append(1) or start(*a))
    # WHEN loaded with a worker (which cuts the file again itself) THEN it gives the wrapped form's model
    a = load_file(bare, use_cache=False, workers=1)
    assert started == [1]
    b = load_file(wrapped, use_cache=False, workers=0)
    assert np.array_equal(a.events.ts, b.events.ts)
    assert [a.strings[n] for n in a.events.name] == [b.strings[n] for n in b.events.name]
    assert len(a.events) == 2000 * 3


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (b'[{"ph":"X","ts":1,"dur":1,"pid":1,"tid":1}] x', "invalid JSON"),  # text after the list
        (b"[1, 2, 3]", "no element of the event list is an event object"),
        (b'[{"ph":"X","ts":1,"dur":1,"pid":1,"tid":1}', "truncated JSON"),
    ],
)
def test_a_bare_list_that_does_not_stream_gets_the_whole_decodes_error(
    tmp_path: Path, text: bytes, error: str
) -> None:
    # GIVEN a bare list padded past the streaming threshold with whitespace inside it, then trouble
    path = tmp_path / "bad.json"
    path.write_bytes(text[:1] + b" " * (2 << 20) + text[1:])
    # WHEN loaded THEN one line says what is wrong, as for a document decoded whole
    with pytest.raises(TraceError, match=error):
        load(path, use_cache=False)


def test_a_bare_list_is_refused_by_event_count_as_it_streams(tmp_path: Path) -> None:
    # GIVEN 100,000 tiny events in a bare list: 2.6 MB of JSON, as many events as 20 MB of real ones
    path = tmp_path / "tiny.json"
    path.write_bytes(b"[" + b'{"ph":"X","ts":1,"dur":1},' * 100_000 + b"{}]")
    # WHEN loaded with a limit of 10 MB THEN it is refused by count, as the wrapped form is
    with pytest.raises(TraceError, match="more than 66,666 events"):
        load(path, use_cache=False, max_inflated_mb=10)


def blocks_of(*parts: bytes) -> Iterator[bytes]:
    return iter(parts)


def events_of(*parts: bytes) -> list[RawEvent]:
    doc = stream.stream_document(blocks_of(*parts))
    return [e for batch in doc.batches for e in batch.events]


def test_whitespace_blocks_inside_a_string_are_kept() -> None:
    # GIVEN blocks of nothing but whitespace inside an event's name (after an escaped quote, too)
    spaces = b" " * 4096  # (a string holds no raw tab or newline)
    parts = (b'{"traceEvents":[{"ph":"i","name":"a', spaces, b'b"},{"name":"c\\"', spaces, b'd"}', b"]}")
    # WHEN streamed THEN the names hold every byte of it
    names = [e.name for e in events_of(*parts)]
    assert names == ["a" + spaces.decode() + "b", 'c"' + spaces.decode() + "d"]


class Measured(stream.Blanks):
    """``Blanks`` that keeps the largest buffer it added to."""

    largest = 0

    def add(self, buffer: bytearray, block: bytes) -> None:
        super().add(buffer, block)
        Measured.largest = max(Measured.largest, len(buffer))


@pytest.mark.parametrize("bare", [False, True], ids=["wrapped", "bare"])
def test_whitespace_blocks_between_tokens_are_squeezed(monkeypatch: pytest.MonkeyPatch, bare: bool) -> None:
    # GIVEN 4 MB of whitespace, in blocks of 4 KB, before the list, inside an event, between two
    # events and after the list
    gap = [b" \n" * 2048] * 1024
    start = (b"[",) if bare else (b'{"schemaVersion":1,', *gap, b'"traceEvents":[')
    end = (b"]",) if bare else (b"]", *gap, b"}")
    parts = (*start, b'{"ph":"i",', *gap, b'"name":"a"}', *gap, b',{"name":"b"}', *gap, *end)
    monkeypatch.setattr(stream, "Blanks", Measured)
    Measured.largest = 0
    # WHEN streamed THEN the events are those of the text without it, which was never held
    assert [(e.ph, e.name) for e in events_of(*parts)] == [("i", "a"), ("", "b")]
    assert 0 < Measured.largest < 100


def test_the_squeeze_keeps_a_space_between_tokens() -> None:
    # GIVEN two numbers separated only by a block of whitespace (invalid JSON: two values in a row)
    buffer = bytearray(b"[1")
    blanks = stream.Blanks()
    blanks.add(buffer, b"   ")
    blanks.add(buffer, b"  ")
    blanks.add(buffer, b"2]")
    # THEN one space is kept: the text stays invalid, as it was
    assert bytes(buffer) == b"[1 2]"
    with pytest.raises(json.JSONDecodeError):
        json.loads(buffer)
