"""``stallscope annotate`` as a command (in-process and as a subprocess: where it writes, what it says,
one-line errors) and the dashboard's annotated download."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _kineto import REPO, SAMPLES

from stallscope.analyzer.document.annotate import annotated_name
from stallscope.commands import main

ITEM = SAMPLES / "item_in_loop.pt.trace.json.gz"


def read_json(path: Path) -> Any:
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


# ----- the command --------------------------------------------------------------------------------------


def test_default_output_name_and_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["annotate", "-q", str(ITEM)]) == 0
    out = tmp_path / "item_in_loop.pt.trace.annotated.json.gz"
    assert out.is_file() and read_json(out)["traceEvents"]
    said = capsys.readouterr().out.splitlines()
    assert said[0].startswith(f"stallscope: annotated trace written to {out.name}")
    assert "ui.perfetto.dev" in said[1] and "chrome://tracing" in said[1]
    assert annotated_name("runs/bundle/") == "bundle.annotated.json.gz"
    # written as any file of the user's (the umask's permissions), not as a private temporary file
    assert out.stat().st_mode & 0o644 == 0o644


def test_a_rank_of_a_folder_copies_that_ranks_own_file(tmp_path: Path) -> None:
    from synth.job import build_job

    folder = tmp_path / "job"
    folder.mkdir()
    build_job(folder, 3, 2)
    out = tmp_path / "r2.json.gz"
    assert main(["annotate", "-q", "--rank", "2", "-o", str(out), str(folder)]) == 0
    rank2 = read_json(folder / "rank2.pt.trace.json.gz")
    result = read_json(out)
    assert result["distributedInfo"]["rank"] == 2
    assert result["traceEvents"][: len(rank2["traceEvents"])] == rank2["traceEvents"]


def test_plain_json_output_by_suffix(tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    assert main(["annotate", "-q", "-o", str(out), str(ITEM)]) == 0
    assert out.read_bytes().lstrip()[:1] == b"{"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.json"], "missing.json: no such file or directory"),
        (["-o", "out.txt", str(ITEM)], "give a .json or .json.gz file name"),
        (["-o", "/nonexistent-dir/a.json.gz", str(ITEM)], "folder /nonexistent-dir does not exist"),
        (["notatrace.json"], "not a trace"),
        (["-o", "in.json", "in.json"], "is the input trace"),
    ],
)
def test_bad_input_is_a_one_line_error(
    args: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notatrace.json").write_text('{"hello": 1}')
    (tmp_path / "in.json").write_bytes(gzip.decompress(ITEM.read_bytes()))
    before = (tmp_path / "in.json").read_bytes()
    assert main(["annotate", "-q", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert (tmp_path / "in.json").read_bytes() == before
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))


def test_as_a_subprocess(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "stallscope", "annotate", "-q", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            check=False,
            timeout=120,
        )

    done = run("-o", "x.json.gz", str(ITEM))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("stallscope: annotated trace written to x.json.gz")
    assert read_json(tmp_path / "x.json.gz")["traceEvents"][0] == read_json(ITEM)["traceEvents"][0]
    (tmp_path / "bad.json.gz").write_bytes(b"\x1f\x8b not really gzip")
    bad = run("bad.json.gz")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert bad.stderr.startswith("stallscope: error: bad.json.gz") and "Traceback" not in bad.stderr


# ----- the dashboard ---------------------------------------------------------------------------------------


def test_dashboard_serves_the_annotated_trace(tmp_path: Path) -> None:

    from stallscope.dashboard.app import create_app
    from stallscope.dashboard.pages import overview
    from stallscope.dashboard.services import Services
    from stallscope.dashboard.store import Store
    from stallscope.dashboard.worker import analyse_entry

    services = Services(Store(tmp_path / "store"), None, 64 << 20)
    entry = services.store.add("my run.pt.trace.json.gz", io.BytesIO(ITEM.read_bytes()), 64 << 20)
    assert analyse_entry(str(services.store.root), entry.id) == "ready"
    client = create_app(services).server.test_client()
    answer = client.get(f"/api/traces/{entry.id}/annotated")
    assert answer.status_code == 200
    assert "my run.pt.trace.annotated.json.gz" in answer.headers["Content-Disposition"]
    doc = json.loads(gzip.decompress(answer.data))
    n = len(read_json(ITEM)["traceEvents"])
    assert doc["traceEvents"][:n] == read_json(ITEM)["traceEvents"]
    stored = services.store.analysis(entry.id)
    assert sum(1 for e in doc["traceEvents"][n:] if e["ph"] == "i") == len(stored["findings"])
    # a second request is served from the file written by the first
    assert client.get(f"/api/traces/{entry.id}/annotated").data == answer.data
    assert client.get("/api/traces/" + "0" * 32 + "/annotated").status_code == 404
    # an uploaded rank folder: the file of the rank its analysis is of
    import tarfile

    from synth.job import build_job

    folder = tmp_path / "job"
    folder.mkdir()
    build_job(folder, 2, 2)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for f in sorted(folder.iterdir()):
            tar.add(f, arcname=f"job/{f.name}")
    job = services.store.add("job.tar.gz", io.BytesIO(buf.getvalue()), 64 << 20)
    assert analyse_entry(str(services.store.root), job.id) == "ready"
    rank = services.store.analysis(job.id)["source"]["rank"]
    events = json.loads(gzip.decompress(client.get(f"/api/traces/{job.id}/annotated").data))["traceEvents"]
    own = read_json(folder / f"rank{rank}.pt.trace.json.gz")["traceEvents"]
    assert events[: len(own)] == own
    # and the overview links to it
    panel = overview.perfetto_panel(services.store.get(entry.id))
    link = panel.children[2].children[0]
    assert link.href == f"/api/traces/{entry.id}/annotated" and link.download.endswith(".annotated.json.gz")
