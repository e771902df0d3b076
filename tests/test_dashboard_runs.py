"""A long run's history in the dashboard: four captures of one run uploaded out of order to a dashboard
with a token, read back from ``GET /api/runs/<run_id>`` in wall-clock order with each capture's own
figures, the capture that got slower and gained a finding flagged with its reasons and a link to its
comparison with the last good capture; junk and hostile run ids are one-line 4xx answers, never markup.

Captures 1-2 are ``worked_example_pipelined`` (2.01 ms steps, no finding), 3-4 ``worked_example_serial``
(8.01 ms steps, a device-wide sync in the loop).
"""

from __future__ import annotations

import http.client
import json
import shutil
import statistics
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stallscope.dashboard import client
from stallscope.dashboard.app import Running, create_app, open_services
from stallscope.dashboard.pages import compare, render
from stallscope.dashboard.pages import run as run_page
from stallscope.dashboard.pages.traces import rows
from stallscope.dashboard.services import Services

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
FAST = SAMPLES / "worked_example_pipelined.pt.trace.json.gz"
SLOW = SAMPLES / "worked_example_serial.pt.trace.json.gz"
ITEM = SAMPLES / "item_in_loop.pt.trace.json.gz"
TOKEN = "runs-token-0123456789abcdef"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
RUN = "train-7f3a.node_1"
HOSTILE = "<img src=x onerror=alert(1)>"
#: (index, trace, when): the four captures of RUN, an hour apart
CAPTURES = (
    (1, FAST, "2026-12-02T01:00:00Z"),
    (2, FAST, "2026-12-02T02:00:00Z"),
    (3, SLOW, "2026-12-02T03:00:00Z"),
    (4, SLOW, "2026-12-02T04:00:00Z"),
)


def capture_bundle(
    folder: Path, trace: Path, run_id: str, index: int, at: str, trigger: str = "every"
) -> Path:
    """A bundle as ``stallscope capture`` writes one: the trace and a sidecar naming the run."""
    folder.mkdir(parents=True)
    shutil.copy(trace, folder / "trace.pt.trace.json.gz")
    run = {
        "capture": {"run_id": run_id, "index": index, "at": at, "trigger": trigger},
        "profiled_steps": [100 * index, 100 * index + 2],
    }
    sidecar = {"schema": "stallscope.sidecar/1", "run": run, "sync_sites": [], "step_timing": {}}
    (folder / "sidecar.json").write_text(json.dumps(sidecar))
    return folder


def upload_captures(
    url: str, tmp: Path, run_id: str = RUN, order: tuple[int, ...] = (3, 1, 4, 2)
) -> list[str]:
    """Upload the four captures of ``run_id`` in ``order`` (not their own), as ``stallscope upload --tag``
    does; returns their entry ids by capture index (0: the first capture), once each is analysed."""
    ids: dict[int, str] = {}
    for index in order:
        _, trace, at = CAPTURES[index - 1]
        bundle = capture_bundle(tmp / f"{run_id}-{index}", trace, run_id, index, at)
        ids[index] = client.upload(bundle, url, tags=(f"run:{run_id}",), token=TOKEN)["id"]
    for trace_id in ids.values():
        assert client.wait(trace_id, url, timeout=120, token=TOKEN)["status"] == "ready"
    return [ids[i] for i in sorted(ids)]


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Services, list[str]]]:
    """A dashboard with a token (analysing in threads) holding RUN's four captures and one plain upload."""
    services = open_services(tmp_path_factory.mktemp("store"), max_upload_mb=8, processes=False)
    running = Running(create_app(services, TOKEN), "127.0.0.1", 0, quiet=True).start()
    try:
        ids = upload_captures(running.url, tmp_path_factory.mktemp("bundles"))
        plain = client.upload(ITEM, running.url, token=TOKEN)["id"]
        assert client.wait(plain, running.url, timeout=120, token=TOKEN)["status"] == "ready"
        yield running, services, ids
    finally:
        running.stop()
        assert services.worker is not None
        services.worker.shutdown()


