"""The dashboard's job page: an uploaded rank folder (tar.gz) gets the job analysis and its page."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from synth.job import _KERNEL, Plant, build_job

from stallscope.dashboard.pages import job as job_page
from stallscope.dashboard.pages import render
from stallscope.dashboard.services import Services
from stallscope.dashboard.store import Store, StoreError
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


# -- any rank's timeline (?rank=N) ---------------------------------------------------------------------

OFFSETS = {1: 5000, 2: 9000}  # each rank's clock runs ahead of rank 0's: its timeline has its own


def _find(component: Any, cid: str) -> Any:
    if getattr(component, "id", None) == cid:
        return component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list | tuple) else [children]:
        if child is not None and not isinstance(child, str | int | float):
            hit = _find(child, cid)
            if hit is not None:
                return hit
    return None


@pytest.fixture(scope="module")
def skewed(services: Services, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A 4-rank job, rank 2 late at step 1, the ranks' clocks apart, uploaded as a zip."""
    import zipfile

    folder = tmp_path_factory.mktemp("skewed")
    build_job(folder, 4, 3, [Plant(rank=2, step=1, cause="input", us=1500.0)], offsets_us=OFFSETS)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for f in sorted(folder.iterdir()):
            zf.write(f, f"run/{f.name}")
    return _upload(services, "run.zip", buf.getvalue()), folder


def _own(folder: Path, rank: int) -> Any:
    """The rank's analysis made straight from its file (not through the store or the dashboard)."""
    from stallscope.analyzer.analysis import analyze_model
    from stallscope.analyzer.load.loader import load

    return analyze_model(load(folder / f"rank{rank}.pt.trace.json.gz", use_cache=False).models[0])


def _timeline(services: Services, trace_id: str, search: str) -> Any:
    return render(services, f"/trace/{trace_id}/timeline", search)


def test_the_timeline_of_every_rank_is_that_ranks_own(services: Services, skewed: tuple[str, Path]) -> None:
    from stallscope.dashboard.pages import explorer

    trace_id, folder = skewed
    labels = {r: {lane.label for lane in _own(folder, r).model.lanes} for r in range(4)}
    for rank in range(4):
        page = _timeline(services, trace_id, f"?rank={rank}")
        title = " ".join(_texts(_find(page, explorer.Ids.TITLE.value)))
        assert f"Rank {rank}" in title and f"rank{rank}.pt.trace.json.gz" in title
        assert ("(straggler)" in title) == (rank == 2)
        rows = set(_find(page, explorer.Ids.GRAPH.value).figure.layout.yaxis.ticktext)
        assert any(label in rows for label in labels[rank] - labels[(rank + 1) % 4])  # its own threads
        assert not any(label in rows for label in labels[(rank + 1) % 4] - labels[rank])
        view = _find(page, explorer.Ids.VIEW.value).data
        own = _own(folder, rank).window
        assert (view["lo"], view["hi"]) == (pytest.approx(own.start_us), pytest.approx(own.end_us))
        assert view["rank"] == (None if rank == 0 else rank)  # rank 0 was analysed in full at upload
    # the clocks are apart: rank 2's window starts where its own clock says, not rank 0's
    assert _own(folder, 2).window.start_us - _own(folder, 0).window.start_us == pytest.approx(OFFSETS[2])


def test_the_rank_picker_lists_every_rank_the_straggler_first(
    services: Services, skewed: tuple[str, Path]
) -> None:
    from stallscope.dashboard.headline import straggler
    from stallscope.dashboard.pages import explorer

    trace_id, _ = skewed
    job = services.store.analysis(trace_id)["job"]
    assert straggler(job) == 2
    page = _timeline(services, trace_id, "?rank=3")
    links = [c for c in _find(page, explorer.Ids.RANKS.value).children if getattr(c, "href", None)]
    assert [c.href for c in links] == [
        f"/trace/{trace_id}/timeline?rank={r}" for r in (2, 0, 1, 3)
    ]  # the straggler first, then in order
    assert links[0].children == "rank 2 (straggler)"
    assert [c.children for c in links[1:]] == ["rank 0 · analysed in full", "rank 1", "rank 3"]
    assert [c.href for c in links if "ss-active" in c.className] == [f"/trace/{trace_id}/timeline?rank=3"]
    # the default timeline (no ?rank=) has the same picker, the fully analysed rank active
    default = _find(_timeline(services, trace_id, ""), explorer.Ids.RANKS.value)
    assert [c.children for c in default.children if "ss-active" in (getattr(c, "className", "") or "")] == [
        "rank 0 · analysed in full"
    ]


