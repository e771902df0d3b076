"""The dashboard's pages and callbacks, called as plain functions over a real store (no server, no
browser): GIVEN traces uploaded and analysed, WHEN a page renders or a callback runs, THEN it shows the
analysis' own numbers."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from dash import no_update

from stallscope.analyzer.passes.replay import Scenario
from stallscope.commands.upload import wait_summary
from stallscope.dashboard.live import retimed
from stallscope.dashboard.pages import (
    compare,
    explorer,
    on_preparing,
    overview,
    render,
    tables,
    traces,
    whatif,
)
from stallscope.dashboard.pages import poll_pending as poll
from stallscope.dashboard.pages.common import Shell, ms
from stallscope.dashboard.services import Services
from stallscope.dashboard.store import Status, Store
from stallscope.dashboard.worker import analyse_entry
from stallscope.display import text as words

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
ITEM = SAMPLES / "item_in_loop.pt.trace.json.gz"
CLEAN = SAMPLES / "clean_pipeline.pt.trace.json.gz"
CPU_ONLY = SAMPLES / "examples" / "item_logging" / "trace.pt.trace.json.gz"  # no device activity
MB = 1 << 20


def find(component: Any, cid: str) -> Any:
    """The component with id ``cid`` anywhere in a layout tree (None when absent)."""
    if getattr(component, "id", None) == cid:
        return component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list | tuple) else [children]:
        if child is not None and not isinstance(child, str | int | float):
            hit = find(child, cid)
            if hit is not None:
                return hit
    return None


def texts(component: Any) -> list[str]:
    """Every text child in a layout tree."""
    if isinstance(component, str):
        return [component]
    children = getattr(component, "children", None)
    out: list[str] = []
    for child in children if isinstance(children, list | tuple) else [children]:
        if child is not None:
            out += texts(child)
    return out


def add(services: Services, path: Path, name: str | None = None) -> str:
    entry = services.store.add(name or path.name, io.BytesIO(path.read_bytes()), 64 * MB)
    assert analyse_entry(str(services.store.root), entry.id) == "ready"
    return entry.id


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    yield Services(Store(tmp_path_factory.mktemp("store")), None, 64 * MB)


@pytest.fixture(scope="module")
def item(services: Services) -> str:
    return add(services, ITEM)


@pytest.fixture(scope="module")
def clean(services: Services) -> str:
    return add(services, CLEAN)


def test_traces_page_lists_searches_and_never_renders_names_as_markup(services: Services, item: str) -> None:
    hostile = add(services, ITEM, "<img src=x onerror=alert(1)>[x](javascript:alert(1)).json")
    table = find(render(services, "/"), traces.Ids.TABLE.value)
    by_id = {r["id"]: r for r in table.data}
    doc = services.store.analysis(item)
    assert by_id[item]["utilization"] == doc["summary"]["device_utilization"]
    assert by_id[item]["avoidable_syncs"] == doc["summary"]["avoidable_sync_count"]
    assert by_id[hostile]["name"] == "<img src=x onerror=alert(1)>[x](javascript:alert(1)).json"
    markdown = [c["id"] for c in table.columns if c.get("presentation") == "markdown"]
    assert markdown == ["open"] and by_id[hostile]["open"] == f"[open](/trace/{hostile})"
    assert [r["id"] for r in traces.rows(services.store.entries(), "ONERROR")] == [hostile]
    tagged = services.store.add("t.json.gz", io.BytesIO(ITEM.read_bytes()), 64 * MB, ("before-fix",)).id
    assert [r["id"] for r in traces.rows(services.store.entries(), "Before")] == [tagged]
    services.store.delete(tagged)
    services.store.delete(hostile)


def test_drag_and_drop_upload_stores_the_file_and_opens_its_page(services: Services) -> None:
    contents = "data:application/gzip;base64," + base64.b64encode(ITEM.read_bytes()).decode()
    _note, href = traces.on_upload(services, contents, "dropped.json.gz")
    entry = next(e for e in services.store.entries() if e.name == "dropped.json.gz")
    assert href == f"/trace/{entry.id}" and entry.status is Status.PENDING
    # while it waits, the page is a progress panel that polls; once analysed, the poll renders the page
    page = render(services, href)
    assert find(page, Shell.PENDING_TICK.value) is not None
    text, content = poll(services, entry.id, href, "")
    assert text == "waiting for the analysis to start…" and content is no_update
    analyse_entry(str(services.store.root), entry.id)
    text, content = poll(services, entry.id, href, "")
    assert text == "analysis done" and find(content, overview.Ids.VERDICT.value) is not None
    services.store.delete(entry.id)


def test_a_bad_upload_is_a_message_in_the_page(services: Services) -> None:
    note, href = traces.on_upload(services, "data:;base64,@@@", "x.json")
    assert href is no_update and texts(note) == ["the upload is not a readable file"]
    empty = "data:;base64," + base64.b64encode(b"").decode()
    note, href = traces.on_upload(services, empty, "empty.json")
    assert href is no_update and "empty" in texts(note)[0]
    broken = services.store.add("broken.json", io.BytesIO(b"{nope"), MB)
    analyse_entry(str(services.store.root), broken.id)
    shown = texts(render(services, f"/trace/{broken.id}/timeline"))
    assert len(shown) == 1 and shown[0].startswith("broken.json: broken.json:")
    services.store.delete(broken.id)


def test_delete_and_compare_buttons(services: Services, item: str, clean: str) -> None:
    doomed = add(services, CLEAN, "doomed.json.gz")
    data = traces.rows(services.store.entries(), "")
    index = {r["id"]: i for i, r in enumerate(data)}
    note, href = traces.on_compare(1, [index[item], index[clean]], data)
    assert href == f"/compare?a={item}&b={clean}"
    assert traces.on_compare(1, [index[item]], data)[1] is no_update
    assert traces.on_compare(None, [index[item], index[clean]], data) == (no_update, no_update)
    rows, selected, note = traces.on_table(services, traces.Ids.DELETE.value, "", [index[doomed]], data)
    assert note == "deleted 1 trace" and doomed not in {r["id"] for r in rows} and selected == []


def test_overview_shows_the_reports_verdict_and_every_finding(services: Services, item: str) -> None:
    from stallscope.dashboard.report import verdict_doc

    doc = services.store.analysis(item)
    page = render(services, f"/trace/{item}")
    assert find(page, overview.Ids.VERDICT.value).children == verdict_doc(doc)["sentence"]
    # AND the verdict's evidence in one line (path shares, utilization, what each speed-up saves)
    evidence = find(page, overview.Ids.EVIDENCE.value).children
    util = doc["summary"]["device_utilization"]
    assert (
        evidence == f"Evidence: {words.evidence_sentence(doc['verdict'], util)}"
        and "critical path" in evidence
    )
    findings = find(page, overview.Ids.FINDINGS.value)
    shown = "".join(texts(findings))
    assert len(doc["findings"]) > 0 and "`" not in shown  # code spans are Code elements, not backticks
    for f in doc["findings"]:
        assert words.plain(f["title"]) in shown and words.plain(f["advice"]) in shown
    site = doc["findings"][0]["call_site"]
    assert f"{site['file']}:{site['line']} in {site['function']}" in shown
    # AND the saving card quotes the verdict's number (the best of the what-if and the findings' estimates)
    cards = dict(overview.headline(doc))
    assert cards["est. saving"] == ms(verdict_doc(doc)["saving_us"])


def cards(component: Any) -> dict[str, str]:
    """The overview's headline cards in a layout tree: label -> value."""
    if getattr(component, "className", None) == "ss-card":
        label, value = component.children[:2]
        return {label.children: value.children}
    children = getattr(component, "children", None)
    out: dict[str, str] = {}
    for child in children if isinstance(children, list | tuple) else [children]:
        if child is not None and not isinstance(child, str | int | float):
            out |= cards(child)
    return out


