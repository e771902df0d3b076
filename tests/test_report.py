"""The HTML report's structure on builder traces: sections, findings, call sites, and numbers that
match the JSON analysis. Hostile trace text stays text. (The browser tests are test_browser_report.py.)"""

from __future__ import annotations

import itertools
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from synth import library as sc
from synth.trace import SynthTrace

from stallscope.analyzer.analysis import Analysis, analyze
from stallscope.analyzer.document.analysis import to_json
from stallscope.analyzer.load.loader import load
from stallscope.dashboard import report
from stallscope.display import text as words

HOSTILE_KERNEL = "</script><script>alert('kernel')</script>"
HOSTILE_OP = "aten::<img src=x onerror=alert(1)>"
HOSTILE_FILE = "tr\"ain'<b>é中.py"
HOSTILE_FUNC = "step<svg onload=alert(2)>"


class Page(HTMLParser):
    """Collects what the tests look at: elements by id and class, their attributes and text, and the
    contents of every script element."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str], list[str]]] = []
        self.scripts: list[tuple[dict[str, str], str]] = []
        self._open: list[tuple[str, dict[str, str], list[str]]] = []
        self._script: dict[str, str] | None = None
        self._script_text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "script":
            self._script, self._script_text = a, []
            return
        el = (tag, a, [])
        self.elements.append(el)
        if tag not in ("meta", "br", "link", "img", "input"):
            self._open.append(el)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._script is not None:
            self.scripts.append((self._script, "".join(self._script_text)))
            self._script = None
            return
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self._script_text.append(data)
            return
        for el in self._open:
            el[2].append(data)

    def by_id(self, ident: str) -> tuple[dict[str, str], str]:
        for _tag, a, text in self.elements:
            if a.get("id") == ident:
                return a, " ".join("".join(text).split())
        raise AssertionError(f"no element with id {ident!r}")

    def by_class(self, cls: str) -> list[tuple[dict[str, str], str]]:
        return [
            (a, " ".join("".join(t).split()))
            for _tag, a, t in self.elements
            if cls in a.get("class", "").split()
        ]

    def json_script(self, ident: str) -> Any:
        for a, text in self.scripts:
            if a.get("id") == ident:
                assert a.get("type") == "application/json"
                return json.loads(text)
        raise AssertionError(f"no JSON script {ident!r}")


def analysed(s: SynthTrace, tmp_path: Path) -> Analysis:
    return analyze(load(s.write(tmp_path / f"{s.name}.pt.trace.json.gz"), use_cache=False))


@pytest.fixture(scope="module")
def item_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Analysis, str]:
    a = analysed(sc.item_in_loop(steps=4), tmp_path_factory.mktemp("item"))
    return a, report.render(a, report.ReportOptions(cdn=True))


def test_sections_appear_in_the_documented_order(item_report: tuple[Analysis, str]) -> None:
    _a, text = item_report
    ids = ["verdict", "findings", "timelines", "charts", "syncs", "tops", "whatif", "source"]
    positions = [text.index(f'<section id="{i}"') for i in ids]
    assert positions == sorted(positions)


def test_top_tables_show_the_analysis_tops_with_their_shares(item_report: tuple[Analysis, str]) -> None:
    a, text = item_report
    tops = to_json(a)["tops"]
    page = Page(text)
    rows = [t for _a, t in page.by_class("site") if t]
    ops = [r["name"] for r in tops["ops"]]
    kernels = [r["name"] for r in tops["kernels"]]
    assert ops and kernels
    # the tables list the JSON's rows in its order (ops by self time, kernels by device time)
    assert [r for r in rows if r in ops] == ops and [r for r in rows if r in kernels] == kernels
    op_table = page.by_id("top-ops")[1]
    first = tops["ops"][0]
    assert (
        f"{first['name']} {report.ms(first['self_us'])} {report.share(first['self_us'] / a.window.dur_us)}"
        in op_table
    )
    k = tops["kernels"][0]
    busy = sum(r["total_us"] for r in tops["kernels"])
    kernel_table = page.by_id("top-kernels")[1]
    assert f"{k['name']} {report.ms(k['total_us'])}" in kernel_table
    assert report.share(k["total_us"] / to_json(a)["summary"]["device_busy_us"]) in kernel_table
    assert busy <= to_json(a)["summary"]["device_busy_us"] + 1e-6


def test_verdict_numbers_are_the_analysis_numbers(item_report: tuple[Analysis, str]) -> None:
    a, text = item_report
    doc = to_json(a)
    page = Page(text)
    attrs, sentence = page.by_id("verdict")
    s = doc["summary"]
    assert attrs["data-bottleneck"] == s["bottleneck"]
    assert float(attrs["data-utilization"]) == pytest.approx(s["device_utilization"], rel=1e-12)
    assert float(attrs["data-idle-us"]) == pytest.approx(s["device_idle_us"], rel=1e-12)
    assert float(attrs["data-est-saving-us"]) == pytest.approx(s["est_saving_us"], rel=1e-12)
    best = max([s["est_saving_us"]] + [f["est_saving_us"] for f in doc["findings"]])
    assert float(attrs["data-saving-us"]) == pytest.approx(best, rel=1e-12) and best > 0
    _a, card = page.by_id("card-saving")
    assert report.ms(best) in card
    assert f"{s['device_utilization']:.0%}" in sentence
    _a, evidence = page.by_id("verdict-evidence")
    # in words from the verdict's numbers (stallscope.display.text), not the JSON's one-line summary
    assert evidence == f"Evidence: {words.evidence_sentence(doc['verdict'], s['device_utilization'])}"
    assert "{" not in evidence and "would save" in evidence
    _a, card = page.by_id("card-utilization")
    assert card.startswith(f"Device utilization {s['device_utilization'] * 100:.0f}%")
    causes = {a["data-cause"]: float(a["data-us"]) for _t, a, _x in page.elements if "data-cause" in a}
    assert causes == {c: pytest.approx(v) for c, v in doc["idle_by_cause_us"].items() if v > 0}
    assert page.json_script("stallscope-analysis")["summary"] == s


def test_findings_are_listed_most_expensive_first_with_call_sites(item_report: tuple[Analysis, str]) -> None:
    a, text = item_report
    doc = to_json(a)
    rows = Page(text).by_class("finding")
    assert doc["findings"], "the trace plants findings"
    assert [r["data-rule"] for r, _t in rows] == [f["rule"] for f in doc["findings"]]
    for (attrs, shown), f in zip(rows, doc["findings"], strict=True):
        assert int(attrs["data-count"]) == f["count"]
        assert float(attrs["data-time-us"]) == pytest.approx(f["time_us"], rel=1e-12)
        assert float(attrs["data-saving-us"]) == pytest.approx(f["est_saving_us"], rel=1e-12)
        # code spans are <code> elements: the text reads without backticks
        assert words.plain(f["title"]) in shown and words.plain(f["advice"]) in shown
        assert "`" not in shown
        if f["call_site"]:
            site = f"{f['call_site']['file']}:{f['call_site']['line']} in {f['call_site']['function']}"
            assert site in shown
    assert "train.py:42 in train_step" in " ".join(t for _a, t in rows)


def test_syncs_whatif_and_pipeline_match_the_analysis(item_report: tuple[Analysis, str]) -> None:
    a, text = item_report
    doc = to_json(a)
    page = Page(text)
    _attrs, table = page.by_id("sync-table")
    assert "scalar_read" in table and "train.py:42 in train_step" in table
    counts = [int(cell["data-value"]) for cell, _text in page.by_class("count")]
    assert sum(counts) == len(doc["syncs"]) == 5  # 4 x .item() and the final synchronize
    shown = {
        a["data-scenario"]: float(a["data-saving-us"]) for _t, a, _x in page.elements if "data-scenario" in a
    }
    assert shown == {w["scenario"]: pytest.approx(w["saving_us"]) for w in doc["whatif"]}
    _a, numbers = page.by_id("pipeline-numbers")
    assert f"n = {doc['pipeline']['batches']}" in numbers
    assert report.ms(doc["pipeline"]["serial_us"]) in numbers


def test_figures_are_embedded_as_json_and_the_timeline_opens_a_median_and_the_worst_step(
    item_report: tuple[Analysis, str],
) -> None:
    a, text = item_report
    page = Page(text)
    placeholders = [a_ for _t, a_, _x in page.elements if "data-figure" in a_]
    assert len(placeholders) == 1 + 4  # the timeline, idle, critical, steps, pipeline
    for p in placeholders:
        fig = page.json_script(p["data-figure"])
        assert fig["data"], p["id"]  # the timeline's frame: its syncs (the page adds the bars)
    axis = page.json_script("timeline-0-data")["layout"]["title"]["text"]
    assert "ms from the start of the window" in axis
    # the buttons open the median step (first, as the timeline opens), the worst and the whole window
    views = [(a_, " ".join("".join(t).split())) for tag, a_, t in page.elements if a_.get("class") == "view"]
    durations = sorted(s.dur_us for s in a.steps)
    assert [t.split(":")[0].split(" (")[0] for _a, t in views] == [
        "representative step",
        "worst step",
        "whole window",
    ]
    assert "median" in views[0][1] and report.ms(durations[-1]) in views[1][1]
    worst = max(a.steps, key=lambda s: s.dur_us)
    assert float(views[1][0]["data-start"]) == pytest.approx(
        (worst.start_us - a.window.start_us) / 1000, abs=1e-6
    )
    _t, tl, _x = next(e for e in page.elements if e[1].get("id") == "timeline-0")
    assert (tl["data-start"], tl["data-end"]) == (views[0][0]["data-start"], views[0][0]["data-end"])
    pipeline = page.json_script("chart-pipeline-data")
    ends = [
        max(b + x for b, x in zip(t["base"], t["x"], strict=True))
        for t in pipeline["data"]
        if t["name"] == "device compute (G)"
    ]
    doc = to_json(a)
    assert max(ends) == pytest.approx(doc["pipeline"]["serial_us"] / 1000)


def test_plotly_is_inlined_by_default_and_linked_with_cdn(tmp_path: Path) -> None:
    a = analysed(sc.item_in_loop(steps=2), tmp_path)
    inline = report.render(a)
    linked = report.render(a, report.ReportOptions(cdn=True))
    assert "<script src=" not in inline and "plotly.js (basic - minified) v" in inline
    version = report.plotly_version()
    assert f'<script src="https://cdn.jsdelivr.net/npm/plotly.js-basic-dist-min@{version}/' in linked
    assert len(inline) - len(linked) > 1_000_000 and len(linked) < 400_000


def test_every_figure_uses_only_trace_types_of_the_vendored_bundle(item_report: tuple[Analysis, str]) -> None:
    _a, text = item_report
    page = Page(text)
    types = {
        t.get("type", "scatter")
        for a_ in (a_ for _t, a_, _x in page.elements if "data-figure" in a_)
        for t in page.json_script(a_["data-figure"])["data"]
    }
    assert types and types <= report.BUNDLE_TRACE_TYPES


def test_a_trace_without_steps_gets_a_whole_window_timeline(tmp_path: Path) -> None:
    s = SynthTrace("no_steps")
    with s.py_frame("infer.py", 3, "run"):
        for _ in range(3):
            with s.op("aten::mm"):
                s.launch("gemm_kernel", 200)
        s.synchronize()
    a = analysed(s, tmp_path)
    assert not a.steps
    page = Page(report.render(a, report.ReportOptions(cdn=True)))
    views = [" ".join("".join(t).split()) for _tag, a_, t in page.elements if a_.get("class") == "view"]
    assert len(views) == 1 and views[0].startswith("whole window")
    assert "start of the window" in page.json_script("timeline-0-data")["layout"]["title"]["text"]
    assert not [a_ for _t, a_, _x in page.elements if a_.get("id") == "timeline-1"]
    assert not [a_ for _t, a_, _x in page.elements if a_.get("id") == "chart-steps"]


def hostile_trace() -> SynthTrace:
    s = SynthTrace("hostile")
    with s.py_frame(HOSTILE_FILE, 7, HOSTILE_FUNC):
        for _ in range(3):
            with s.step():
                with s.op(HOSTILE_OP):
                    s.launch(HOSTILE_KERNEL, 300)
                s.item(avoidable=True, reasons=("repeated",))
        s.synchronize()
    return s


def test_hostile_trace_text_is_escaped_everywhere(tmp_path: Path) -> None:
    a = analysed(hostile_trace(), tmp_path)
    text = report.render(a, report.ReportOptions(cdn=True))
    # no trace string reaches the page as markup
    for raw in ("<img src=x", "<svg onload", "alert('kernel')</script>", "<b>é"):
        assert raw not in text
    # the script elements are exactly the template's: the CDN loader, the JSON blocks, the timeline's
    # script and the page's
    page = Page(text)
    kinds = [a_.get("type", "") for a_, _t in page.scripts]
    assert kinds.count("") == 3 and all(k in ("", "application/json") for k in kinds)
    # the names are still there, as text: in the sync table, the findings and the timeline's hover text
    visible = " ".join("".join(t) for _tag, _a, t in page.elements)
    assert f"{HOSTILE_FILE}:7 in {HOSTILE_FUNC}" in visible
    assert HOSTILE_OP in page.by_id("top-ops")[1] and HOSTILE_KERNEL in page.by_id("top-kernels")[1]
    # the timeline's names are data for its script (which escapes them: test_browser_report)
    columns = page.json_script("timeline-0-columns")
    assert HOSTILE_KERNEL in columns["names"] and any("é中" in n for n in columns["sites"])


def test_worked_example_pipeline_is_drawn_to_the_analysis_figures(tmp_path: Path) -> None:
    # GIVEN DESIGN.md's worked example (P = 2 ms, G = 6 ms, n = 3), run serially
    a = analysed(sc.worked_example(2.0, 6.0, 3, pipelined=False), tmp_path)
    doc = to_json(a)
    p = doc["pipeline"]
    assert p["serial_us"] == pytest.approx(24_000, rel=0.05) and p["pipelined_us"] == pytest.approx(
        20_000, rel=0.05
    )
    # WHEN reported THEN the two schedules end at the analysis' serial and pipelined times
    fig = Page(report.render(a, report.ReportOptions(cdn=True))).json_script("chart-pipeline-data")
    ends: dict[str, float] = {}
    for t in fig["data"]:
        for y, b, x in zip(t["y"], t["base"], t["x"], strict=True):
            ends[y] = max(ends.get(y, 0.0), b + x)
    assert ends["serial · device"] == pytest.approx(p["serial_us"] / 1000)
    assert ends["pipelined · device"] == pytest.approx(p["pipelined_us"] / 1000)


def test_bundle_run_metadata_is_shown_as_text(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    sc.item_in_loop(steps=2).write(bundle / "trace.pt.trace.json.gz")
    run = {
        "torch": "2.13.0+cu124",
        "cuda": "12.4",
        "argv": ["train.py", "--lr", "<1e-3>"],
        "git_commit": "abc123",
    }
    timing = {"count": 5, "steps": {"host_ms": [900.0, 30.0, 30.0, 40.0, 40.0], "device_ms": None}}
    sidecar = {"schema": "stallscope.sidecar/1", "run": run, "sync_sites": [], "step_timing": timing}
    (bundle / "sidecar.json").write_text(json.dumps(sidecar))
    a = analyze(load(bundle, use_cache=False))
    page = Page(report.render(a, report.ReportOptions(cdn=True)))
    terms = [("".join(t).strip(), tag) for tag, _a, t in page.elements if tag in ("dt", "dd")]
    shown = {k: v for (k, dt), (v, dd) in itertools.pairwise(terms) if dt == "dt" and dd == "dd"}
    assert shown["torch"] == "2.13.0+cu124" and shown["cuda"] == "12.4"
    assert shown["command"] == "train.py --lr <1e-3>" and shown["git commit"] == "abc123"
    # AND the whole run's step timing (steady state: every step but the first) against the profiled steps
    rt = a.run_timing
    assert rt is not None and rt.profiled_median_ms is not None and rt.profiled_ratio is not None
    assert shown["whole run"] == (
        f"5 steps timed: host median 35.00 ms, p90 40.00 ms; the profiled steps ({rt.profiled_median_ms:.2f} ms) "
        f"are not typical of the run (×{rt.profiled_ratio:.2f})"
    )


def test_a_cpu_only_bundle_says_so_instead_of_drawing_device_charts() -> None:
    bundle = Path(__file__).resolve().parents[1] / "sample_traces" / "examples" / "item_logging"
    a = analyze(load(bundle, use_cache=False))
    assert not a.devices
    page = Page(report.render(a, report.ReportOptions(cdn=True)))
    _attrs, sentence = page.by_id("verdict")
    assert "CPU-only profile" in sentence and "—" in page.by_id("card-utilization")[1]
    assert page.json_script("chart-idle-data")["layout"]["title"]["text"].endswith("no device in this trace")
    assert not [a_ for _t, a_, _x in page.elements if a_.get("id") == "chart-steps"]
    # the host ops are the main answer of a CPU-only run: their table comes right after the findings
    text = report.render(a, report.ReportOptions(cdn=True))
    assert (
        text.index('<section id="findings"')
        < text.index('<section id="tops"')
        < text.index('<section id="timelines"')
    )
    top = to_json(a)["tops"]["ops"][0]
    ops_table = page.by_id("top-ops")[1]
    assert ops_table.split("self per step ", 1)[1].startswith(f"{top['name']} {report.ms(top['self_us'])}")
    assert not [a_ for _t, a_, _x in page.elements if a_.get("id") == "top-kernels"]
    assert "<title>stallscope report · item_logging</title>" in report.render(
        a, report.ReportOptions(cdn=True)
    )


def test_saving_card_never_says_none_above_a_finding_that_costs_time() -> None:
    # GIVEN a CPU-only recording whose top finding costs 935 ms the replay could not re-time
    from dataclasses import replace

    from stallscope.analyzer.findings.base import Finding, Severity

    a = analyze(load(Path(__file__).parents[1] / "sample_traces" / "examples" / "item_logging"))
    costly = Finding("input_bound", Severity.HIGH, "data loading", None, 4, 935_000.0, 0.0, "advice")
    a = replace(a, findings=(costly, *a.findings), summary=replace(a.summary, est_saving_us=0.0))
    # WHEN the report is rendered
    _attrs, card = Page(report.render(a, report.ReportOptions(cdn=True))).by_id("card-saving")
    # THEN the card names the costly finding instead of "none"
    assert card.startswith("Best estimated saving not estimated")
    assert f"finding 1 ({words.rule_title('input_bound')}) costs {report.ms(935_000.0)}" in card
    # AND without any costly finding it still says none
    a0 = replace(a, findings=a.findings[1:])
    _attrs, card0 = Page(report.render(a0, report.ReportOptions(cdn=True))).by_id("card-saving")
    assert card0.startswith("Best estimated saving none")


def test_every_show_link_names_an_embedded_claim_and_the_tables_list_the_longest(
    item_report: tuple[Analysis, str],
) -> None:
    from stallscope.dashboard import claims

    a, text = item_report
    page = Page(text)
    embedded = page.json_script("claims-data")
    links = [a_["data-claim"] for _t, a_, _x in page.elements if a_.get("class") == "show"]
    assert links and set(links) <= set(embedded)
    # every finding and every sync group has one
    assert {f"finding-{i}" for i in range(1, len(a.findings) + 1)} <= set(links)
    assert sum(1 for c in links if c.startswith("syncs-")) == len(
        report._sync_groups(to_json(a), 200)["rows"]
    )
    # the gap table lists the longest gaps, the segment table the longest segments, each its own claim
    longest_gaps = sorted(range(len(a.gaps)), key=lambda i: -a.gaps[i].dur_us)[: report.EVIDENCE_ROWS]
    assert [c for c in links if c.startswith("gap-")] == [f"gap-{i}" for i in longest_gaps]
    cp = a.critical
    assert cp is not None
    seg = np.argsort(-(cp.end_us - cp.start_us), kind="stable")[: report.EVIDENCE_ROWS].tolist()
    assert [c for c in links if c.startswith("segment-")] == [f"segment-{i}" for i in seg]
    # and each embedded claim is the claim's own range with its margin, in ms from the window's start
    w = a.window
    for cid in ("gap-" + str(longest_gaps[0]), f"segment-{seg[0]}"):
        c = claims.claim(a, cid)
        assert c is not None
        lo, hi = c.view(w.start_us, w.end_us)
        assert embedded[cid]["range"] == pytest.approx(
            [(lo - w.start_us) / 1000, (hi - w.start_us) / 1000], abs=1e-5
        )
        assert len(embedded[cid]["marks"]) == len(c.marks)
