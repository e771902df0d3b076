"""What a reader of the HTML report sees first and reads: a job opens on the job's verdict with the
straggler's timeline; the lateness heatmap marks the straggler; no raw Markdown; demangled kernel names;
glossary links that land. Builder traces, and the shared real traces when present."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from synth.job import Plant, build_job
from test_report import Page

from stallscope.analyzer.analysis import analyze
from stallscope.analyzer.document.job import job_json
from stallscope.analyzer.job.execute import Execution
from stallscope.analyzer.load.loader import load
from stallscope.dashboard import job_report, report
from stallscope.jobs import load_and_analyse_job, timeline_ranks

DLRM = "param_dlrm_v100_8rank"


def _job_page(folder: Path) -> tuple[str, dict[str, object]]:
    how = Execution(use_cache=False)
    result, job = load_and_analyse_job([str(folder)], None, how)
    assert job is not None
    page = report.render(
        result, report.ReportOptions(cdn=True), job=job, ranks=timeline_ranks(job, result, how)
    )
    return page, job_json(job)


@pytest.fixture(scope="module")
def planted_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, object]]:
    # GIVEN 3 ranks where rank 1 is 1.5 ms late into step 2 (host work)
    folder = tmp_path_factory.mktemp("job") / "job"
    build_job(folder, 3, 3, [Plant(rank=1, step=2, cause="host", us=1500.0)])
    return _job_page(folder)


def _visible_text(page: str) -> str:
    p = Page(page)
    return " ".join("".join(t) for tag, _a, t in p.elements if tag not in ("style", "title"))


def _luminance(colour: str) -> float:
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_a_job_report_opens_on_the_job_verdict_and_the_stragglers_timeline(
    planted_job: tuple[str, dict[str, object]],
) -> None:
    page, job = planted_job
    p = Page(page)
    # THEN the first section and heading are the job's, naming the straggler
    sections = [a.get("id") for tag, a, _t in p.elements if tag == "section"]
    assert sections[0] == "job-verdict" and sections.index("job-verdict") < sections.index("verdict")
    first_h2 = next(" ".join("".join(t).split()) for tag, _a, t in p.elements if tag == "h2")
    assert first_h2.startswith("Job verdict (3 ranks")
    attrs, sentence = p.by_id("job-verdict")
    assert attrs["data-straggler"] == "1" and sentence.startswith("Job verdict")
    assert "Rank 1 held the job back" in sentence
    saving = job["whatif"][0]["saving_us"]  # type: ignore[index]
    assert f"saves {report.ms(saving)}" in sentence and f"−{report.ms(saving)}" not in page
    # AND the navigation leads with a Job link to it
    links = [a["href"] for tag, a, _t in p.elements if tag == "a" and a.get("href", "").startswith("#")]
    assert links[0] == "#job-verdict"
    # AND every rank is listed with its wall, device busy and waiting, the straggler first
    rows = [a for tag, a, _t in p.elements if tag == "tr" and "data-rank" in a]
    assert [r["data-rank"] for r in rows][:1] == ["1"] and len(rows) >= 3
    # AND the detailed rank (0) has the interactive timeline; the other ranks are behind a picker whose
    # first panel, shown, is the straggler's, the rest one click away (drawn on demand)
    assert 'id="timeline-0-data"' in page and 'id="timeline-0-columns"' in page
    panels = [a for tag, a, _t in p.elements if "rank-timelines" in a.get("class", "").split()]
    assert panels[0]["data-rank"] == "1" and "hidden" not in panels[0]
    assert all("hidden" in a for a in panels[1:]) and len(panels) == 2
    assert sorted(a["data-rank"] for tag, a, _t in p.elements if tag == "button" and "data-rank" in a) == [
        "1",
        "2",
    ]
    assert 'id="timeline-rank1-0-data"' in page and 'id="timeline-rank2-0-data"' in page


def test_the_lateness_heatmap_gives_the_straggler_the_strongest_colour(
    planted_job: tuple[str, dict[str, object]],
) -> None:
    page, job = planted_job
    hm = job_report.heatmap(job, job_report.LATE)
    assert job_report.METRICS[0][0] == job_report.LATE  # the heatmap the page shows first
    cells = [(row["rank"], c) for row in hm["rows"] for c in row["cells"] if c["us"] is not None]
    darkest_rank, darkest = min(cells, key=lambda rc: _luminance(rc[1]["background"]))
    assert darkest_rank == job_report.straggler(job) == 1 and darkest["us"] == hm["max_us"] > 0
    table = page.split('id="heatmap-late_us"', 1)[1].split("</table>", 1)[0]
    assert table.index(darkest["background"]) > table.index(">1<")  # that colour is on rank 1's row


def test_the_report_shows_no_raw_markdown_and_its_glossary_links_land(
    planted_job: tuple[str, dict[str, object]],
) -> None:
    page, _job = planted_job
    assert "`" not in _visible_text(page)
    assert "<code>" in page  # the advice's code spans
    ids = set(re.findall(r'id="([^"]+)"', page))
    terms = re.findall(r'<a class="term" href="#([^"]+)"', page)
    assert terms and set(terms) <= ids


@pytest.mark.shared
def test_the_dlrm_job_leads_with_rank_7s_lateness_and_the_saving(shared_traces: Path) -> None:
    page, _job = _job_page(shared_traces / DLRM)
    _a, sentence = Page(page).by_id("job-verdict")
    assert "Rank 7 held the job back" in sentence and "having begun 4.52 ms after the others" in sentence
    assert "it saves 8.01 ms" in sentence
    assert "`" not in _visible_text(page)


@pytest.mark.shared
def test_mangled_kernel_names_are_demangled_in_the_report(shared_traces: Path) -> None:
    pytest.importorskip("pycxxfilt")
    a = analyze(load(shared_traces / "hta_a100_nccl_2rank_rank0.pt.trace.json.gz"))
    page = report.render(a, report.ReportOptions(cdn=True))
    kernels = page.split('id="top-kernels"', 1)[1].split("</table>", 1)[0]
    shown = " ".join(" ".join("".join(t).split()) for _tag, _a, t in Page(kernels).elements)
    assert "cutlass_cudnn_train::Kernel<" in shown and "_ZN19cutlass" not in shown
    assert 'title="_ZN19cutlass_cudnn_train' in kernels  # the raw name stays at hand


@pytest.mark.shared
def test_the_pipeline_model_says_why_it_exceeds_the_recorded_time(shared_traces: Path) -> None:
    # GIVEN a trace whose host and device already overlap inside its one step (pipelined > recorded)
    a = analyze(load(shared_traces / "tracelens_h100_bert_small_pystack.pt.trace.json.gz"))
    assert a.pipeline is not None and a.pipeline.pipelined_us > a.window.dur_us
    page = report.render(a, report.ReportOptions(cdn=True))
    _attrs, note = Page(page).by_id("pipeline-note")
    assert (
        f"so it took {report.ms(a.window.dur_us)}, less than the model's {report.ms(a.pipeline.pipelined_us)}"
        in note
    )
    assert "`" not in _visible_text(page)


def test_skew_charts_tick_on_whole_call_numbers(planted_job: tuple[str, dict[str, object]]) -> None:
    _page, job = planted_job
    for fig in job_report.skew_figures(job).values():
        axis = fig["layout"]["xaxis"]
        assert axis["tickmode"] == "linear" and axis["dtick"] >= 1 and axis["tickformat"] == "d"
        assert float(axis["tick0"]).is_integer()