def test_a_cpu_only_trace_says_cpu_only_instead_of_zero_utilization(services: Services, item: str) -> None:
    from stallscope.dashboard.report import verdict_doc

    cpu = add(services, CPU_ONLY, "cpu-only.json.gz")
    raw = services.store.analysis(cpu)
    # what the analysis says: no device figures (null, not 0% busy and idle for the whole wall)
    assert raw["devices"] == [] and raw["summary"]["device_utilization"] is None
    assert raw["summary"]["device_idle_us"] is None and raw["steps"][0]["device_idle_us"] is None
    # traces table: a null utilization (drawn as a dash, sorts apart from real numbers), bottleneck "CPU only"
    by_id = {r["id"]: r for r in traces.rows(services.store.entries(), "")}
    gpu = services.store.analysis(item)["summary"]
    assert by_id[cpu]["utilization"] is None and by_id[cpu]["bottleneck"] == "CPU only"
    assert (
        by_id[item]["utilization"] == gpu["device_utilization"]
        and by_id[item]["bottleneck"] == gpu["bottleneck"]
    )
    column = next(c for c in traces.COLUMNS if c["id"] == "utilization")
    assert column["type"] == "numeric" and column["format"]["nully"] == "—"
    # overview: the report's CPU-only verdict, no utilization, no idle charts
    page = render(services, f"/trace/{cpu}")
    assert verdict_doc(raw)["cpu_only"] is True
    assert find(page, overview.Ids.VERDICT.value).children == verdict_doc(raw)["sentence"]
    assert find(page, overview.Ids.VERDICT.value).children.startswith("CPU-only profile")
    shown = cards(page)
    assert shown["GPU utilization"] == "—" and shown["bottleneck"] == "CPU only"
    assert find(page, overview.Ids.IDLE.value) is None
    # ... its top host ops instead (the main answer of a CPU-only run), as the JSON's tops
    top = find(page, overview.Ids.TOP_OPS.value)
    assert [r["name"] for r in top.data] == [r["name"] for r in raw["tops"]["ops"][:5]]
    unit = tables.top_op_units(raw)["self"]
    assert top.data[0]["self"] == pytest.approx(unit.value(raw["tops"]["ops"][0]["self_us"]))
    assert find(render(services, f"/trace/{item}"), overview.Ids.TOP_OPS.value) is None
    # steps: no device busy/idle columns (not 0 and the whole wall)
    steps = find(render(services, f"/trace/{cpu}/steps"), tables.Ids.STEP_TABLE.value)
    assert "idle" not in {c["id"] for c in steps.columns} and "idle" not in steps.data[0]
    wall = tables.step_units(raw)["dur"]
    assert [r["dur"] for r in steps.data] == [pytest.approx(wall.value(x["dur_us"])) for x in raw["steps"]]
    gpu_steps = find(render(services, f"/trace/{item}/steps"), tables.Ids.STEP_TABLE.value)
    assert "idle" in {c["id"] for c in gpu_steps.columns}
    gpu_cards = cards(render(services, f"/trace/{item}"))
    assert gpu_cards["GPU utilization"] == f"{gpu['device_utilization']:.1%}"
    assert gpu_cards["bottleneck"] == gpu["bottleneck"]
    # compare: no utilization to compare against, so no delta and no verdict
    rows = {r["metric"]: r for r in compare.headline_rows(services.store.analysis(item), raw)}
    assert rows["GPU utilization"]["before"] == f"{gpu['device_utilization']:.1%}"
    assert rows["GPU utilization"]["after"] == "—" and rows["GPU utilization"]["verdict"] == ""
    assert rows["device idle"]["after"] == "—" and rows["device idle"]["verdict"] == ""
    assert rows["device idle"]["change"] == "—"
    assert rows["bottleneck"]["before"] == gpu["bottleneck"] and rows["bottleneck"]["after"] == "CPU only"
    # the line `stallscope upload --wait` prints from the API's entry
    line = wait_summary(services.store.get(cpu).to_json()["summary"])
    assert line.startswith("CPU only, 0 avoidable syncs") and "utilization" not in line
    line = wait_summary(services.store.get(item).to_json()["summary"])
    assert line.startswith(f"{gpu['bottleneck']}-bound, GPU utilization {gpu['device_utilization']:.1%}")
    services.store.delete(cpu)


