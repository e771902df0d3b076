"""The dashboard's job page: an uploaded rank folder (tar.gz) gets the job analysis and its page."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from synth.job import Plant, build_job

from stallscope.dashboard.pages import job as job_page
from stallscope.dashboard.pages import render
from stallscope.dashboard.services import Services
from stallscope.dashboard.store import Store
from stallscope.dashboard.worker import analyse_entry

MB = 1 << 20


def _upload(services: Services, name: str, data: bytes) -> str:
    entry = services.store.add(name, io.BytesIO(data), 64 * MB)
    assert analyse_entry(str(services.store.root), entry.id) == "ready"
    return entry.id


def _texts(component: Any) -> list[str]:
    if isinstance(component, str):
        return [component]
    children = getattr(component, "children", None)
    out: list[str] = []
    for child in children if isinstance(children, list | tuple) else [children]:
        if child is not None and not isinstance(child, int | float):
            out += _texts(child)
    return out


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    yield Services(Store(tmp_path_factory.mktemp("store")), None, 64 * MB)


@pytest.fixture(scope="module")
def uploaded(services: Services, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    folder = tmp_path_factory.mktemp("job")
    build_job(folder, 3, 3, [Plant(rank=2, step=1, cause="input", us=1500.0)])
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for f in sorted(folder.iterdir()):
            tar.add(f, arcname=f"job/{f.name}")
    return _upload(services, "job.tar.gz", buf.getvalue()), folder


def test_an_uploaded_rank_folder_is_analysed_as_a_job(services: Services, uploaded: tuple[str, Path]) -> None:
    trace_id, _ = uploaded
    job = services.store.analysis(trace_id)["job"]
    assert [r["rank"] for r in job["ranks"]] == [0, 1, 2]
    assert all("/" not in r["path"] for r in job["ranks"])  # never the server's folders
    worst = job["collectives"]["worst"][0]
    assert (worst["straggler"], worst["cause"], worst["number"]) == (2, "input", 1)


def test_job_page_heatmap_and_a_click_on_a_rank(services: Services, uploaded: tuple[str, Path]) -> None:
    trace_id, _ = uploaded
    page = render(services, f"/trace/{trace_id}/job")
    words = " ".join(_texts(page))
    assert "rank 2 reached 1 collective late" in words
    doc = services.store.analysis(trace_id)
    fig = job_page.on_metric(services, trace_id, "collective_wait_us")
    z = fig.data[0].z
    cells = {(c["rank"], c["step"]): c["collective_wait_us"] / 1000 for c in doc["job"]["heatmap"]}
    steps = list(fig.data[0].x)
    assert [[pytest.approx(cells[(r, s)]) for s in steps] for r in (0, 1, 2)] == [list(row) for row in z]
    detail = job_page.on_rank(services, trace_id, {"points": [{"y": 2}]}, None)
    assert detail.id == "job-rank-2" and "1×" in _texts(detail)
    by_table = job_page.on_rank(services, trace_id, None, {"row": 0, "column": 0, "row_id": 1})
    assert by_table.id == "job-rank-1"


def test_a_single_trace_has_no_job_page(services: Services, uploaded: tuple[str, Path]) -> None:
    _, folder = uploaded
    trace_id = _upload(services, "rank0.pt.trace.json.gz", (folder / "rank0.pt.trace.json.gz").read_bytes())
    assert services.store.analysis(trace_id)["job"] is None
    assert "a single rank: no job to analyse" in _texts(render(services, f"/trace/{trace_id}/job"))


def test_analyse_set_gives_what_analyze_gives_plus_the_job(uploaded: tuple[str, Path]) -> None:
    from stallscope.analyzer.analysis import analyze
    from stallscope.analyzer.document.analysis import to_json
    from stallscope.analyzer.job.loaded import analyse_set
    from stallscope.analyzer.load.loader import load

    _, folder = uploaded
    traces = load(folder, use_cache=False)
    result, job = analyse_set(traces, 1)
    assert to_json(result) == to_json(analyze(traces, 1))
    assert job is not None and job.ranks == (0, 1, 2) and job.instances[1].straggler == 2
