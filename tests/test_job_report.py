"""The job section of the HTML report: heatmaps, skew charts, and trace text kept as text."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from synth.job import Plant, build_job

from stallscope.analyzer.job.execute import Execution
from stallscope.commands import main
from stallscope.dashboard import report
from stallscope.jobs import load_and_analyse_job

HOSTILE = "<script>alert('x')</script>&"


@pytest.fixture
def job_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "job"
    build_job(folder, 3, 3, [Plant(rank=1, step=2, cause="host", us=1500.0)])
    return folder


def _figure(page: str, name: str) -> dict[str, object]:
    m = re.search(rf'<script type="application/json" id="chart-{name}-data">(.*?)</script>', page, re.S)
    assert m, name
    return dict(json.loads(m.group(1)))


def test_report_of_a_job_has_heatmaps_and_a_skew_chart(job_folder: Path) -> None:
    result, job = load_and_analyse_job([str(job_folder)], None, Execution(use_cache=False))
    assert job is not None
    page = report.render(result, job=job)
    assert '<section id="job" data-ranks="3"' in page
    for key in ("wall_us", "device_idle_us", "collective_wait_us"):
        table = page.split(f'id="heatmap-{key}"', 1)[1].split("</table>", 1)[0]
        assert table.count("<tr>") == 1 + 3  # the header and one row per rank
        assert table.count("data-value=") == 3 * 3
    skew = _figure(page, "skew-0")
    bars = skew["data"][0]  # type: ignore[index]
    assert bars["y"] == pytest.approx([i.skew_us / 1000 for i in job.instances])  # type: ignore[index]
    assert "rank 1 last" in bars["customdata"][2]  # type: ignore[index]
    # AND a click on a rank goes to its own summary, which says how to make its own report
    targets = set(re.findall(r'href="#(rank-\d+)"', page))
    assert targets == {"rank-0", "rank-1", "rank-2"}
    for t in targets:
        row = page.split(f'id="{t}"', 1)[1].split("</tr>", 1)[0]
        rank = t.split("-")[1]
        assert rank == "0" or f"--rank {rank}</td>" in row


def test_trace_text_in_the_job_section_is_escaped(job_folder: Path) -> None:
    result, job = load_and_analyse_job([str(job_folder)], None, Execution(use_cache=False))
    assert job is not None
    hostile = tuple(replace(i, site=HOSTILE, name=HOSTILE) for i in job.instances)
    finding = replace(job.findings[0], title=HOSTILE, site=HOSTILE)
    page = report.render(result, job=replace(job, instances=hostile, findings=(finding,)))
    assert HOSTILE not in page and "<script>alert" not in page
    assert "&lt;script&gt;alert(" in page  # shown as text in the tables
    skew = page.split('id="chart-skew-0-data">', 1)[1].split("</script>", 1)[0]
    assert "\\u0026lt;script\\u0026gt;alert(" in skew  # html-escaped for plotly, then JSON-escaped


def test_report_command_on_a_job_folder(job_folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "job.html"
    assert main(["report", str(job_folder), "-o", str(out), "-q"]) == 0
    page = out.read_text()
    assert '<section id="job"' in page and "rank 1 reached 1 collective late" in page