def test_timeline_zoom_asks_only_for_the_visible_range(services: Services, item: str) -> None:
    doc = services.store.analysis(item)
    view = explorer.full_view(doc)
    page = render(services, f"/trace/{item}/timeline")
    graph = find(page, explorer.Ids.GRAPH.value)
    assert graph.figure.layout.xaxis.range[1] == pytest.approx((view["hi"] - view["lo"]) / 1000)
    # drag-zoom to 1..2 ms of the range: the new figure starts at the window start + 1 ms
    fig, new, status = explorer.on_view(
        services, item, None, {"xaxis.range[0]": 1.0, "xaxis.range[1]": 2.0}, view
    )
    assert new["start"] == pytest.approx(view["lo"] + 1000) and new["end"] == pytest.approx(view["lo"] + 2000)
    # the zoomed axis keeps absolute times: ms from the window start, not from the zoomed range's start
    assert tuple(fig.layout.xaxis.range) == pytest.approx((1.0, 2.0))
    assert "ms from the start of the window" in fig.layout.title.text
    assert status.startswith("showing 1.00 ms to 2.00 ms")
    # every drawn bar lies inside the visible range
    for t in fig.data:
        if t.type == "bar":
            assert all(1.0 - 1e-9 <= b <= 2.0 + 1e-9 for b in t.base)
    # zooming again reads the axis the same way: 1.2..1.5 ms means 1.2..1.5 ms from the window start
    deeper = explorer.next_view(new, None, {"xaxis.range": [1.2, 1.5]})
    assert deeper is not None
    assert (deeper["start"], deeper["end"]) == pytest.approx((view["lo"] + 1200, view["lo"] + 1500))
    back = explorer.next_view(new, None, {"xaxis.autorange": True})
    assert back is not None and (back["start"], back["end"]) == (view["lo"], view["hi"])
    out = explorer.next_view(new, explorer.Ids.ZOOM_OUT.value, None)
    assert out is not None and out["end"] - out["start"] == pytest.approx(2000)
    assert explorer.on_view(services, item, None, {"autosize": True}, view) == (no_update,) * 3


