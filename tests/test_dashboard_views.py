"""What a reader of the dashboard sees: a job upload leads with the job (overview, job page, traces
list, ``upload --wait``); the lateness heatmap marks the straggler; tables in a readable unit and order;
demangled kernel names; no raw Markdown; a comparison ordered by upload time, swappable, with the ops
``stallscope diff`` shows."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from synth.job import Plant, build_job
from test_dashboard_pages import CLEAN, ITEM, add, find, texts

from stallscope.analyzer.document.diff import compare as compare_sides
from stallscope.analyzer.document.diff import diff_json, side_of
from stallscope.commands.upload import wait_summary
from stallscope.dashboard import job_report
from stallscope.dashboard.pages import compare, overview, render, tables, traces
from stallscope.dashboard.pages import job as job_page
from stallscope.dashboard.services import Services
from stallscope.dashboard.store import Store
from stallscope.dashboard.worker import analyse_entry
from stallscope.display import names

MB = 1 << 20


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    yield Services(Store(tmp_path_factory.mktemp("store")), None, 64 * MB)


@pytest.fixture(scope="module")
def job_id(services: Services, tmp_path_factory: pytest.TempPathFactory) -> str:
    # GIVEN a 3-rank job whose rank 2 is 1.5 ms late into step 1 (data loading), uploaded as a tarball
    folder = tmp_path_factory.mktemp("job")
    build_job(folder, 3, 3, [Plant(rank=2, step=1, cause="input", us=1500.0)])
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for f in sorted(folder.iterdir()):
            tar.add(f, arcname=f"job/{f.name}")
    entry = services.store.add("job.tar.gz", io.BytesIO(buf.getvalue()), 64 * MB)
    assert analyse_entry(str(services.store.root), entry.id) == "ready"
    return entry.id


def test_a_job_upload_leads_with_the_job_everywhere(services: Services, job_id: str) -> None:
    doc = services.store.analysis(job_id)
    saving = doc["job"]["whatif"][0]["saving_us"]
    # THEN the overview's first panel is the job's verdict, naming the straggler
    page = render(services, f"/trace/{job_id}")
    panels = [c for c in page.children if c is not None][1:]  # after the trace's navigation
    assert panels[0] is find(page, overview.Ids.JOB.value) or find(panels[0], overview.Ids.JOB.value)
    sentence = find(page, overview.Ids.JOB.value).children
    assert sentence.startswith("Rank 2 held the job back") and f"saves {job_page.ms(saving)}" in sentence
    # AND the job page leads with it, lists the straggler first, and never shows a negative saving
    jp = render(services, f"/trace/{job_id}/job")
    assert find(jp, job_page.Ids.VERDICT.value).children == sentence
    ranks = find(jp, job_page.Ids.RANKS.value).data
    assert ranks[0]["id"] == 2 and len(ranks) == 3
    assert {"wall", "busy", "waited", "late"} <= set(ranks[0])
    walls = {r["rank"]: r["wall_us"] for r in doc["job"]["ranks"]}
    unit = next(c for c in find(jp, job_page.Ids.RANKS.value).columns if c["id"] == "wall")
    assert unit["type"] == "numeric" and unit["name"] == "wall (ms)"  # sorts as numbers
    assert ranks[0]["wall"] == pytest.approx(walls[2] / 1000, abs=1e-3)
    assert not any(t.startswith("−") for t in texts(jp))
    # AND the traces list and `upload --wait` say who held the job back
    row = next(r for r in traces.rows(services.store.entries(), "") if r["id"] == job_id)
    assert row["ranks"] == 3 and "rank 2 held the job back" in row["job"]
    line = wait_summary(services.store.get(job_id).to_json()["summary"])
    assert line.startswith("job: 3 ranks") and "rank 2 held the job back" in line
    assert f"\n  rank {doc['source']['rank']}: " in line


def test_the_dashboard_heatmap_starts_on_lateness_from_zero(services: Services, job_id: str) -> None:
    jp = render(services, f"/trace/{job_id}/job")
    fig = find(jp, job_page.Ids.HEATMAP.value).figure
    z = fig.data[0].z
    ranks = list(fig.data[0].y)
    top = max(max(v or 0 for v in row) for row in z)
    darkest = [ranks[i] for i, row in enumerate(z) if max(v or 0 for v in row) == top]
    assert fig.data[0].zmin == 0 and darkest == [2] and top > 0
    assert find(jp, job_page.Ids.METRIC.value).value == job_report.LATE


def test_gaps_come_largest_first_and_small_waits_in_microseconds(services: Services) -> None:
    doc = services.store.analysis(add(services, ITEM))
    rows = tables.gap_rows(doc, None, None)
    assert [r["idle"] for r in rows] == sorted((r["idle"] for r in rows), reverse=True) and len(rows) > 1
    columns = {c["id"]: c["name"] for c in tables.sync_columns(doc)}
    top_wait = max(s["wait_us"] for s in doc["syncs"])
    unit = "ms" if top_wait >= 1000 else "µs"
    assert columns["wait"] == f"host wait ({unit})"
    first = tables.sync_rows(doc, None, False, None)[0]
    divisor = 1000 if unit == "ms" else 1
    assert first["wait"] == pytest.approx(doc["syncs"][0]["wait_us"] / divisor, abs=1e-3)
    assert all(r["op"] and r["site"] for r in tables.sync_rows(doc, None, False, None))  # "—" and why


def test_compare_orders_by_upload_time_swaps_and_shows_the_ops_diff(services: Services) -> None:
    older, newer = add(services, ITEM, "before.json.gz"), add(services, CLEAN, "after.json.gz")
    data = traces.rows(services.store.entries(), "")
    at = {r["id"]: i for i, r in enumerate(data)}
    # WHEN the newer is selected first (or listed first), THEN the older upload is still "before"
    _msg, url = traces.on_compare(1, [at[newer], at[older]], data)
    assert url == f"/compare?a={older}&b={newer}"
    _msg, url = traces.on_compare(1, [at[older], at[newer]], data)
    assert url == f"/compare?a={older}&b={newer}"
    # AND the swap control exchanges them
    assert compare.on_swap(older, newer) == (newer, older)
    assert find(compare.layout(services, older, newer), compare.Ids.SWAP.value) is not None
    # AND the ops that changed are the ones `stallscope diff` lists, by the same computation
    a, b = services.store.analysis(older), services.store.analysis(newer)
    want = diff_json(compare_sides(side_of(a, "a"), side_of(b, "b")))["ops"]
    result = compare.on_pick(services, older, newer)
    shown = find(result, "compare-ops").data
    assert [r["name"] for r in shown] == [names.display_name(r["name"]) for r in want] and shown


def test_no_raw_markdown_on_the_overview(services: Services) -> None:
    page = render(services, f"/trace/{add(services, ITEM)}")
    assert "`" not in "".join(texts(page))


@pytest.mark.shared
def test_top_kernels_are_demangled_on_the_dashboard(services: Services, shared_traces: Path) -> None:
    pytest.importorskip("pycxxfilt")
    doc = services.store.analysis(add(services, shared_traces / "hta_a100_nccl_2rank_rank0.pt.trace.json.gz"))
    shown = [r["name"] for r in tables.top_kernel_rows(doc)]
    assert any(n.startswith("void cutlass_cudnn_train::Kernel<") for n in shown)
    assert not any(n.startswith("_Z") for n in shown)
    assert any(r["name"].startswith("_ZN19cutlass") for r in doc["tops"]["kernels"])  # the JSON keeps it


def test_the_glossary_page_holds_every_term_the_pages_link_to(services: Services, job_id: str) -> None:
    from dash import dcc

    from stallscope.display import glossary

    page = render(services, "/glossary")
    anchors = {t.anchor for t in glossary.TERMS}
    assert all(find(page, a) is not None for a in anchors)

    def links(c: object) -> list[str]:
        if c is None or isinstance(c, str | int | float):
            return []
        own = [c.href] if isinstance(c, dcc.Link) else []
        kids = getattr(c, "children", None)
        return own + [h for k in (kids if isinstance(kids, list | tuple) else [kids]) for h in links(k)]

    linked = [h for h in links(render(services, f"/trace/{job_id}/job")) if h.startswith("/glossary#")]
    assert linked and {h.split("#", 1)[1] for h in linked} <= anchors
