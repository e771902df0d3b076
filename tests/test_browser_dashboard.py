"""The dashboard in headless Debian chromium: start it, upload a trace through the page's drop zone, see
the overview and the timeline draw, zoom (a server round-trip), open the compare page; no console errors.
A job upload: the rank picker opens the straggler's own timeline.

Skips when chromium is absent unless ``STALLSCOPE_REQUIRE_BROWSER=1`` (see ``tests/_browser.py``).
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from _browser import Browser, start_browser
from synth.job import Plant, build_job

from stallscope.analyzer.load.loader import load
from stallscope.dashboard.app import Running, create_app, open_services

ITEM = Path(__file__).resolve().parent.parent / "sample_traces" / "item_in_loop.pt.trace.json.gz"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with start_browser() as b:
        yield b


@pytest.fixture
def dashboard(browser: Browser, tmp_path: Path) -> Iterator[str]:
    """A dashboard of its own; the browser starts from a blank page and leaves its pages before the server
    stops (a page left open would go on polling it, into the next test's console)."""
    browser.fresh()
    services = open_services(tmp_path / "store", max_upload_mb=16)  # analysis in a child process
    running = Running(create_app(services), "127.0.0.1", 0).start()
    try:
        yield running.url
    finally:
        browser.fresh()
        running.stop()
        assert services.worker is not None
        services.worker.shutdown()


HOSTILE = "<img src=x onerror=alert(1)>.pt.trace.json.gz"  # a file name is trace text too


def test_upload_overview_timeline_zoom_compare(browser: Browser, dashboard: str, tmp_path: Path) -> None:
    upload = tmp_path / HOSTILE
    upload.write_bytes(ITEM.read_bytes())
    browser.open(dashboard + "/")
    browser.wait_for("return document.querySelector('#traces-upload input[type=file]')", timeout=30)
    browser.driver.find_element("css selector", "#traces-upload input[type=file]").send_keys(str(upload))
    # the upload opens the trace's page: progress first, then the overview once the worker is done
    browser.wait_for("return location.pathname.startsWith('/trace/')", timeout=30)
    verdict = browser.wait_for(
        "const v = document.querySelector('#overview-verdict'); return v && v.textContent", timeout=90
    )
    assert "-bound" in verdict
    assert browser.js("return document.querySelectorAll('#overview-findings li').length") > 0
    assert HOSTILE in browser.js("return document.body.innerText")  # shown as text, not run
    assert browser.js("return document.querySelectorAll('img[src=x]').length") == 0
    trace_path = browser.js("return location.pathname")

    browser.driver.find_element("link text", "Timeline").click()
    bars = "return document.querySelectorAll('#explorer-graph .trace.bars path').length"
    assert browser.wait_for(bars, timeout=60) > 0
    before = browser.js("return document.querySelector('#explorer-status').textContent")
    assert before.startswith("showing 0.0 µs to ")
    browser.js(
        "const g = document.querySelector('#explorer-graph .js-plotly-plot');"
        "Plotly.relayout(g, {'xaxis.range': [1, 2]});"
    )
    after = browser.wait_for(
        "const s = document.querySelector('#explorer-status').textContent;"
        "return s.startsWith('showing 1.00 ms to 2.00 ms') && s",
        timeout=30,
    )
    assert "items" in after
    assert browser.wait_for(bars, timeout=30) > 0
    assert browser.js("return location.pathname") == trace_path + "/timeline"
    # the zoomed axis is still in ms from the window start: zooming to 1.2..1.5 shows 1.2..1.5 ms
    browser.js(
        "const g = document.querySelector('#explorer-graph .js-plotly-plot');"
        "Plotly.relayout(g, {'xaxis.range': [1.2, 1.5]});"
    )
    browser.wait_for(
        "return document.querySelector('#explorer-status').textContent.startsWith('showing 1.20 ms to 1.50 ms')",
        timeout=30,
    )

    browser.driver.find_element("link text", "Top ops").click()
    first_op = browser.wait_for(
        "const c = document.querySelector('#tops-ops td[data-dash-column=name]'); return c && c.textContent",
        timeout=30,
    )
    assert first_op.startswith("aten::")

    browser.driver.find_element("link text", "Compare…").click()
    browser.wait_for("return document.querySelector('#compare-a')", timeout=30)
    browser.driver.find_element("link text", "Traces").click()
    browser.wait_for(f"return document.body.innerText.includes({HOSTILE!r})", timeout=30)
    assert browser.dialog_text() is None
    assert browser.console_errors() == []


def test_a_file_over_the_upload_limit_is_refused_with_a_message(
    browser: Browser, dashboard: str, tmp_path: Path
) -> None:
    # GIVEN a dashboard with a 16 MB upload limit and a 17 MB file
    big = tmp_path / "big.pt.trace.json"
    big.write_bytes(b" " * (17 << 20))
    browser.open(dashboard + "/")
    browser.wait_for("return document.querySelector('#traces-upload input[type=file]')", timeout=30)
    # WHEN it is chosen in the drop zone
    browser.driver.find_element("css selector", "#traces-upload input[type=file]").send_keys(str(big))
    # THEN the page says why nothing happens, and how to send it, instead of staying silent
    shown = browser.wait_for(
        "const m = document.querySelector('#traces-upload-limit'); return m && m.textContent", timeout=10
    )
    assert shown.startswith("big.pt.trace.json is 17.0 MB, over this dashboard's upload limit of 16.0 MB")
    assert f"stallscope upload FILE --to {dashboard}" in shown
    assert browser.js("return location.pathname") == "/"  # no upload started
    assert browser.console_errors() == []


def test_a_job_upload_opens_the_stragglers_timeline_from_the_rank_picker(
    browser: Browser, dashboard: str, tmp_path: Path
) -> None:
    # GIVEN a 3-rank job, rank 2 late, uploaded as a tar.gz through the drop zone
    folder = tmp_path / "job"
    build_job(folder, 3, 3, [Plant(rank=2, step=1, cause="input", us=1500.0)])
    bundle = tmp_path / "job.tar.gz"
    with tarfile.open(bundle, "w:gz") as tar:
        for f in sorted(folder.iterdir()):
            tar.add(f, arcname=f"job/{f.name}")
    own = {
        r: {
            lane.label for lane in load(folder / f"rank{r}.pt.trace.json.gz", use_cache=False).models[0].lanes
        }
        for r in (0, 2)
    }  # each rank's threads, read straight from its file
    browser.open(dashboard + "/")
    browser.wait_for("return document.querySelector('#traces-upload input[type=file]')", timeout=30)
    browser.driver.find_element("css selector", "#traces-upload input[type=file]").send_keys(str(bundle))
    browser.wait_for("return location.pathname.startsWith('/trace/')", timeout=30)
    browser.wait_for("return document.querySelector('#overview-verdict')", timeout=120)
    # the job page's heatmap: each rank's label on the axis links its timeline
    browser.driver.find_element("link text", "Job").click()
    heatmap_links = browser.wait_for(
        "const a = [...document.querySelectorAll('#job-heatmap .ytick a')];"
        "return a.length && a.map(x => [x.textContent, x.getAttribute('href') || x.getAttribute('xlink:href')])",
        timeout=30,
    )
    entry = browser.js("return location.pathname").split("/")[2]
    assert sorted(heatmap_links) == [[str(r), f"/trace/{entry}/timeline?rank={r}"] for r in range(3)]
    browser.js(  # a click on rank 1's label (an SVG link: found by its text)
        "[...document.querySelectorAll('#job-heatmap .ytick a')].find(a => a.textContent === '1')"
        ".dispatchEvent(new MouseEvent('click', {bubbles: true, cancelable: true, view: window}))"
    )
    title = "const t = document.querySelector('#explorer-title'); return t && t.textContent"
    assert browser.wait_for(title, timeout=60).startswith("Rank 1: rank1.pt.trace.json.gz")
    assert len(browser.driver.window_handles) == 1  # the same tab
    browser.driver.back()
    browser.wait_for("return document.querySelector('#job-heatmap')", timeout=30)
    browser.driver.find_element("link text", "Timeline").click()
    title = "const t = document.querySelector('#explorer-title'); return t && t.textContent"
    assert browser.wait_for(title, timeout=60).startswith("Rank 0: rank0.pt.trace.json.gz")
    # WHEN the straggler is clicked in the picker (it is listed first, marked)
    picker = browser.js("return [...document.querySelectorAll('#explorer-ranks a')].map(a => a.textContent)")
    assert picker == ["rank 2 (straggler)", "rank 0 · analysed in full", "rank 1"]
    browser.driver.find_element("css selector", "#explorer-ranks a#explorer-rank-2").click()
    # THEN the timeline is rank 2's: its title, its file, its own threads as rows
    shown = browser.wait_for(
        "const t = document.querySelector('#explorer-title');"
        "return t && t.textContent.startsWith('Rank 2') && t.textContent",
        timeout=60,
    )
    assert shown == "Rank 2 (straggler): rank2.pt.trace.json.gz"
    assert browser.js("return location.search") == "?rank=2"
    rows = browser.wait_for(
        "const r = [...document.querySelectorAll('#explorer-graph .ytick text')].map(t => t.textContent);"
        "return r.length && r",
        timeout=30,
    )
    assert own[2] - own[0] and (own[2] - own[0]) <= set(rows)
    assert not (own[0] - own[2]) & set(rows)
    assert browser.js("return document.querySelector('#explorer-rank-2').className").endswith("ss-active")
    # a zoom asks the server for rank 2's window again (the view keeps its rank)
    browser.js(
        "const g = document.querySelector('#explorer-graph .js-plotly-plot');"
        "Plotly.relayout(g, {'xaxis.range': [1, 2]});"
    )
    browser.wait_for(
        "return document.querySelector('#explorer-status').textContent.startsWith('showing 1.00 ms to 2.00 ms')",
        timeout=30,
    )
    assert browser.js("return document.querySelector('#explorer-title').textContent") == shown
    assert browser.dialog_text() is None
    assert browser.console_errors() == []


def test_a_dashboard_with_a_token_refuses_the_bare_url_and_works_from_the_token_url(
    browser: Browser, tmp_path: Path
) -> None:
    # GIVEN a dashboard that needs a token
    token = "browser-token-0123456789abcdef"
    browser.fresh()
    services = open_services(tmp_path / "store", max_upload_mb=16)
    running = Running(create_app(services, token), "127.0.0.1", 0).start()
    try:
        # WHEN the browser opens it without the token THEN it is refused and shows nothing of the store
        browser.open(running.url + "/")
        assert "This dashboard needs its token" in browser.js("return document.body.innerText")
        assert browser.js("return document.querySelector('#traces-upload')") is None
        browser.console_errors()  # the refused page load is a console error by design
        # WHEN it opens the URL printed at start THEN the token leaves the address bar (a cookie holds it)
        browser.open(f"{running.url}/?token={token}")
        browser.wait_for("return document.querySelector('#traces-upload input[type=file]')", timeout=30)
        assert browser.js("return location.search") == ""
        assert browser.js("return document.cookie") == ""  # HttpOnly: page scripts cannot read it
        # AND the page's callbacks work: an upload (a Dash POST) opens the analysed trace
        upload = tmp_path / "item.pt.trace.json.gz"
        upload.write_bytes(ITEM.read_bytes())
        browser.driver.find_element("css selector", "#traces-upload input[type=file]").send_keys(str(upload))
        browser.wait_for("return location.pathname.startsWith('/trace/')", timeout=30)
        verdict = browser.wait_for(
            "const v = document.querySelector('#overview-verdict'); return v && v.textContent", timeout=90
        )
        assert "-bound" in verdict
        assert [e.name for e in services.store.entries()] == [upload.name]
        assert browser.console_errors() == []
    finally:
        browser.driver.delete_all_cookies()
        browser.fresh()
        running.stop()
        assert services.worker is not None
        services.worker.shutdown()
