"""A long run in headless Debian chromium: the traces list shows the run as one row with its flag, its
link opens the run page with the flagged capture, the chart and the link to the comparison; a hostile
run id in the URL is a message, never markup. No console errors.

Skips when chromium is absent unless ``STALLSCOPE_REQUIRE_BROWSER=1`` (see ``tests/_browser.py``).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from _browser import Browser, start_browser
from test_dashboard_runs import HOSTILE, RUN, upload_captures

from stallscope.dashboard.app import Running, create_app, open_services


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with start_browser() as b:
        yield b


@pytest.fixture
def dashboard(browser: Browser, tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """A dashboard holding RUN's four captures; the browser leaves its pages before the server stops."""
    browser.fresh()
    services = open_services(tmp_path / "store", max_upload_mb=8, processes=False)
    running = Running(create_app(services), "127.0.0.1", 0, quiet=True).start()
    try:
        yield running.url, upload_captures(running.url, tmp_path / "bundles")
    finally:
        browser.fresh()
        running.stop()
        assert services.worker is not None
        services.worker.shutdown()


def test_the_run_row_opens_the_run_page_with_its_flag_and_diff(
    browser: Browser, dashboard: tuple[str, list[str]]
) -> None:
    url, ids = dashboard
    # GIVEN the traces list: the run is one row, with its captures and flags
    browser.open(url + "/")
    row = browser.wait_for(
        "const c = [...document.querySelectorAll('#traces-table td[data-dash-column=name]')]"
        f".find(td => td.textContent === 'run {RUN}'); return c && c.parentElement.innerText",
        timeout=30,
    )
    assert "4 captures, 2 flagged" in row
    assert (
        browser.js("return document.querySelectorAll('#traces-table td[data-dash-column=name]').length") == 1
    )
    # WHEN its link is followed
    browser.driver.find_element("css selector", f"#traces-table a[href='/runs/{RUN}']").click()
    # THEN the run page flags captures 3 and 4, capture 3 for its step time and its new finding
    flagged = browser.wait_for(
        "const l = [...document.querySelectorAll('#run-flags li')].map(li => li.innerText);"
        "return l.length === 2 && l",
        timeout=30,
    )
    assert flagged[0].startswith("capture 3 (2026-12-02 03:00:00): step time 2.01 ms → 8.01 ms (+298%)")
    assert "new finding: Device-wide synchronize in the loop" in flagged[0]
    assert flagged[1].startswith("capture 4") and "new finding" not in flagged[1]
    # AND the chart draws both lines, a point per capture
    points = "return document.querySelectorAll('#run-chart .scatterlayer .trace .points path').length"
    assert browser.wait_for(points, timeout=30) == 8
    # AND the flag's link opens the comparison of capture 2 (before) with capture 3 (after)
    browser.driver.find_element("link text", "compare with capture 2").click()
    browser.wait_for("return location.pathname === '/compare'", timeout=30)
    assert browser.js("return location.search") == f"?a={ids[1]}&b={ids[2]}"
    browser.wait_for(
        "const r = document.querySelector('#compare-result'); return r && r.innerText.includes('Headline')",
        timeout=30,
    )

    # WHEN a run id with markup is opened THEN the page says it is not one, as text
    browser.open(f"{url}/runs/{urllib.parse.quote(HOSTILE)}")
    shown = browser.wait_for(
        "const m = document.querySelector('.stallscope-error'); return m && m.textContent", timeout=30
    )
    assert shown.startswith("not a run id")
    assert browser.js("return document.querySelectorAll('img[src=x]').length") == 0
    assert browser.dialog_text() is None
    assert browser.console_errors() == []