def get(running: Running, path: str, headers: dict[str, str] | None = None) -> tuple[int, str, bytes]:
    """One raw GET: status, content type, body."""
    conn = http.client.HTTPConnection("127.0.0.1", running.server.server_port, timeout=30)
    try:
        conn.request("GET", path, headers=BEARER if headers is None else headers)
        r = conn.getresponse()
        return r.status, r.getheader("Content-Type") or "", r.read()
    finally:
        conn.close()


def run_json(running: Running, run_id: str, query: str = "") -> dict[str, Any]:
    status, kind, body = get(running, f"/api/runs/{urllib.parse.quote(run_id)}{query}")
    assert status == 200 and kind == "application/json", body
    answer: dict[str, Any] = json.loads(body)
    return answer


def analysis(running: Running, trace_id: str) -> dict[str, Any]:
    status, _, body = get(running, f"/api/traces/{trace_id}/analysis")
    assert status == 200
    doc: dict[str, Any] = json.loads(body)
    return doc


def walk(component: Any) -> list[str]:
    """Every text child and link target in a layout tree."""
    if isinstance(component, str):
        return [component]
    out: list[str] = [component.href] if isinstance(getattr(component, "href", None), str) else []
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list | tuple) else [children]:
        if child is not None and not isinstance(child, int | float):
            out += walk(child)
    return out


def test_the_run_lists_its_captures_in_wall_clock_order_with_their_own_figures(
    dashboard: tuple[Running, Services, list[str]],
) -> None:
    running, _, ids = dashboard
    # WHEN the run is asked for (its captures were uploaded 3, 1, 4, 2)
    run = run_json(running, RUN)
    # THEN they come in the order they were taken
    assert run["run_id"] == RUN and run["url"] == f"/runs/{RUN}" and run["threshold"] == 0.2
    assert [c["id"] for c in run["captures"]] == ids
    assert [(c["index"], c["at"], c["trigger"]) for c in run["captures"]] == [
        (i, at, "every") for i, _, at in CAPTURES
    ]
    assert run["others"] == []
    # AND each capture's figures are its own analysis' figures
    for c in run["captures"]:
        doc = analysis(running, c["id"])
        assert c["steps"] == [100 * c["index"], 100 * c["index"] + 2] == doc["source"]["capture"]["steps"]
        assert c["step_us"] == statistics.median(s["dur_us"] for s in doc["steps"])
        assert c["step_count"] == len(doc["steps"]) > 0
        assert c["device_utilization"] == doc["summary"]["device_utilization"] and not c["cpu_only"]
        assert c["bottleneck"] == doc["summary"]["bottleneck"]
        ranked = sorted(doc["findings"], key=lambda f: -f["est_saving_us"])[:3]
        assert c["top_findings"] == [{k: f[k] for k in ("rule", "title", "est_saving_us")} for f in ranked]
    fast, slow = run["captures"][1]["step_us"], run["captures"][2]["step_us"]
    assert slow > 1.2 * fast  # the samples really are a slowdown of more than the threshold


def test_the_capture_that_got_slower_with_a_new_finding_is_flagged_against_the_last_good_one(
    dashboard: tuple[Running, Services, list[str]],
) -> None:
    running, services, ids = dashboard
    first, second, third, fourth = run_json(running, RUN)["captures"]
    # GIVEN captures 1-2 alike: not flagged
    assert first["flag"] is None and second["flag"] is None
    # THEN capture 3 is flagged: slower than capture 2 by more than 20%, and a rule no capture had before
    flag = third["flag"]
    assert flag["against"] == {"id": ids[1], "index": 2}
    assert flag["diff"] == f"/compare?a={ids[1]}&b={ids[2]}"
    step, new = flag["reasons"]
    assert (step["kind"], step["before"], step["after"]) == ("step_time", second["step_us"], third["step_us"])
    rise = third["step_us"] / second["step_us"] - 1
    assert step["text"].endswith(f"(+{rise:.0%})") and "ms → " in step["text"]
    (rule,) = {f["rule"] for f in third["top_findings"]}
    assert (new["kind"], new["after"]) == ("new_finding", rule) and rule in new["text"]
    # AND capture 4 stays flagged on its step time against capture 2 (3 was not good); its rule is not new
    assert [r["kind"] for r in fourth["flag"]["reasons"]] == ["step_time"]
    assert fourth["flag"]["against"]["index"] == 2
    # AND the diff link opens the comparison of capture 2 (before) with capture 3 (after)
    path, _, query = flag["diff"].partition("?")
    page = render(services, path, "?" + query)
    dropdowns = [c for c in page.children if getattr(c, "id", None) in (compare.Ids.A, compare.Ids.B)]
    assert [d.value for d in dropdowns] == [ids[1], ids[2]]