@pytest.mark.parametrize(
    ("search", "shown"),
    [
        ("?rank=abc", "rank 'abc' is not a rank number; this job's ranks are 0, 1, 2, 3"),
        ("?rank=-1", "rank '-1' is not a rank number; this job's ranks are 0, 1, 2, 3"),
        ("?rank=9", "rank 9 is not in this job: its ranks are 0, 1, 2, 3"),
        ("?rank=99999999999999999999", "is not a rank number"),
        ("?rank=<b>x</b>", "rank '<b>x</b>' is not a rank number"),
    ],
)
def test_a_bad_rank_gets_a_message_under_the_picker(
    services: Services, skewed: tuple[str, Path], search: str, shown: str
) -> None:
    from stallscope.dashboard.pages import explorer

    trace_id, _ = skewed
    page = _timeline(services, trace_id, search)
    errors = [c for c in page.children if getattr(c, "className", None) == "stallscope-error"]
    assert len(errors) == 1 and shown in errors[0].children
    assert _find(page, explorer.Ids.GRAPH.value) is None
    picker = _find(page, explorer.Ids.RANKS.value)  # still there: pick a rank that exists
    assert not [c for c in picker.children if "ss-active" in (getattr(c, "className", "") or "")]


def test_a_straggler_claim_opens_the_stragglers_own_timeline_at_the_collective(
    services: Services, skewed: tuple[str, Path]
) -> None:
    from stallscope.dashboard import job_report
    from stallscope.dashboard.pages import explorer

    trace_id, folder = skewed
    doc = services.store.analysis(trace_id)
    claim = job_report.straggler_claim(doc["job"], 2)
    assert claim is not None
    # the job page's "show" link of the straggler finding names the straggler's rank and the claim
    job_page_links = _links(render(services, f"/trace/{trace_id}/job"))
    assert f"/trace/{trace_id}/timeline?rank=2&claim={claim}" in job_page_links
    page = _timeline(services, trace_id, f"?rank=2&claim={claim}")
    view = _find(page, explorer.Ids.VIEW.value).data
    assert view["claim"] == claim and "this rank was last" in view["note"]
    # the outlined kernel is rank 2's own collective kernel, at its time on rank 2's clock
    own = _own(folder, 2)
    ev = own.model.events
    [(_row, start, end)] = view["marks"]
    hits = [i for i in range(len(ev.ts)) if float(ev.ts[i]) == start and float(ev.end[i]) == end]
    assert [own.model.name_of(i) for i in hits] == [_KERNEL]
    assert view["lo"] <= view["start"] <= start and end <= view["end"] <= view["hi"]
    assert view["end"] - view["start"] < (view["hi"] - view["lo"]) / 3  # zoomed in on it
    assert view["lo"] == pytest.approx(own.window.start_us)


def test_a_claim_of_the_fully_analysed_rank_is_not_applied_to_another(
    services: Services, skewed: tuple[str, Path]
) -> None:
    from stallscope.dashboard.pages import explorer

    trace_id, _ = skewed
    page = _timeline(services, trace_id, "?rank=1&claim=finding-1")
    view = _find(page, explorer.Ids.VIEW.value).data
    assert "claim" not in view and (view["start"], view["end"]) == (view["lo"], view["hi"])
    note = _find(page, explorer.Ids.CLAIM_NOTE.value)
    assert "finding-1 is a claim of rank 0's analysis" in " ".join(_texts(note))
    assert f"/trace/{trace_id}/timeline?claim=finding-1" in _links(note)
    # on the fully analysed rank the same claim is applied
    full = _find(_timeline(services, trace_id, "?claim=finding-1"), explorer.Ids.VIEW.value).data
    assert full["claim"] == "finding-1"