def test_clicking_a_sync_mark_shows_its_call_site(services: Services, item: str) -> None:
    doc = services.store.analysis(item)
    view = explorer.full_view(doc)
    sync = doc["syncs"][0]
    click = {"points": [{"x": (sync["start_us"] - view["start"]) / 1000, "y": 1.58}]}
    panel = explorer.details(services, item, view, click)
    shown = texts(panel)
    assert shown[0].startswith(f"sync ({sync['kind']}")
    site = sync["call_site"]
    assert f"{site['file']}:{site['line']} in {site['function']}" in shown


def test_syncs_gaps_and_steps_filters(services: Services, item: str) -> None:
    doc = services.store.analysis(item)
    assert len(tables.sync_rows(doc, None, False, None)) == len(doc["syncs"])
    avoidable = tables.sync_rows(doc, None, True, None)
    assert len(avoidable) == doc["summary"]["avoidable_sync_count"] and all(
        r["avoidable"] == "yes" for r in avoidable
    )
    long_wait = max(s["wait_us"] for s in doc["syncs"])
    assert len(tables.sync_rows(doc, None, False, long_wait)) == sum(
        s["wait_us"] >= long_wait for s in doc["syncs"]
    )
    causes = {g["cause"] for g in doc["gaps"]}
    one = sorted(causes)[0]
    assert len(tables.gap_rows(doc, [one], None)) == sum(g["cause"] == one for g in doc["gaps"])
    assert [r["name"] for r in tables.step_rows(doc, "#3")] == [
        s["name"] for s in doc["steps"] if "#3" in s["name"]
    ]
    page = render(services, f"/trace/{item}/syncs")
    assert len(find(page, tables.Ids.SYNC_TABLE.value).data) == len(doc["syncs"])