def test_a_higher_threshold_keeps_only_the_new_finding(
    dashboard: tuple[Running, Services, list[str]],
) -> None:
    running, _, _ = dashboard
    # the slow captures take 3.98x the fast ones' step time: +298%, under a 500% threshold
    captures = run_json(running, RUN, "?threshold=5")["captures"]
    assert [c["flag"] is not None for c in captures] == [False, False, True, False]
    assert [r["kind"] for r in captures[2]["flag"]["reasons"]] == ["new_finding"]


def test_the_traces_list_makes_the_run_one_row(dashboard: tuple[Running, Services, list[str]]) -> None:
    _, services, ids = dashboard
    table = rows(services.store.entries(), "")
    runs = [r for r in table if r["id"] == f"run:{RUN}"]
    assert len(runs) == 1 and len(table) == 2  # the run, and the plain upload as before
    (plain,) = [r for r in table if r is not runs[0]]
    assert (
        plain["name"] == ITEM.name and plain["run"] == "" and plain["open"] == f"[open](/trace/{plain['id']})"
    )
    row = runs[0]
    assert row["run"] == "4 captures, 2 flagged" and row["flagged"] == 2
    assert row["open"] == f"[run](/runs/{RUN})" and row["tags"] == f"run:{RUN}"
    latest = services.store.get(ids[3]).summary
    assert latest is not None and row["utilization"] == latest["device_utilization"]
    # the run's row is found by its id, and by a capture's name
    assert [r["id"] for r in rows(services.store.entries(), "7F3A")] == [f"run:{RUN}"]
    assert [r["id"] for r in rows(services.store.entries(), "trace.pt")] == []  # the bundles' names: *.tar.gz


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        (f"/api/runs/{urllib.parse.quote(HOSTILE)}", 400, "not a run id"),
        ("/api/runs/a%2Fb", 400, "not a run id"),
        ("/api/runs/..", 400, "not a run id"),
        ("/api/runs/a%20b", 400, "not a run id"),
        (
            "/api/runs/_train.py-20261202-010000-a1b2c3",
            404,
            "no captures of run '_train.py-20261202-010000-a1b2c3'",
        ),
        ("/api/runs/" + "x" * 129, 400, "not a run id"),
        ("/api/runs/no-such-run", 404, "no captures of run 'no-such-run'"),
        (f"/api/runs/{RUN}?threshold=abc", 400, "threshold is a fraction"),
        (f"/api/runs/{RUN}?threshold=nan", 400, "threshold is a fraction"),
        (f"/api/runs/{RUN}?threshold=0", 400, "threshold is a fraction"),
    ],
)
def test_junk_run_ids_and_thresholds_are_one_line_errors(
    dashboard: tuple[Running, Services, list[str]], path: str, status: int, says: str
) -> None:
    running, _, _ = dashboard
    got, kind, body = get(running, path)
    assert (got, kind) == (status, "application/json")
    error = json.loads(body)["error"]
    assert says in error and "\n" not in error and "<" not in error


