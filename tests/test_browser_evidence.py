"""From a claim to its evidence, in headless Debian chromium: a finding's "show" link opens the timeline at
the finding's range (with its margin) with the events it names outlined, in the HTML report and in the
dashboard; and zooming the report's timeline splits merged blocks again.

Each test starts from a blank page and reads only its own console (``Browser.fresh``). Skips when chromium
is absent unless ``STALLSCOPE_REQUIRE_BROWSER=1`` (see ``tests/_browser.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from _browser import Browser, start_browser
from synth import library as sc

from stallscope.analyzer.analysis import Analysis, analyze
from stallscope.analyzer.load.loader import load
from stallscope.dashboard import claims, report
from stallscope.dashboard.app import Running, create_app, open_services
from stallscope.dashboard.timeline import extract

ITEM = Path(__file__).resolve().parent.parent / "sample_traces" / "item_in_loop.pt.trace.json.gz"
DRAWN = "return document.body && document.body.getAttribute('data-drawn') === 'all'"
SHAPES = """
const div = arguments[0];
return (div.layout.shapes || []).filter(s => s.name === 'highlight').map(s => [s.y0 + 0.48, s.x0, s.x1]);"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with start_browser() as b:
        yield b


@pytest.fixture
def clean(browser: Browser) -> Browser:
    browser.fresh()
    return browser


def expected(a: Analysis, claim_id: str, rows: list[str]) -> tuple[list[float], list[list[float]]]:
    """The x range (ms from the window's start) and the outlines (row, start ms, end ms) a claim opens."""
    c = claims.claim(a, claim_id)
    assert c is not None and c.marks
    w = a.window
    lo, hi = c.view(w.start_us, w.end_us)
    assert w.start_us <= lo < c.start_us <= c.end_us < hi <= w.end_us  # a margin on both sides
    marks = [[rows.index(k), (s - w.start_us) / 1000, (e - w.start_us) / 1000] for k, s, e in c.marks]
    return [(lo - w.start_us) / 1000, (hi - w.start_us) / 1000], sorted(marks)


def close(got: list[list[float]], want: list[list[float]], tol: float = 1e-3) -> bool:
    return len(got) == len(want) and all(
        abs(a - b) <= tol for g, w in zip(sorted(got), want, strict=True) for a, b in zip(g, w, strict=True)
    )


def test_a_findings_show_link_opens_the_report_timeline_at_its_syncs(clean: Browser, tmp_path: Path) -> None:
    # GIVEN a report of a loop calling loss.item() every step (finding 1: the avoidable scalar reads)
    a = analyze(load(sc.item_in_loop(steps=4).write(tmp_path / "item.pt.trace.json.gz"), use_cache=False))
    assert a.findings[0].rule == "false_sync_scalar_read"
    page = tmp_path / "item.html"
    report.write(a, page)
    clean.open(page)
    clean.wait_for(DRAWN, timeout=30)
    div = clean.driver.find_element("id", "timeline-0")
    rows = clean.js("return JSON.parse(document.getElementById('timeline-0-columns').textContent).rows")
    want_range, want_marks = expected(a, "finding-1", rows)
    # WHEN its "show" link is clicked
    clean.driver.find_element("css selector", "a.show[data-claim='finding-1']").click()
    # THEN the timeline shows the costliest sync's range with its margin
    got = clean.wait_for(
        f"const r = arguments[0] || document.getElementById('timeline-0').layout.xaxis.range;"
        f"return Math.abs(r[0] - {want_range[0]}) < 1e-6 && Math.abs(r[1] - {want_range[1]}) < 1e-6 && r",
        timeout=10,
    )
    assert got == pytest.approx(want_range, abs=1e-6)
    # AND the blocking calls of every scalar read at that site are outlined, on their rows
    shapes = clean.js(SHAPES, div)
    calls = sum(len(a.syncs[i].calls) for i in claims.finding_syncs(a, a.findings[0]))
    assert close(shapes, want_marks) and len(shapes) == calls >= 4  # one .item() a step
    assert "finding 1" in clean.js("return document.getElementById('timeline-0-claim').textContent")
    # AND every outline in view sits on a drawn bar of its row (the blocking call the sync row draws)
    bars = clean.js(
        "const d = arguments[0]; return d.data.filter(t => t.type === 'bar')"
        ".flatMap(t => t.y.map((y, i) => [y, t.base[i], t.base[i] + t.x[i]]));",
        div,
    )
    r = want_range
    for y, s, e in want_marks:
        if s < r[1] and e > r[0]:
            assert any(by == y and bs <= s + 1e-6 and be >= e - 1e-6 for by, bs, be in bars), (y, s, e)
    assert clean.console_errors() == []


