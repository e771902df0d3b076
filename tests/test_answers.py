"""The answer cache: a second ``analyze`` of an unchanged trace with the same options is served from the
cache, byte for byte; a changed trace, option or code, and ``--no-cache``, never get a stored answer."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from _kineto import SAMPLES

import stallscope.jobs
from stallscope import answers
from stallscope.commands import main

SAMPLE = SAMPLES / "item_in_loop.pt.trace.json.gz"
OTHER = SAMPLES / "input_bound.pt.trace.json.gz"


def analyse(capsys: pytest.CaptureFixture[str], trace: Path, out: Path, *options: str) -> tuple[str, bytes]:
    assert main(["analyze", str(trace), "--json", str(out), *options]) == 0
    return capsys.readouterr().out, out.read_bytes()


def no_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on, loading and analysing a trace fails the test."""

    def fail(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("the trace was analysed, not served from the answer cache")

    monkeypatch.setattr(stallscope.jobs, "load_and_analyse_job", fail)


def test_second_analyze_is_served_from_the_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a trace analysed once
    first = analyse(capsys, SAMPLE, tmp_path / "a.json")
    # WHEN it is analysed again with the same options, and analysing is made impossible
    no_analysis(monkeypatch)
    second = analyse(capsys, SAMPLE, tmp_path / "b.json")
    # THEN the summary and the JSON document are those of the first run, byte for byte
    assert second == (first[0].replace("a.json", "b.json"), first[1])
    # ... and so are the quiet and stdout forms
    assert main(["analyze", str(SAMPLE), "-q"]) == 0
    assert capsys.readouterr() == ("", "")
    assert main(["analyze", str(SAMPLE), "--json", "-"]) == 0
    assert capsys.readouterr().out.encode() == first[1]


def test_a_changed_trace_is_analysed_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a trace file analysed once
    trace = tmp_path / "run.pt.trace.json.gz"
    shutil.copyfile(SAMPLE, trace)
    before = analyse(capsys, trace, tmp_path / "a.json")
    # WHEN the file at the same path is replaced by another trace
    fresh = tmp_path / "fresh.json.gz"
    shutil.copyfile(OTHER, fresh)
    os.replace(fresh, trace)
    after = analyse(capsys, trace, tmp_path / "a.json")
    # THEN the answer is the new trace's, as a run without any cache gives it
    assert after != before
    assert after == analyse(capsys, trace, tmp_path / "a.json", "--no-cache")


def test_same_size_and_time_but_new_content_is_analysed_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a trace analysed once
    trace = tmp_path / "t.json"
    text = SAMPLE.read_bytes()
    trace.write_bytes(text)
    stat = trace.stat()
    before = analyse(capsys, trace, tmp_path / "a.json")
    # WHEN its bytes change but its size and modification time are put back (the stat index cannot tell)
    damaged = bytearray(text)
    damaged[-20] ^= 0xFF
    os.remove(trace)
    trace.write_bytes(bytes(damaged))
    os.utime(trace, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    # THEN it is not served the old answer: a new inode is a new version of the file
    code = main(["analyze", str(trace), "--json", str(tmp_path / "b.json")])
    out = capsys.readouterr()
    assert code == 2 or (out.out, (tmp_path / "b.json").read_bytes()) != before


@pytest.mark.parametrize(
    "options",
    [["--top", "1"], ["--top-ops", "2"], ["--rank", "0"], ["--max-inflated-mb", "100"]],
)
def test_other_options_are_other_answers(
    options: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a trace analysed with the default options
    analyse(capsys, SAMPLE, tmp_path / "a.json")
    # WHEN it is analysed with another option
    cached = analyse(capsys, SAMPLE, tmp_path / "b.json", *options)
    # THEN the answer is the one a run without any cache gives for that option
    assert cached == analyse(capsys, SAMPLE, tmp_path / "b.json", *options, "--no-cache")
    assert len(list(answers.answers_root().iterdir())) == 2


def test_other_code_is_another_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a trace analysed once
    analyse(capsys, SAMPLE, tmp_path / "a.json")
    # WHEN the analyzer's code changes (its fingerprint), the trace is analysed again
    monkeypatch.setattr(answers, "code_fingerprint", lambda: "edited")
    analyse(capsys, SAMPLE, tmp_path / "a.json")
    assert len(list(answers.answers_root().iterdir())) == 2


def test_no_cache_neither_reads_nor_writes_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # WHEN analysed with --no-cache, no answer is stored
    analyse(capsys, SAMPLE, tmp_path / "a.json", "--no-cache")
    assert not answers.answers_root().exists()
    # ... and a stored answer is not read
    analyse(capsys, SAMPLE, tmp_path / "a.json")

    def fail(_key: str) -> answers.Answer:
        raise AssertionError("--no-cache read the answer cache")

    monkeypatch.setattr(answers, "lookup", fail)
    analyse(capsys, SAMPLE, tmp_path / "a.json", "--no-cache")


def test_a_partial_or_damaged_entry_is_remade(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN an answer stored without its JSON document (a run without --json) and a damaged summary
    assert main(["analyze", str(SAMPLE), "-q"]) == 0
    (entry,) = answers.answers_root().iterdir()
    assert not (entry / "analysis.json").exists()
    (entry / "summary.txt").write_bytes(b"\xff\xfe")
    # WHEN analysed with --json
    got = analyse(capsys, SAMPLE, tmp_path / "a.json")
    # THEN it is analysed again, and the entry now holds both parts
    assert got == analyse(capsys, SAMPLE, tmp_path / "a.json", "--no-cache")
    assert (entry / "analysis.json").read_bytes() == got[1]


def test_folders_are_not_cached(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a folder of rank files has several files and a sidecar beside them: its answer is not cached
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copyfile(SAMPLE, folder / SAMPLE.name)
    analyse(capsys, folder, tmp_path / "a.json")
    assert not answers.answers_root().exists()


@pytest.mark.parametrize("lib", ["msgspec", "numpy", "no_such_library_anywhere"])
def test_the_fingerprint_reads_each_library_version_as_importlib_metadata_does(lib: str) -> None:
    # GIVEN a library the answers depend on (or one not installed)
    from importlib import metadata

    try:
        want: str | None = metadata.version(lib)
    except metadata.PackageNotFoundError:
        want = None
    # THEN the version read from its dist-info folder's name is importlib.metadata's
    assert answers._installed_version(lib) == want
