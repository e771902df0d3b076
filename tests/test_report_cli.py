"""``stallscope report`` in-process: where it writes, what it says, and one-line errors (exit code 2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _kineto import REPO, SAMPLES

from stallscope.commands import main
from stallscope.commands.report import default_output

SAMPLE = SAMPLES / "item_in_loop.pt.trace.json.gz"


def test_default_output_is_the_trace_stem_in_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["report", "--cdn", str(SAMPLE)]) == 0
    out = tmp_path / "item_in_loop.report.html"
    assert out.is_file() and out.read_text().startswith("<!DOCTYPE html>")
    said = capsys.readouterr().out
    assert "report written to item_in_loop.report.html" in said
    assert default_output("runs/a.pt.trace.json") == Path("a.report.html")
    assert default_output("bundle_dir/") == Path("bundle_dir.report.html")


def test_output_option_and_rank_of_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "ranks"
    folder.mkdir()
    for r in (0, 1):
        (folder / f"w{r}.pt.trace.json.gz").write_bytes(SAMPLE.read_bytes())
    out = tmp_path / "r.html"
    # both files are rank 0 in their metadata: the folder's ranks are listed and a missing one refused
    assert main(["report", "--cdn", "-o", str(out), "--rank", "7", str(folder)]) == 2
    assert "--rank 7:" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.json"], "missing.json: no such file or directory"),
        (["-o", "/nonexistent-dir/r.html", str(SAMPLE)], "folder /nonexistent-dir does not exist"),
        (["-o", ".", str(SAMPLE)], "is a folder"),
        (["-o", f"{SAMPLE}/r.html", str(SAMPLE)], "is not a folder"),
    ],
)
def test_bad_input_and_unwritable_output_are_one_line_errors(
    args: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["report", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write to read-only folders")
def test_read_only_folder_is_refused_before_the_analysis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        assert main(["report", "-o", str(ro / "r.html"), str(SAMPLE)]) == 2
    finally:
        ro.chmod(0o700)
    assert "cannot write there" in capsys.readouterr().err


def test_as_a_subprocess_the_report_is_written_and_named(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "stallscope", "report", "--cdn", "-q", "-o", "x.html", str(SAMPLE)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("stallscope: report written to x.html")
    assert (tmp_path / "x.html").stat().st_size > 10_000