def test_zoom_and_click_on_another_rank_ask_that_ranks_analysis(
    services: Services, skewed: tuple[str, Path]
) -> None:
    from stallscope.dashboard.pages import explorer

    trace_id, folder = skewed
    view = _find(_timeline(services, trace_id, "?rank=3"), explorer.Ids.VIEW.value).data
    fig, new, status = explorer.on_view(services, trace_id, None, {"xaxis.range": [1, 2]}, view)
    assert new["rank"] == 3 and status.startswith("showing 1.00 ms to 2.00 ms")
    mine = {lane.label for lane in _own(folder, 3).model.lanes}
    others = {lane.label for lane in _own(folder, 0).model.lanes}
    assert mine - others and (mine - others) <= set(fig.layout.yaxis.ticktext)  # rank 3's own threads
    a = services.live.get(trace_id, 3)
    assert a is services.live.get(trace_id, 3) and a is not services.live.get(trace_id)
    assert a.model.rank == 3 and a.model.path == "rank3.pt.trace.json.gz"  # not the server's folder


def test_the_job_page_links_every_ranks_timeline(services: Services, skewed: tuple[str, Path]) -> None:
    trace_id, _ = skewed
    page = render(services, f"/trace/{trace_id}/job")
    table = _find(page, job_page.Ids.RANKS.value)
    assert {row["id"]: row["timeline"] for row in table.data} == {
        r: f"[timeline](/trace/{trace_id}/timeline?rank={r})" for r in range(4)
    }
    assert [c["id"] for c in table.columns if c.get("presentation") == "markdown"] == ["timeline"]
    # each rank's label on the heatmap's axis links its timeline, whatever the metric
    fig = job_page.on_metric(services, trace_id, "wall_us")
    assert list(fig.layout.yaxis.tickvals) == [0, 1, 2, 3]
    assert list(fig.layout.yaxis.ticktext) == [
        f'<a href="/trace/{trace_id}/timeline?rank={r}" target="_self">{r}</a>' for r in range(4)
    ]
    # a heatmap click (or a table click) shows the rank, with its timeline one click away
    detail = job_page.on_rank(services, trace_id, {"points": [{"y": 2}]}, None)
    assert f"/trace/{trace_id}/timeline?rank=2" in _links(detail)
    assert f"/trace/{trace_id}/timeline?rank=2" in _links(page)  # the straggler's, above the table


def test_a_single_trace_has_no_rank_picker(services: Services, uploaded: tuple[str, Path]) -> None:
    from stallscope.dashboard.pages import explorer

    _, folder = uploaded
    trace_id = _upload(services, "rank1.pt.trace.json.gz", (folder / "rank1.pt.trace.json.gz").read_bytes())
    page = _timeline(services, trace_id, "")
    assert _find(page, explorer.Ids.GRAPH.value) is not None
    assert _find(page, explorer.Ids.RANKS.value) is None and _find(page, explorer.Ids.TITLE.value) is None
    assert _find(_timeline(services, trace_id, "?rank=1"), explorer.Ids.GRAPH.value) is not None  # its own
    other = _timeline(services, trace_id, "?rank=0")
    assert "this upload is a single trace (rank 1): it has no rank 0" in _texts(other)


def _links(component: Any) -> list[str]:
    out = [component.href] if isinstance(getattr(component, "href", None), str) else []
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list | tuple) else [children]:
        if child is not None and not isinstance(child, str | int | float):
            out += _links(child)
    return out


