"""The HTML report in a real browser (headless Debian chromium): it draws, logs no errors, sorts, and
runs no script from trace text. Skipped without chromium unless STALLSCOPE_REQUIRE_BROWSER=1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _browser import Browser, png_stats, start_browser
from synth import library as sc
from synth.trace import SynthTrace

from stallscope.analyzer.analysis import Analysis, analyze
from stallscope.analyzer.load.loader import load
from stallscope.dashboard import report

DRAWN = "return document.body && document.body.getAttribute('data-drawn') === 'all'"
PWNED = "window.__pwned = 1"
HOSTILE = (
    f'<img src=x onerror="{PWNED}">',
    f"</script><script>{PWNED}; alert('x')</script>",
    "k'\"<svg onload=alert(1)>ü中\u202e",
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with start_browser() as b:
        yield b


def write_report(a: Analysis, path: Path) -> Path:
    report.write(a, path)  # plotly.js inlined: the browser needs no network
    return path


def analysed(s: SynthTrace, tmp_path: Path) -> Analysis:
    return analyze(load(s.write(tmp_path / f"{s.name}.pt.trace.json.gz"), use_cache=False))


def check_drawn(browser: Browser, page: Path, shot: Path) -> None:
    """Open the report; every figure drew marks, nothing went to the console, the screenshot is a page."""
    browser.fresh()
    browser.open(page)
    browser.wait_for(DRAWN, timeout=30)
    assert browser.console_errors() == []
    marks = browser.js(
        """
        const out = {};
        for (const div of document.querySelectorAll('[data-figure]')) {
          out[div.id] = div.querySelectorAll('.main-svg .point, .main-svg .trace path').length;
        }
        return out;"""
    )
    assert marks and all(n > 0 for n in marks.values()), marks
    assert "timeline-0" in marks and "chart-idle" in marks and "chart-critical" in marks
    stats = png_stats(browser, browser.screenshot(shot))
    assert stats.colours > 40 and stats.non_background > 0.05, stats


def test_synthetic_trace_report_draws_and_its_sync_table_sorts(browser: Browser, tmp_path: Path) -> None:
    a = analysed(sc.item_in_loop(steps=4), tmp_path)
    page = write_report(a, tmp_path / "item.html")
    check_drawn(browser, page, tmp_path / "item.png")
    # the timeline drew one bar per extracted item (the representative step: 6 kernels, a copy, ops...)
    drawn, items = browser.js(
        """
        const div = document.getElementById('timeline-0');
        const items = div.data.filter(t => t.type === 'bar').reduce((n, t) => n + t.x.length, 0);
        return [div.querySelectorAll('.barlayer .point').length, items];"""
    )
    assert drawn == items > 20
    # a window resize (or printing) keeps each plot's height
    heights = "return [...document.querySelectorAll('[data-figure]')].map(d => d.clientHeight)"
    before = browser.js(heights)
    browser.driver.set_window_size(900, 800)
    browser.js("window.dispatchEvent(new Event('resize'))")
    browser.wait_for("return [...document.querySelectorAll('.main-svg')].every(s => s.clientWidth < 900)")
    assert browser.js(heights) == before and min(before) > 100
    browser.driver.set_window_size(1400, 1000)
    # clicking "host wait" sorts the sync groups by their wait, descending on the second click
    waits = (
        "return [...document.querySelectorAll('#sync-table tbody tr')].map(r => +r.cells[4].dataset.value)"
    )
    header = "document.querySelectorAll('#sync-table th')[4].click()"
    browser.js(header)
    ascending = browser.js(waits)
    browser.js(header)
    descending = browser.js(waits)
    assert ascending == sorted(ascending) and descending == sorted(ascending, reverse=True)
    assert len(ascending) == 2  # the four .item() calls at one site, and the final synchronize


def test_real_trace_report_draws(browser: Browser, shared_traces: Path, tmp_path: Path) -> None:
    a = analyze(load(shared_traces / "tracelens_h100_bert_small_pystack.pt.trace.json.gz", use_cache=False))
    check_drawn(browser, write_report(a, tmp_path / "bert.html"), tmp_path / "bert.png")


def test_hostile_names_render_as_text_and_run_nothing(browser: Browser, tmp_path: Path) -> None:
    s = SynthTrace("hostile")
    with s.py_frame(f"x{HOSTILE[0]}.py", 3, HOSTILE[2]):  # a frame name may not start with "<"
        for _ in range(2):
            with s.step():
                with s.op(HOSTILE[2]):
                    s.launch(HOSTILE[1], 300)
                s.item(avoidable=True, reasons=("repeated",))
    page = write_report(analysed(s, tmp_path), tmp_path / "hostile.html")
    browser.fresh()
    browser.open(page)
    assert browser.dialog_text() is None
    browser.wait_for(DRAWN, timeout=30)
    assert browser.dialog_text() is None
    assert browser.js("return window.__pwned === undefined")
    assert browser.js("return document.querySelectorAll('main img, main svg image, main iframe').length") == 0
    # the names are on the page as text (the sync table's call site)
    body = browser.js("return document.body.innerText")
    assert f"x{HOSTILE[0]}.py:3 in {HOSTILE[2]}" in body
    # hovering the kernel shows its name as text in plotly's hover label, and runs nothing
    shown = browser.js(
        """
        const div = document.getElementById('timeline-0');
        const k = div.data.findIndex(t => t.name === 'kernel');
        Plotly.Fx.hover(div, [{curveNumber: k, pointNumber: 0}]);
        return div.querySelector('.hoverlayer').textContent;"""
    )
    assert HOSTILE[1] in shown
    assert browser.js("return window.__pwned === undefined")
    assert browser.dialog_text() is None
    assert browser.console_errors() == []


def test_a_missing_browser_skips_unless_required(monkeypatch: pytest.MonkeyPatch) -> None:
    import _browser

    monkeypatch.setattr(_browser, "_find", lambda *names: None)
    monkeypatch.delenv(_browser.REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="chromium"), start_browser():
        pass
    monkeypatch.setenv(_browser.REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="STALLSCOPE_REQUIRE_BROWSER=1"), start_browser():
        pass


def test_a_job_report_shows_the_stragglers_timeline_and_another_rank_on_a_click(
    browser: Browser, tmp_path: Path
) -> None:
    from synth.job import Plant, build_job

    from stallscope.analyzer.job.execute import Execution
    from stallscope.jobs import load_and_analyse_job, timeline_ranks

    # GIVEN a 3-rank job whose rank 1 is late, reported with a timeline per rank
    folder = tmp_path / "job"
    build_job(folder, 3, 3, [Plant(rank=1, step=2, cause="host", us=1500.0)])
    how = Execution(use_cache=False)
    result, job = load_and_analyse_job([str(folder)], None, how)
    assert job is not None
    page = tmp_path / "job.html"
    report.write(result, page, job=job, ranks=timeline_ranks(job, result, how))
    browser.open(page)
    browser.wait_for(DRAWN, timeout=30)
    bars = "return document.querySelectorAll('#{} .main-svg .trace path').length"
    # THEN the straggler's timeline is drawn and shown, another rank's waits hidden and undrawn
    assert browser.js(bars.format("timeline-rank1-0")) > 0
    assert browser.js("return document.getElementById('rank-timelines-2').hidden") is True
    assert browser.js(bars.format("timeline-rank2-0")) == 0
    # WHEN its "show" link in the ranks table is clicked, THEN its timeline is shown and drawn
    browser.js("document.querySelector('#job-rank-table [data-rank-link=\"2\"]').click()")
    assert browser.wait_for(bars.format("timeline-rank2-0"), timeout=10) > 0
    assert browser.js("return document.getElementById('rank-timelines-1').hidden") is True
    assert browser.js("return document.querySelector('#rank-picker [aria-pressed=true]').dataset.rank") == "2"
    assert browser.console_errors() == []