def test_a_hostile_run_id_is_never_markup(
    dashboard: tuple[Running, Services, list[str]], tmp_path: Path
) -> None:
    running, services, _ = dashboard
    # GIVEN a capture whose sidecar names its run with markup
    bundle = capture_bundle(tmp_path / "hostile", FAST, HOSTILE, 1, "2026-12-02T05:00:00Z")
    trace_id = client.upload(bundle, running.url, token=TOKEN)["id"]
    try:
        assert client.wait(trace_id, running.url, timeout=120, token=TOKEN)["status"] == "ready"
        assert analysis(running, trace_id)["source"]["capture"]["run_id"] == HOSTILE
        # THEN the traces list shows it as a plain upload (no run row, no link made of its run id)
        (row,) = [r for r in rows(services.store.entries(), "") if r["id"] == trace_id]
        assert row["run"] == "" and row["open"] == f"[open](/trace/{trace_id})"
        # AND its run's URL is refused, in the API and the page, without repeating it
        quoted = urllib.parse.quote(HOSTILE)
        status, _, body = get(running, f"/api/runs/{quoted}")
        assert status == 400 and b"<img" not in body
        page = render(services, f"/runs/{quoted}")
        assert "not a run id" in page.children and HOSTILE not in page.children
        status, kind, body = get(running, f"/runs/{quoted}")  # the page's HTML never carries the path
        assert status == 200 and kind.startswith("text/html") and b"<img src=x" not in body
        # AND the capture's own page does not link a run
        assert not any("/runs/" in t for t in walk(render(services, f"/trace/{trace_id}")))
    finally:
        services.store.delete(trace_id)


def test_the_run_page_and_api_need_the_token(dashboard: tuple[Running, Services, list[str]]) -> None:
    running, _, _ = dashboard
    for path in (f"/api/runs/{RUN}", f"/runs/{RUN}"):
        for wrong in ({}, {"Authorization": "Bearer " + "x" * len(TOKEN)}):
            status, _, body = get(running, path, wrong)
            assert status == 401 and b"token" in body and RUN.encode() not in body
        assert get(running, path)[0] == 200


def test_the_run_page_shows_the_flag_the_chart_and_the_table(
    dashboard: tuple[Running, Services, list[str]],
) -> None:
    _, services, ids = dashboard
    page = render(services, f"/runs/{RUN}")
    shown = walk(page)
    assert any(
        t.startswith("4 captures, 2026-12-02 01:00:00 to 2026-12-02 04:00:00 UTC; 2 flagged") for t in shown
    )
    assert f"/compare?a={ids[1]}&b={ids[2]}" in shown  # capture 3's flag links its comparison
    assert find(page, run_page.Ids.CHART.value) is not None
    table = find(page, run_page.Ids.TABLE.value)
    assert [r["index"] for r in table.data] == [1, 2, 3, 4]
    assert [r["flagged"] for r in table.data] == [0, 0, 1, 1]
    assert (
        table.data[2]["open"]
        == f"[trace](/trace/{ids[2]}) · [diff against 2](/compare?a={ids[1]}&b={ids[2]})"
    )
    # a capture's own page links its run
    assert f"/runs/{RUN}" in walk(render(services, f"/trace/{ids[2]}"))


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


def test_a_long_run_id_keeps_its_whole_tag(dashboard: tuple[Running, Services, list[str]]) -> None:
    running, services, _ = dashboard
    tag = "run:" + "x" * 128  # the longest run id: its captures are grouped by it while analysed
    trace_id = client.upload(ITEM, running.url, tags=(tag,), token=TOKEN)["id"]
    try:
        assert services.store.get(trace_id).tags == (tag,)
        assert client.wait(trace_id, running.url, timeout=120, token=TOKEN)["status"] == "ready"
    finally:
        services.store.delete(trace_id)


def test_the_run_page_takes_the_threshold_from_its_url(
    dashboard: tuple[Running, Services, list[str]],
) -> None:
    _, services, _ = dashboard
    page = render(services, f"/runs/{RUN}", "?threshold=5")
    assert [r["flagged"] for r in find(page, run_page.Ids.TABLE.value).data] == [0, 0, 1, 0]
    assert any("more than 500% above" in t for t in walk(page))
    assert render(services, f"/runs/{RUN}", "?threshold=-1").children.startswith("threshold is a fraction")
