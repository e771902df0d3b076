"""The bad-input corpus (DESIGN.md §6), through the CLI in-process.

A trace that cannot be used ends in exit code 2 and exactly one line on stderr naming the file and the
problem, never a traceback. Each input is also run with the streaming decoder forced on (it is normally
used only for files of 1 MiB or more), since its failures must fall back to the same precise message.
A trace that is only partly bad loads, and says what it skipped.

A run that is still going after a second shows progress lines on stderr (``stallscope.progress``); on a
loaded machine even these small inputs can take that long, so the progress display is held back here
and the stderr checked is the error alone, whatever the machine's load.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import pytest
from _kineto import SAMPLES, document, launch_pair, span, write_trace_file

import stallscope.analyzer.load.loader
import stallscope.progress
from stallscope.analyzer.load.loader import load
from stallscope.collector.bundle import launcher_rank
from stallscope.commands import main

SAMPLE = SAMPLES / "item_in_loop.pt.trace.json.gz"

Maker = Callable[[Path], Path]


def write(name: str, data: bytes) -> Maker:
    def make(tmp: Path) -> Path:
        path = tmp / name
        path.write_bytes(data)
        return path

    return make


def noise(n: int, seed: int = 7) -> bytes:
    data = random.Random(seed).randbytes(n)
    return b"x" + data[1:]  # never the gzip magic by chance


def missing(tmp: Path) -> Path:
    return tmp / "does_not_exist.pt.trace.json"


def folder_without_traces(tmp: Path) -> Path:
    folder = tmp / "no_traces"
    folder.mkdir()
    (folder / "notes.txt").write_text("hello")
    (folder / "sidecar.json").write_text("{}")  # the collector's sidecar is not a trace
    return folder


def folder_of_bad_traces(tmp: Path) -> Path:
    folder = tmp / "all_bad"
    folder.mkdir()
    (folder / "a.pt.trace.json").write_text("")
    (folder / "b.pt.trace.json").write_text("{")
    return folder


def first_half(path: Path) -> bytes:
    data = path.read_bytes()
    return data[: len(data) // 2]


#: (id, maker, words the one-line message must contain)
CORPUS: list[tuple[str, Maker, str]] = [
    ("missing path", missing, "no such file or directory"),
    ("folder without traces", folder_without_traces, "directory contains no trace files"),
    ("folder of bad traces", folder_of_bad_traces, "none of 2 trace files loads"),
    ("random bytes named .json.gz", write("random.json.gz", noise(3000)), "not a valid gzip file"),
    (
        "gzip header then garbage",
        write("corrupt.json.gz", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + noise(500)),
        "gzip",
    ),
    ("truncated gzip", write("half.json.gz", first_half(SAMPLE)), "truncated gzip file"),
    (
        "truncated JSON",
        write("half.json", gzip.decompress(SAMPLE.read_bytes())[:20000]),
        "truncated JSON",
    ),
    ("empty file", write("empty.json", b""), "empty file"),
    ("empty .json.gz", write("empty.json.gz", b""), "empty file"),
    ("gzip of nothing", write("nothing.json.gz", gzip.compress(b"")), "empty file"),
    ("whitespace only", write("blank.json", b" \n\t\n"), "empty file"),
    ("object without traceEvents", write("hello.json", b'{"hello": 1}'), "not a trace"),
    ("traceEvents not a list", write("five.json", b'{"traceEvents": 5}'), "not a trace"),
    ("bare list of numbers", write("numbers.json", b"[1, 2, 3]"), "not a trace: no element"),
    ("zero events", write("zero.json", b'{"traceEvents": []}'), "no events (the event list is empty)"),
    ("not JSON", write("text.json", b"this is not a trace\n"), "not JSON"),
    ("gzipped text", write("text.json.gz", gzip.compress(b"hello world\n")), "not JSON"),
    ("trailing garbage", write("trailing.json", b'{"traceEvents": []} xyz'), "invalid JSON"),
    ("deeply nested", write("deep.json", b'{"traceEvents": ' + b"[" * 100_000), "nested too deeply"),
    (
        "only metadata",
        write("meta.json", json.dumps({"traceEvents": [{"ph": "M", "name": "thread_name"}]}).encode()),
        "no timed events",
    ),
    (
        "no usable timestamp",
        write("nots.json", json.dumps({"traceEvents": [{"ph": "X", "name": "a", "dur": 1}]}).encode()),
        "no events with a usable timestamp",
    ),
    (
        "number out of range in the top level",
        write("dp.json", b'{"deviceProperties": [{"id": 0, "x": 1e400}], "traceEvents": []}'),
        "unusable JSON",
    ),
]


class _HeldBack(stallscope.progress.Progress):
    """Progress that shows nothing for an hour (instead of a second)."""

    def __init__(self, stream: TextIO | None = None, delay: float = 1.0, enabled: bool = True) -> None:
        super().__init__(stream, 3600.0, enabled)


@pytest.fixture(autouse=True)
def no_progress_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stallscope.progress, "Progress", _HeldBack)


@pytest.fixture(params=["whole", "streaming"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "streaming":
        monkeypatch.setattr(stallscope.analyzer.load.loader, "_STREAM_MIN_BYTES", 0)
    return str(request.param)


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("stallscope: error: ")
    return lines[0]


@pytest.mark.parametrize(("make", "problem"), [c[1:] for c in CORPUS], ids=[c[0] for c in CORPUS])
def test_unusable_input_is_one_clear_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], decoder: str, make: Maker, problem: str
) -> None:
    # GIVEN an unusable input
    path = make(tmp_path)
    # WHEN analysed
    code = main(["analyze", str(path)])
    # THEN exit code 2 and one line naming the file and the problem
    assert code == 2
    line = one_error_line(capsys)
    assert str(path) in line
    assert problem in line


def test_unknown_rank_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a folder with ranks 0 and 1
    for rank in (0, 1):
        doc = document(launch_pair(0, 1, 30, 5, ext=1), distributedInfo={"rank": rank, "world_size": 2})
        write_trace_file(tmp_path / f"worker{rank}.pt.trace.json", doc)
    # WHEN rank 5 is asked for
    code = main(["analyze", str(tmp_path), "--rank", "5"])
    # THEN exit 2 and a message that lists the ranks there are
    assert code == 2
    assert one_error_line(capsys) == f"stallscope: error: --rank 5: {tmp_path} has ranks 0, 1"


def test_json_into_missing_directory_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "no" / "such" / "dir" / "out.json"
    code = main(["analyze", str(SAMPLE), "--json", str(out)])
    assert code == 2
    line = one_error_line(capsys)
    assert f"--json {out}: cannot write" in line and "No such file or directory" in line
    assert not out.exists()


def test_bad_option_is_exit_2_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(SAMPLE), "--rank", "one"]) == 2
    assert "invalid int value" in capsys.readouterr().err
    assert main([]) == 2  # no command: help, exit 2


# ----- partly bad traces: the rest is analysed, and what was skipped is said ---------------------------


def partly_bad(bad_event: bytes) -> bytes:
    """A valid trace with one raw (possibly invalid) JSON event spliced in among good ones."""
    good = [e for i in range(5) for e in launch_pair(100 * i, 10 + i, 100 * i + 40, 20, ext=i + 1)]
    head, tail = json.dumps(document(good)).encode().rsplit(b"]", 1)
    return head + b", " + bad_event + b"]" + tail


PARTLY_BAD = [
    (
        "invalid UTF-8 in a name",
        b'{"ph": "X", "cat": "cpu_op", "name": "\xff\xfe", "ts": 5, "dur": 1}',
        {"event: not UTF-8 text": 1},
    ),
    (
        "timestamp out of float range",
        b'{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1e400, "dur": 1}',
        {"event: number out of range": 1},
    ),
    (
        "end beyond any clock",
        b'{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1.7e308, "dur": 1.7e308}',
        {"time out of range": 1},
    ),
    (
        "timestamp a boolean",
        b'{"ph": "X", "cat": "cpu_op", "name": "a", "ts": true, "dur": 1}',
        {"ts: not a number (bool)": 1},
    ),
    (
        "args not an object",
        b'{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 3, "dur": 1, "args": [1]}',
        {"args: wrong type (array)": 1},
    ),
]


@pytest.mark.parametrize(
    ("bad_event", "skipped"), [c[1:] for c in PARTLY_BAD], ids=[c[0] for c in PARTLY_BAD]
)
def test_partly_bad_trace_is_analysed_and_the_bad_event_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad_event: bytes, skipped: dict[str, int]
) -> None:
    # GIVEN five good launches and one unusable event
    path = tmp_path / "partly_bad.json"
    path.write_bytes(partly_bad(bad_event))
    # WHEN analysed, with the JSON result written
    out = tmp_path / "out.json"
    assert main(["analyze", str(path), "--json", str(out), "--no-cache"]) == 0
    # THEN the good events are all there, and the skipped one is counted and reported
    result = json.loads(out.read_text())
    assert result["source"]["events"] == 15
    assert result["source"]["skipped"] == skipped
    assert result["devices"][0]["busy_us"] == 100.0
    assert "skipped" in capsys.readouterr().out


def test_huge_process_and_thread_ids_are_kept(write_trace: Callable[..., Path]) -> None:
    # GIVEN ids beyond 64 bits (some writers use strings or hashes for pid/tid)
    events = [
        span("cpu_op", "aten::add", 0, 10, pid=2**70, tid=2**80),
        span("cpu_op", "aten::mul", 20, 10, pid="worker", tid=2**65),
        {**span("kernel", "k", 5, 3), "pid": 0, "tid": 2**64},
    ]
    m = load(write_trace(document(events))).models[0]
    # THEN every event is kept on a lane of its own
    assert m.event_count == 3
    assert len({int(x) for x in m.events.lane}) == 3
    assert {lane.pid for lane in m.lanes} >= {str(2**70), "worker"}


@pytest.mark.parametrize(
    ("rank", "world", "expected"),
    [
        ("1", "4", 1),
        ("²", "4", None),
        ("1", "⁴", None),
        ("١", "4", None),
        ("0", "1", None),
        ("9" * 5000, "4", None),
    ],
)
def test_launcher_rank_reads_only_ascii_digits(rank: str, world: str, expected: int | None) -> None:
    # GIVEN RANK / WORLD_SIZE as a launcher (or a hostile environment) sets them THEN only ASCII numbers count
    assert launcher_rank({"RANK": rank, "WORLD_SIZE": world}) == expected