def test_the_overview_links_the_stragglers_timeline(services: Services, skewed: tuple[str, Path]) -> None:
    from stallscope.dashboard.pages import overview

    trace_id, _ = skewed
    link = _find(render(services, f"/trace/{trace_id}"), overview.Ids.STRAGGLER.value)
    assert link.href == f"/trace/{trace_id}/timeline?rank=2" and link.children == "Rank 2's timeline"


def test_a_rank_not_built_yet_is_prepared_in_the_background(
    services: Services, skewed: tuple[str, Path]
) -> None:
    from dash import no_update

    from stallscope.dashboard.pages import explorer, on_preparing

    trace_id, _ = skewed
    fresh = Services(services.store, None, 64 * MB)  # a restarted server: nothing built yet
    assert not explorer.prepared(fresh, trace_id, 1)
    path = f"/trace/{trace_id}/timeline"
    assert on_preparing(fresh, trace_id, path, "?rank=1") is no_update
    fresh.live.warm(trace_id, 1)
    assert fresh.live.ready(trace_id, wait_s=60, rank=1)
    assert not fresh.live.ready(trace_id, rank=None)  # the rank analysed in full is another key
    page = on_preparing(fresh, trace_id, path, "?rank=1")
    assert "Rank 1: rank1.pt.trace.json.gz" in _texts(_find(page, explorer.Ids.TITLE.value))


@pytest.mark.shared
def test_the_dlrm_jobs_straggler_timeline(services: Services, shared_traces: Path) -> None:
    """The real 8-rank job: its straggler's own timeline, and its costliest collective on it."""
    from stallscope.dashboard.headline import straggler
    from stallscope.dashboard.pages import explorer

    folder = shared_traces / "param_dlrm_v100_8rank"
    if not folder.is_dir():
        pytest.skip("param_dlrm_v100_8rank not present")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for f in sorted(folder.iterdir()):
            tar.add(f, arcname=f"dlrm/{f.name}")
    trace_id = _upload(services, "dlrm.tar.gz", buf.getvalue())
    job = services.store.analysis(trace_id)["job"]
    rank = straggler(job)
    assert rank is not None and rank != services.store.analysis(trace_id)["source"]["rank"]
    file = next(r["path"] for r in job["ranks"] if r["rank"] == rank)
    page = _timeline(services, trace_id, f"?rank={rank}&claim=collective-0")
    assert _texts(_find(page, explorer.Ids.TITLE.value)) == [f"Rank {rank} (straggler): {file}"]
    view = _find(page, explorer.Ids.VIEW.value).data
    a = services.live.get(trace_id, rank)
    assert (view["lo"], view["hi"]) == (a.window.start_us, a.window.end_us)
    assert view["claim"] == "collective-0" and "this rank was last" in view["note"]
    assert view["marks"] and view["end"] - view["start"] < view["hi"] - view["lo"]


def test_another_ranks_model_is_kept_on_disk_and_a_damaged_copy_is_rebuilt(
    services: Services, skewed: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    trace_id, _ = skewed
    store = services.store
    first = store.rank_model(trace_id, 3)
    kept = store._result(trace_id, ()) / "ranks" / "3"
    assert (kept / "events.parquet").is_file() and first.path == "rank3.pt.trace.json.gz"
    with monkeypatch.context() as m:  # read back from the kept Parquet: the JSON is not decoded again
        m.setattr(Store, "_load_rank", lambda *_: pytest.fail("the rank's JSON was decoded again"))
        again = store.rank_model(trace_id, 3)
    assert again.rank == 3 and np.array_equal(again.events.ts, first.events.ts)
    (kept / "events.parquet").write_bytes(b"damaged")
    rebuilt = store.rank_model(trace_id, 3)  # the rank's file is the truth: loaded again, kept again
    assert np.array_equal(rebuilt.events.ts, first.events.ts)
    assert (kept / "events.parquet").read_bytes() != b"damaged"
    with pytest.raises(StoreError, match="rank 7 is not in this job"):
        store.rank_model(trace_id, 7)