def test_top_ops_page_shows_the_analysis_tops_with_shares(services: Services, item: str) -> None:
    doc = services.store.analysis(item)
    page = render(services, f"/trace/{item}/tops")
    ops = find(page, tables.Ids.TOP_OPS.value).data
    kernels = find(page, tables.Ids.TOP_KERNELS.value).data
    assert [r["name"] for r in ops] == [r["name"] for r in doc["tops"]["ops"]]
    first = doc["tops"]["ops"][0]
    assert ops[0]["self_share"] == pytest.approx(first["self_us"] / doc["window"]["dur_us"])
    per_step = tables.top_op_units(doc)["per_step"]
    assert ops[0]["per_step"] == pytest.approx(per_step.value(first["self_us"] / len(doc["steps"])))
    k = doc["tops"]["kernels"][0]
    assert kernels[0]["name"] == k["name"] and kernels[0]["count"] == k["count"]
    assert kernels[0]["busy_share"] == pytest.approx(k["total_us"] / doc["summary"]["device_busy_us"])
    assert kernels[0]["tensor_cores"] in ("yes", "no", "not a GEMM")


def test_whatif_predicted_times_and_the_retimed_end(services: Services, item: str) -> None:
    doc = services.store.analysis(item)
    fig, rows = whatif.on_pick(services, item, ["no_avoidable_syncs", "device_2x"])
    predicted = {r["scenario"]: r["predicted_wall_us"] for r in doc["whatif"]}
    assert list(fig.data[0].x[1:]) == [predicted["no_avoidable_syncs"] / 1000, predicted["device_2x"] / 1000]
    assert [r["scenario"] for r in rows] == [whatif.LABELS["no_avoidable_syncs"], whatif.LABELS["device_2x"]]
    a = services.live.get(item)
    after = retimed(a, Scenario.NO_AVOIDABLE_SYNCS)
    assert after.end_us - a.window.start_us == pytest.approx(predicted["no_avoidable_syncs"])
    graph = whatif.on_retime(services, item, "no_avoidable_syncs")
    assert len(graph.figure.data) >= 2  # each stream: recorded and re-timed


def test_compare_headline_and_finding_deltas(services: Services, item: str, clean: str) -> None:
    a, b = services.store.analysis(item), services.store.analysis(clean)
    rows = {r["metric"]: r for r in compare.headline_rows(a, b)}
    wall_a, wall_b = a["summary"]["wall_us"], b["summary"]["wall_us"]
    assert rows["wall time"]["verdict"] == ("better" if wall_b < wall_a else "worse")
    assert rows["avoidable syncs"]["change"].startswith(
        f"{b['summary']['avoidable_sync_count'] - a['summary']['avoidable_sync_count']:+,}"
    )
    findings = compare.finding_rows(a, b)
    gone = {r["finding"] for r in findings if r["change"] == "gone"}
    titles_b = {words.plain(f["title"]) for f in b["findings"]}
    assert gone == {words.plain(f["title"]) for f in a["findings"]} - titles_b and gone
    page = render(services, "/compare", f"?a={item}&b={clean}")
    assert find(page, compare.Ids.A.value).value == item
    assert "Per-step distributions" in str(find(page, compare.Ids.RESULT.value).to_plotly_json())


def test_unknown_pages_and_ids_are_messages(services: Services) -> None:
    assert texts(render(services, "/nowhere")) == ["no page at /nowhere"]
    assert texts(render(services, "/trace/../../etc/passwd")) == ["no page at /trace/../../etc/passwd"]
    assert texts(render(services, f"/trace/{'0' * 32}")) == [f"no trace with id '{'0' * 32}'"]
    assert "pick a 'before'" in texts(render(services, "/compare", "?a=zzz"))[-1]


