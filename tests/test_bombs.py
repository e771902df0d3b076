"""Decompression and nesting bombs (issue 14): a few hundred KB of gzip that inflate to hundreds of MB,
whitespace before a document, JSON nested millions deep. Each is refused with one line, or analysed, in
bounded memory: the inflate is streamed and counted, never done whole first.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterable
from pathlib import Path

import pytest
from _kineto import document, launch_pair

from stallscope.analyzer.load.stream import TooDeep, check_depth
from stallscope.commands import main

MB = 1 << 20


def gzip_stream(path: Path, chunks: Iterable[bytes]) -> Path:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    with path.open("wb") as f:
        for chunk in chunks:
            f.write(packer.compress(chunk))
        f.write(packer.flush())
    return path


def whitespace(mb: int) -> Iterable[bytes]:
    return (b" " * MB for _ in range(mb))


VALID = json.dumps(document(launch_pair(0, 1, 30, 10, ext=11))).encode()


def peak_rss_mb(argv: list[str]) -> tuple[int, str, float]:
    """Run ``stallscope ARGV`` in a child process: exit code, stderr, peak resident memory in MB."""
    # VmHWM, not ru_maxrss: the latter keeps the forking test process's peak across exec
    code = "import sys; from stallscope.commands import main; rc = main(sys.argv[1:]); "
    code += "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]; "
    code += "print(hwm, file=sys.stderr); sys.exit(rc)"
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
    *lines, rss = proc.stderr.strip().splitlines()
    return proc.returncode, "\n".join(lines), int(rss) / 1024


def test_gzip_of_only_whitespace_is_empty_in_bounded_memory(tmp_path: Path) -> None:
    # GIVEN ~300 KB of gzip holding 300 MB of whitespace
    bomb = gzip_stream(tmp_path / "ws.json.gz", whitespace(300))
    assert bomb.stat().st_size < MB
    # WHEN analysed THEN one line says the file is empty, and memory never held the 300 MB
    code, err, rss = peak_rss_mb(["analyze", "--no-cache", "-q", str(bomb)])
    assert code == 2 and err == f"stallscope: error: {bomb}: empty file (only whitespace)"
    assert rss < 250, rss


def test_whitespace_before_a_document_is_analysed_in_bounded_memory(tmp_path: Path) -> None:
    # GIVEN 300 MB of whitespace, then a valid trace, gzipped
    trace = gzip_stream(tmp_path / "late.json.gz", itertools.chain(whitespace(300), [VALID]))
    out = tmp_path / "a.json"
    # WHEN analysed THEN the trace is read as if the whitespace were not there
    code, err, rss = peak_rss_mb(["analyze", "--no-cache", "-q", str(trace), "--json", str(out)])
    assert code == 0, err
    assert json.loads(out.read_text())["summary"]["device_busy_us"] == 10.0
    assert rss < 250, rss


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
def test_inflated_size_over_the_limit_is_refused(tmp_path: Path, streamed: bool) -> None:
    # GIVEN a gzip (big enough to stream, or small) whose JSON is 3 MB once inflated
    body = b" " * (3 * MB) + VALID
    if streamed:
        body = os.urandom(600_000).hex().encode()[: 3 * MB] + body  # incompressible: >= 64 KB of gzip
    trace = gzip_stream(tmp_path / "t.json.gz", [body])
    # WHEN analysed with --max-inflated-mb 2 THEN one line refuses it
    err = tmp_path / "err"
    with err.open("w") as f, pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "stderr", f)
        code = main(["analyze", "--no-cache", "-q", "--max-inflated-mb", "2", str(trace)])
    assert code == 2
    assert err.read_text() == (
        f"stallscope: error: {trace}: holds more than 2 MB of JSON once inflated (--max-inflated-mb)\n"
    )


def test_plain_json_over_the_limit_is_refused_before_reading(tmp_path: Path) -> None:
    trace = tmp_path / "big.json"
    trace.write_bytes(b" " * (3 * MB) + VALID)
    assert main(["check", "--no-cache", "--max-inflated-mb", "2", "--max-idle-frac", "1", str(trace)]) == 2


def repeated_gzip(path: Path, parts: Iterable[tuple[bytes, int]]) -> Path:
    """A gzip file of each ``(chunk, times)`` of ``parts`` repeated ``times``, written fast: a chunk is
    deflated once after a full flush (which makes each copy independent of what came before) and its
    compressed bytes written ``times``; GBs of JSON take seconds to write and a few MB on disk."""
    crc, size = 0, 0
    with path.open("wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")  # gzip header: deflate, no name, no time
        for chunk, times in parts:
            packer = zlib.compressobj(6, zlib.DEFLATED, -15)
            packed = packer.compress(chunk) + packer.flush(zlib.Z_FULL_FLUSH)
            for _ in range(times):
                f.write(packed)
                crc = zlib.crc32(chunk, crc)
            size += len(chunk) * times
        f.write(zlib.compressobj(6, zlib.DEFLATED, -15).flush())  # the last (empty) block
        f.write(struct.pack("<II", crc, size & 0xFFFFFFFF))
    return path


def test_repeated_gzip_holds_its_chunks(tmp_path: Path) -> None:
    gz = repeated_gzip(tmp_path / "r.gz", [(b"{", 1), (b"[" * 1000, 3), (b"]" * 3000, 1), (b"}", 2)])
    assert gzip.decompress(gz.read_bytes()) == b"{" + b"[" * 3000 + b"]" * 3000 + b"}}"


EVENTS = b'{"traceEvents":[' + json.dumps(json.loads(VALID)["traceEvents"]).encode()[1:-1] + b","
PAD = b'{"ph":"i","name":"pad","ts":1,"pid":1,"tid":1},' * (MB // 48)  # about 1 MB of events
BOMBS = {  # where the nesting is: the event list itself, the whole document, one event after real ones
    "list": [(b'{"traceEvents":[', 1), (b"[" * MB, 1024), (b"]" * MB, 1024), (b"]}", 1)],
    "document": [(b"[" * MB, 1024), (b"]" * MB, 1024)],
    "late event": [(EVENTS, 1), (b" " * MB, 20), (b'{"args":', 1), (b"[" * MB, 1024), (b"]" * MB, 1024)],
    "late in a bare list": [(b"[", 1), (PAD, 10), (b"[" * MB, 1024), (b"]" * MB, 1024)],  # streamed alike
    # the stream gives up (an event of the wrong type; an object without "traceEvents" past 64 MB): the
    # document is then decoded whole, once its depth has been read as it streams
    "after a bad event": [(EVENTS, 1), (b'{"ts":"x"},', 1), (PAD, 10), (b"[" * MB, 1024), (b"]" * MB, 1024)],
    "no event list near the start": [(b'{"other":[', 1), (PAD, 70), (b"[" * MB, 1024), (b"]" * MB, 1024)],
}


@pytest.mark.parametrize("kind", list(BOMBS))
def test_a_2_gb_nesting_bomb_is_refused_in_bounded_memory(tmp_path: Path, kind: str) -> None:
    # GIVEN ~2 MB of gzip holding 2 GiB of JSON nested a GiB deep
    bomb = repeated_gzip(tmp_path / "nest.json.gz", BOMBS[kind])
    assert bomb.stat().st_size < 8 * MB
    # WHEN analysed (the default limit, 4,096 MB, would let it inflate whole)
    code, err, rss = peak_rss_mb(["analyze", "--no-cache", "-q", str(bomb)])
    # THEN one line refuses it, and memory never held more than a few blocks of it
    assert (code, err) == (2, f"stallscope: error: {bomb}: invalid JSON (nested too deeply)")
    assert rss < 300, rss


def test_a_nesting_bomb_in_a_second_gzip_member_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    # GIVEN gzip members one after the other (``cat a.gz b.gz``): the list's start, then 2 GiB of nesting
    first = gzip_stream(tmp_path / "a.gz", [b'{"traceEvents":['])
    second = repeated_gzip(tmp_path / "b.gz", BOMBS["document"])
    bomb = tmp_path / "nest.json.gz"
    bomb.write_bytes(first.read_bytes() + second.read_bytes())
    # WHEN analysed THEN the members stream as one: one line refuses it in bounded memory
    code, err, rss = peak_rss_mb(["analyze", "--no-cache", "-q", str(bomb)])
    assert (code, err) == (2, f"stallscope: error: {bomb}: invalid JSON (nested too deeply)")
    assert rss < 300, rss


def test_a_trace_in_several_gzip_members_is_streamed(tmp_path: Path) -> None:
    # GIVEN a trace large enough to stream (>= 64 KB of gzip), cut in three gzip members, and the same
    # JSON in one member
    pad = os.urandom(60_000).hex().encode()
    pad_event = b'{"ph":"i","name":"pad","ts":1,"pid":1,"tid":1,"args":{"pad":"%s"}},' % pad
    members = [EVENTS, pad_event, VALID[VALID.index(b"[", VALID.index(b'"traceEvents"')) + 1 :]]
    several, one = tmp_path / "several.json.gz", tmp_path / "one.json.gz"
    several.write_bytes(b"".join(gzip.compress(m, mtime=0) for m in members))
    one.write_bytes(gzip.compress(b"".join(members), mtime=0))
    assert several.stat().st_size > 64 << 10
    # WHEN both are analysed THEN the members read as one document
    summaries = []
    for trace in (several, one):
        out = tmp_path / f"{trace.name}.out.json"
        assert main(["analyze", "--no-cache", "-q", str(trace), "--json", str(out)]) == 0
        summaries.append(json.loads(out.read_text())["summary"])
    assert summaries[0] == summaries[1] and summaries[0]["device_busy_us"] == 10.0


def test_a_nesting_bomb_in_plain_json_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    # GIVEN 200 MB of plain JSON nested 100 MB deep (streamed: not read whole)
    bomb = tmp_path / "nest.json"
    with bomb.open("wb") as f:
        f.write(b'{"traceEvents":[')
        for brackets in (b"[", b"]"):
            for _ in range(100):
                f.write(brackets * MB)
    code, err, rss = peak_rss_mb(["analyze", "--no-cache", "-q", str(bomb)])
    assert (code, err) == (2, f"stallscope: error: {bomb}: invalid JSON (nested too deeply)")
    assert rss < 300, rss


DEEP = sys.getrecursionlimit() + 1


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        (b"[" * (DEEP - 1), False),
        (b"[" * DEEP, True),
        (b'{"a":' * DEEP, True),
        (b'"' + b"[" * DEEP + b'"', False),  # brackets in a string
        (b'"a\\\\"' + b"[" * DEEP, True),  # an escaped backslash: the string ends at the quote
        (b'"a\\\\"' + b"[]" * DEEP, False),
        (b'"a\\"b' + b"[" * DEEP + b'"', False),  # an escaped quote leaves the string open
        (b'"a\\\\\\"b' + b"[" * DEEP + b'"', False),
        (b'"a\\\\\\\\"' + b"[" * DEEP, True),
    ],
)
@pytest.mark.parametrize("size", [1, 2, 3, 7, 1 << 20])
def test_depth_is_read_as_it_streams_outside_strings(text: bytes, refused: bool, size: int) -> None:
    # GIVEN JSON text cut in blocks of `size` bytes (a backslash and what it escapes may be split)
    cut = (text[i : i + size] for i in range(0, len(text), size))
    # WHEN its depth is checked THEN only brackets outside strings count, at the interpreter's limit
    if refused:
        with pytest.raises(TooDeep):
            check_depth(cut)
    else:
        check_depth(cut)


def test_nesting_just_under_the_limit_is_not_a_bomb(tmp_path: Path) -> None:
    # GIVEN a streamed trace whose last event (9 MB: no cut in it) holds args nested 500 deep
    pad = os.urandom(4_500_000).hex().encode()
    deep = b'{"ph":"i","name":"deep","ts":1,"pid":1,"tid":1,"args":{"a":' + b"[" * 500 + b"]" * 500
    trace = gzip_stream(tmp_path / "deep.json.gz", [EVENTS, deep, b',"pad":"', pad, b'"}}]}'])
    out = tmp_path / "a.json"
    # WHEN analysed THEN it loads (500 deep is deep, not too deep) with its events
    assert main(["analyze", "--no-cache", "-q", str(trace), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["summary"]["device_busy_us"] == 10.0


VALID_EVENTS = [json.dumps(e).encode() for e in json.loads(VALID)["traceEvents"]]
FIRST, REST = VALID_EVENTS[0], b",".join(VALID_EVENTS[1:])
GIB_OF_SPACES = (b" " * MB, 1024)
INSIDE = FIRST.index(b",") + 1  # after the first event's first key and value
SPACED = {  # 1 GiB of whitespace in the middle of a document, where JSON allows it (between tokens)
    "after a comma between events": [
        (b'{"traceEvents":[' + FIRST + b",", 1),
        GIB_OF_SPACES,
        (REST + b"]}", 1),
    ],
    "before a comma between events": [
        (b'{"traceEvents":[' + FIRST, 1),
        GIB_OF_SPACES,
        (b"," + REST + b"]}", 1),
    ],
    "inside an event": [
        (b'{"traceEvents":[' + FIRST[:INSIDE], 1),
        GIB_OF_SPACES,
        (FIRST[INSIDE:] + b"," + REST + b"]}", 1),
    ],
    "after the event list": [(b'{"traceEvents":[' + FIRST + b"," + REST + b"]", 1), GIB_OF_SPACES, (b"}", 1)],
    "before the event list": [
        (b'{"schemaVersion":1,', 1),
        GIB_OF_SPACES,
        (b'"traceEvents":[' + FIRST + b"," + REST + b"]}", 1),
    ],
    "in a bare list": [(b"[" + FIRST + b",", 1), GIB_OF_SPACES, (REST + b"]", 1)],
    # an event of the wrong type: the stream gives up and the document is decoded whole, read squeezed
    "after an event the stream cannot read": [
        (b'{"traceEvents":[{"ts":"x"},' + FIRST + b",", 1),
        GIB_OF_SPACES,
        (REST + b"]}", 1),
    ],
}


@pytest.mark.parametrize("where", list(SPACED))
def test_a_gib_of_whitespace_inside_the_document_is_analysed_in_bounded_memory(
    tmp_path: Path, where: str
) -> None:
    # GIVEN ~1 MB of gzip holding a trace with 1 GiB of whitespace between two of its tokens
    trace = repeated_gzip(tmp_path / "spaced.json.gz", SPACED[where])
    assert trace.stat().st_size < 2 * MB
    out = tmp_path / "a.json"
    # WHEN analysed THEN it reads as the trace without the whitespace, which memory never held
    code, err, rss = peak_rss_mb(["analyze", "--no-cache", "-q", str(trace), "--json", str(out)])
    assert code == 0, err
    assert json.loads(out.read_text())["summary"]["device_busy_us"] == 10.0
    assert rss < 250, rss


def test_a_bare_list_of_events_is_streamed_in_bounded_memory(tmp_path: Path) -> None:
    # GIVEN a bare list (no "traceEvents" around it) of 150 MB of JSON: 3.9 million events of a phase
    # stallscope does not read, then a kernel and its launch. Decoded whole it takes 570 MB (the text
    # and a slice of it per event).
    unread = b'{"ph":"q","name":"pad","pid":1,"tid":1},' * (MB // 40)
    trace = repeated_gzip(
        tmp_path / "bare.json.gz", [(b"[", 1), (unread, 150), (b",".join(VALID_EVENTS) + b"]", 1)]
    )
    out = tmp_path / "a.json"
    # WHEN analysed THEN it streams as the wrapped form does: memory holds a batch of it at a time
    code, err, rss = peak_rss_mb(["analyze", "--no-cache", "-q", str(trace), "--json", str(out)])
    assert code == 0, err
    assert json.loads(out.read_text())["summary"]["device_busy_us"] == 10.0
    assert rss < 300, rss


def test_millions_of_tiny_events_are_refused_by_count(tmp_path: Path) -> None:
    # GIVEN 100,000 events of 26 bytes each: 2.6 MB of JSON, but as many events as 20 MB of real ones
    event = b'{"ph":"X","ts":1,"dur":1},'
    trace = gzip_stream(tmp_path / "tiny.json.gz", [b'{"traceEvents":[', event * 100_000, b"{}]}"])
    err = tmp_path / "err"
    # WHEN analysed with --max-inflated-mb 10 (at most 66,666 events: one per 150 bytes)
    with err.open("w") as f, pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "stderr", f)
        code = main(["analyze", "--no-cache", "-q", "--max-inflated-mb", "10", str(trace)])
    # THEN it is refused with one line before the model is built
    assert code == 2
    assert err.read_text() == (
        f"stallscope: error: {trace}: more than 66,666 events (the limit that comes with --max-inflated-mb)\n"
    )