def test_zooming_the_report_timeline_splits_merged_blocks(clean: Browser, tmp_path: Path) -> None:
    # GIVEN 20 steps of 60 tiny kernels: merged at the width of the whole window
    a = analyze(
        load(sc.launch_bound_loop(steps=20, kernels_per_step=60).write(tmp_path / "lb.pt.trace.json.gz"))
    )
    page = tmp_path / "lb.html"
    report.write(a, page)
    clean.open(page)
    clean.wait_for(DRAWN, timeout=30)
    kernels = """
    const d = document.getElementById('timeline-0');
    const t = d.data.find(t => t.name === 'kernel');
    return [t.x.length, t.hovertext.filter(h => h.includes('merged at this zoom')).length];"""
    whole = clean.driver.find_element("css selector", "button.view:last-child")
    whole.click()
    clean.wait_for(
        f"return Math.abs(document.getElementById('timeline-0').layout.xaxis.range[1] - {a.window.dur_us / 1000}) < 1e-6"
    )
    drawn, merged = clean.js(kernels)
    assert merged > 0 and drawn < 1200
    # WHEN zoomed onto one step
    step = a.steps[3]
    lo, hi = (
        (step.start_us - a.window.start_us) / 1000,
        (step.start_us + step.dur_us - a.window.start_us) / 1000,
    )
    clean.js(f"Plotly.relayout(document.getElementById('timeline-0'), {{'xaxis.range': [{lo}, {hi}]}})")
    clean.wait_for(f"return document.getElementById('timeline-0').getAttribute('data-range') === '{lo},{hi}'")
    # THEN its kernels are drawn one bar each, none merged: as many as the step's range holds
    drawn, merged = clean.js(kernels)
    sl = extract(a.model, a, step.start_us, step.start_us + step.dur_us, max_items_per_lane=10**6)
    stream = next(r for r in sl.rows if r.key.startswith("stream:"))
    assert merged == 0 and drawn == stream.items.color.count("kernel") >= 60
    # AND a click on a kernel outlines the call that launched it, with a line from the kernel to it
    link = clean.js(
        """
        const d = document.getElementById('timeline-0');
        const c = d.data.findIndex(t => t.name === 'kernel'), t = d.data[c];
        d.emit('plotly_click', {points: [{data: t, curveNumber: c, pointNumber: 0, customdata: t.customdata[0],
                                          base: t.base[0], x: t.x[0], y: t.y[0]}]});
        return [t.base[0], t.y[0], (d.layout.shapes || []).filter(s => s.name === 'link')];"""
    )
    base, row, shapes = link
    k = int(np.flatnonzero(np.isclose(stream.items.start_us, a.window.start_us + base * 1000))[0])
    launch = int(stream.items.partner[k])
    assert launch == int(a.model.events.launch[int(stream.items.event[k])]) >= 0
    rows = clean.js("return JSON.parse(document.getElementById('timeline-0-columns').textContent).rows")
    line, box = shapes
    assert line["y0"] == row and line["y1"] == rows.index(sl.places[launch][0])
    w0 = a.window.start_us
    assert box["x0"] == pytest.approx((a.model.events.ts[launch] - w0) / 1000, abs=1e-4)
    assert box["x1"] == pytest.approx((a.model.events.end[launch] - w0) / 1000, abs=1e-4)
    assert clean.console_errors() == []


@pytest.fixture
def dashboard(browser: Browser, tmp_path: Path) -> Iterator[str]:
    """A dashboard of its own; the browser starts from a blank page and leaves its pages before the server
    stops (a page left open would go on polling it, into the next test's console)."""
    browser.fresh()
    services = open_services(tmp_path / "store", max_upload_mb=16)
    running = Running(create_app(services), "127.0.0.1", 0).start()
    try:
        yield running.url
    finally:
        browser.fresh()
        running.stop()
        assert services.worker is not None
        services.worker.shutdown()


def test_a_findings_show_link_opens_the_dashboard_timeline_at_its_evidence(
    clean: Browser, dashboard: str, tmp_path: Path
) -> None:
    # GIVEN the sample loop uploaded to the dashboard
    upload = tmp_path / "item_in_loop.pt.trace.json.gz"
    upload.write_bytes(ITEM.read_bytes())
    clean.open(dashboard + "/")
    clean.wait_for("return document.querySelector('#traces-upload input[type=file]')", timeout=30)
    clean.driver.find_element("css selector", "#traces-upload input[type=file]").send_keys(str(upload))
    link = clean.wait_for("return document.querySelector('#show-finding-1')", timeout=90)
    assert link is not None
    a = analyze(load(ITEM))
    # WHEN the first finding's "show" link is clicked
    clean.driver.find_element("id", "show-finding-1").click()
    status = clean.wait_for(
        "const s = document.querySelector('#explorer-status'); return s && s.textContent.startsWith('finding-1') && s.textContent",
        timeout=60,
    )
    assert "outlined" in status
    graph = clean.driver.find_element("css selector", "#explorer-graph .js-plotly-plot")
    rows = [
        t for t in clean.js("return arguments[0].layout.yaxis.ticktext", graph)
    ]  # the dashboard's rows, as extracted for the view
    sl = extract(a.model, a, a.window.start_us, a.window.end_us)
    assert len(rows) == len(sl.rows)
    want_range, want_marks = expected(a, "finding-1", [r.key for r in sl.rows])
    # THEN the visible x range is the finding's, with its margin, and its events are outlined
    got = clean.js("return arguments[0].layout.xaxis.range", graph)
    assert got == pytest.approx(want_range, abs=1e-6)
    assert close(clean.js(SHAPES, graph), want_marks)
    assert clean.console_errors() == []