def test_a_slow_timeline_rebuild_shows_progress_then_the_page(
    services: Services, item: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import stallscope.dashboard.live

    gate = threading.Event()
    real = stallscope.dashboard.live.analyze_model

    def slow(*args: Any, **kwargs: Any) -> Any:
        gate.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(stallscope.dashboard.live, "analyze_model", slow)
    fresh = Services(services.store, None, services.max_upload_bytes)  # nothing rebuilt yet
    path = f"/trace/{item}/timeline"
    page = render(fresh, path)
    assert find(page, explorer.Ids.PREPARING_TICK.value) is not None
    assert any(t.startswith("preparing the timeline: rebuilding the analysis of") for t in texts(page))
    assert on_preparing(fresh, item, path, "") is no_update
    gate.set()
    assert fresh.live.ready(item, wait_s=30)
    assert find(on_preparing(fresh, item, path, ""), explorer.Ids.GRAPH.value) is not None


def test_a_failed_timeline_rebuild_is_a_message(
    services: Services, item: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import stallscope.dashboard.live

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise ValueError("the graph could not be rebuilt")

    monkeypatch.setattr(stallscope.dashboard.live, "analyze_model", broken)
    fresh = Services(services.store, None, services.max_upload_bytes)
    assert "the graph could not be rebuilt" in texts(render(fresh, f"/trace/{item}/timeline"))


def test_clicking_a_bar_shows_that_event(services: Services, item: str) -> None:
    from stallscope.dashboard import timeline

    view = explorer.full_view(services.store.analysis(item))
    a = services.live.get(item)
    sl = timeline.extract(a.model, a, view["start"], view["end"], explorer.MAX_ITEMS)
    (row_index,) = [i for i, r in enumerate(sl.rows) if r.kind == timeline.RowKind.STREAM]
    items = sl.rows[row_index].items
    pick = len(items) // 2
    base_ms = (float(items.start_us[pick]) - view["start"]) / 1000
    click = {"points": [{"base": base_ms, "x": 0.01, "y": row_index}]}
    shown = texts(explorer.details(services, item, view, click))
    assert shown[0] == items.name[pick]
    assert shown[-1] == (items.site[pick] or "no call site in the trace")


def test_best_saving_takes_the_larger_of_the_what_if_and_the_findings() -> None:
    from stallscope.dashboard.headline import best_saving

    doc = {
        "summary": {"est_saving_us": 100.0},
        "findings": [{"est_saving_us": 50.0}, {"est_saving_us": 300.0}, {"est_saving_us": 200.0}],
    }
    assert best_saving(doc) == (300.0, 2)
    assert best_saving({"summary": {"est_saving_us": 400.0}, "findings": doc["findings"]}) == (400.0, None)
    assert best_saving({"summary": {"est_saving_us": None}, "findings": []}) == (0.0, None)


def test_every_finding_sync_and_gap_links_to_its_evidence_on_the_timeline(
    services: Services, item: str
) -> None:
    # GIVEN the sample loop's overview and tables
    doc = services.store.analysis(item)
    page = render(services, f"/trace/{item}")
    for n in range(1, len(doc["findings"]) + 1):
        link = find(page, f"show-finding-{n}")
        assert link.href == f"/trace/{item}/timeline?claim=finding-{n}"
    syncs = tables.sync_rows(doc, None, False, None, item)
    assert [r["show"] for r in syncs] == [
        f"[show](/trace/{item}/timeline?claim=sync-{i})" for i in range(len(syncs))
    ]
    gaps = tables.gap_rows(doc, None, None, item)  # the largest idle first: each names its own gap
    order = sorted(
        range(len(doc["gaps"])), key=lambda i: (-doc["gaps"][i]["dur_us"], doc["gaps"][i]["start_us"])
    )
    assert [r["show"] for r in gaps] == [f"[show](/trace/{item}/timeline?claim=gap-{i})" for i in order]
    # WHEN a link is followed: the timeline opens at the claim's range with its events outlined
    from stallscope.dashboard import claims

    a = services.live.get(item)
    c = claims.claim(a, "gap-1")
    assert c is not None
    opened = render(services, f"/trace/{item}/timeline", "?claim=gap-1")
    fig = find(opened, explorer.Ids.GRAPH.value).figure
    lo, hi = c.view(a.window.start_us, a.window.end_us)
    w0 = a.window.start_us
    assert list(fig.layout.xaxis.range) == pytest.approx([(lo - w0) / 1000, (hi - w0) / 1000])
    outlines = sorted(x for s in fig.layout.shapes if s.name == "highlight" for x in (s.x0, s.x1))
    want = sorted(x for _k, s, e in c.marks for x in ((s - w0) / 1000, (e - w0) / 1000))
    assert len(c.marks) >= 2 and outlines == pytest.approx(want)
    status = find(opened, explorer.Ids.STATUS.value).children
    assert status.startswith("gap-1 (outlined)")
    # AND the outlines stay while zooming, until Reset
    view = find(opened, explorer.Ids.VIEW.value).data
    zoomed, new, _s = explorer.on_view(services, item, None, {"xaxis.range": [0.0, 5.0]}, view)
    assert new["claim"] == "gap-1" and [s for s in zoomed.layout.shapes if s.name == "highlight"]
    reset, plain, _s = explorer.on_view(services, item, explorer.Ids.RESET.value, None, new)
    assert "claim" not in plain and not [s for s in reset.layout.shapes if s.name == "highlight"]
    # AND the timeline lists the longest critical-path segments, each a link to its own evidence
    segments = find(opened, explorer.Ids.SEGMENTS.value)
    cp = a.critical
    assert cp is not None
    links = [li.children[-1].href for li in segments.children[1].children]
    longest = np.argsort(-(cp.end_us - cp.start_us), kind="stable")[: len(links)].tolist()
    assert links == [f"/trace/{item}/timeline?claim=segment-{i}" for i in longest] and links
    # AND an id that names nothing opens the plain timeline
    plain_page = render(services, f"/trace/{item}/timeline", "?claim=gap-99999")
    assert "claim" not in find(plain_page, explorer.Ids.VIEW.value).data


def test_clicking_a_merged_block_tells_its_span_busy_time_and_longest_event_apart(
    services: Services, item: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stallscope.dashboard import timeline

    view = explorer.full_view(services.store.analysis(item))
    a = services.live.get(item)
    sl = timeline.extract(a.model, a, view["start"], view["end"], 4)  # a tiny budget: rows merge
    row_index, row = next((i, r) for i, r in enumerate(sl.rows) if r.kind == timeline.RowKind.STREAM)
    big = int(np.argmax(row.items.count))
    assert row.items.count[big] > 1
    monkeypatch.setattr(explorer, "MAX_ITEMS", 4)  # the view the click was made on
    base_ms = (float(row.items.start_us[big]) - view["start"]) / 1000
    shown = texts(
        explorer.details(services, item, view, {"points": [{"base": base_ms, "x": 0.01, "y": row_index}]})
    )
    span = float(row.items.end_us[big] - row.items.start_us[big])
    busy, longest = float(row.items.busy_us[big]), float(row.items.longest_us[big])
    assert busy < span and longest < span
    assert shown[0] == timeline.describe(row.kind, row.items, big)
    assert f"span {timeline.fmt_us(span)}" in shown[0] and f"busy {timeline.fmt_us(busy)}" in shown[0]
    assert f"longest {timeline.fmt_us(longest)}" in shown[0]


def test_compare_says_when_the_whole_runs_call_the_change_noise(
    services: Services, item: str, clean: str
) -> None:
    # GIVEN the two analyses, as if each came with every step of its run timed: the same busy run
    a, b = services.store.analysis(item), services.store.analysis(clean)
    assert compare.run_reading(a, b, ("a", "b")) is None  # traces without a sidecar: nothing to say
    busy = {"steps": 100, "host_ms": {"median_ms": 10.0, "p90_ms": 1e6}, "profiled_median_ms": 10.0}
    reading = compare.run_reading(a | {"run_steps": busy}, b | {"run_steps": busy}, ("a", "b"))
    # THEN the windows' change is within the runs' spread: noise, said as a warning
    assert reading is not None and reading[0] == "noise"
    assert reading[1].startswith("whole runs: ") and "noise" in reading[1]
    assert reading[0] in compare.UNTRUSTED
