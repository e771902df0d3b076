"""``stallscope diff A B`` and ``check --baseline``: before/after pairs built with the synthetic trace builder
(known windows, steps and syncs), compared in-process, on the figures each side's own analysis computed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _kineto import REPO
from synth.library import GEMM, ITEM_FRAME
from synth.trace import SynthTrace

from stallscope.analyzer.analysis import analyze
from stallscope.analyzer.document.analysis import to_json
from stallscope.analyzer.document.diff import compare, gate, side_of
from stallscope.analyzer.load.loader import load
from stallscope.commands import main

SITE = "train.py:42 in train_step"
HOSTILE_KERNEL = "<script>alert('k')</script>_gemm"
HOSTILE_OP = 'aten::<img src=x onerror="alert(1)">'


def loop(
    name: str, *, item: bool = False, steps: int = 4, cpu: bool = False, kernel: str = GEMM, op: str = ""
) -> SynthTrace:
    """A training loop at train.py:42: 3 forward and 3 backward GEMMs a step (host work instead of
    kernels when ``cpu``), ``loss.item()`` (an avoidable scalar read) when ``item``, a final sync."""
    sc = SynthTrace(name)
    with sc.py_frame("train.py", 10, "main"):
        for i in range(steps):
            with sc.step(), sc.py_frame("train.py", 42, "train_step"):
                for _ in range(3):
                    with sc.op("aten::addmm", self_us=150):
                        sc.host("matmul", 400) if cpu else sc.launch(kernel, 400.0)
                if item:
                    with sc.py_call(ITEM_FRAME):
                        sc.item(avoidable=True, reasons=("repeated",))
                if op:
                    sc.host(op, 50)
                sc.host("log_metrics", 200, cat="user_annotation")
                for _ in range(3):
                    with sc.op("aten::mm", self_us=100):
                        sc.host("mm", 800) if cpu else sc.launch(kernel, 800.0)
                if i == steps - 1 and not cpu:
                    sc.synchronize()
    return sc


def write(sc: SynthTrace, tmp_path: Path) -> str:
    return str(sc.write(tmp_path / f"{sc.name}.pt.trace.json.gz"))


def analysis_doc(path: str) -> dict[str, Any]:
    return to_json(analyze(load(path, use_cache=False)))


def diff_doc(before: str, after: str, tmp_path: Path, *extra: str) -> dict[str, Any]:
    out = tmp_path / "diff.json"
    assert main(["diff", before, after, "--json", str(out), "-q", "--no-cache", *extra]) == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def row(rows: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (found,) = [r for r in rows if r["name"] == name]
    return found


def test_a_removed_item_sync_is_gone_with_its_cost_and_the_wall_falls_by_the_predicted_saving(
    tmp_path: Path,
) -> None:
    # GIVEN a loop calling loss.item() every step, and the same loop without it
    before_sc, after_sc = loop("before", item=True), loop("after")
    before, after = write(before_sc, tmp_path), write(after_sc, tmp_path)
    # WHEN diffed
    d = diff_doc(before, after, tmp_path)
    # THEN the scalar reads at train.py:42 are gone, with the cost their own analysis charged them
    a = analysis_doc(before)
    reads = [s for s in a["syncs"] if s["kind"] == "scalar_read"]
    assert len(reads) == 4
    gone = next(r for r in d["syncs"] if r["detail"] == "scalar_read")
    assert (gone["name"], gone["status"]) == (SITE, "gone")
    assert (gone["count"]["before"], gone["count"]["after"]) == (4, 0)
    assert gone["time_us"]["before"] == pytest.approx(sum(s["wait_us"] + s["bubble_us"] for s in reads))
    assert row(d["ops"], "aten::item")["status"] == "gone"
    # ... the wall changed by exactly the simulated difference, and that is the saving before's what-if
    # predicted for removing the avoidable syncs
    assert d["wall_us"]["before"] == before_sc.window_us and d["wall_us"]["after"] == after_sc.window_us
    assert d["wall_us"]["change"] == pytest.approx(after_sc.window_us - before_sc.window_us)
    predicted = next(w for w in d["whatif"] if w["scenario"] == "no_avoidable_syncs")["saving_us"]
    assert -d["wall_us"]["change"] == pytest.approx(predicted["before"], rel=0.02)
    assert predicted["after"] == 0.0
    # ... the counts and the finding follow
    assert (d["sync_count"]["before"], d["sync_count"]["after"]) == (5, 1)
    assert (d["avoidable_sync_count"]["before"], d["avoidable_sync_count"]["after"]) == (4, 0)
    finding = row(d["findings"], SITE)
    assert finding["status"] == "gone" and finding["detail"].startswith("`.item()`")
    # ... and the steps are paired one to one, each side's median over its own simulated steps
    assert d["schema"] == "stallscope.diff/1"
    assert d["steps"]["paired"] == 4 and d["steps"]["note"] == ""
    assert [p["dur_us"]["before"] for p in d["steps"]["pairs"]] == [s.dur_us for s in before_sc.steps]
    assert [p["dur_us"]["after"] for p in d["steps"]["pairs"]] == [s.dur_us for s in after_sc.steps]
    durs = sorted(s.dur_us for s in before_sc.steps)
    assert d["steps"]["median_us"]["before"] == (durs[1] + durs[2]) / 2
    assert d["wall_comparable"] is True


def test_the_terminal_summary_says_what_went_and_has_no_colour_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the same pair WHEN diffed for a reader (stdout is not a terminal here)
    before, after = write(loop("before", item=True), tmp_path), write(loop("after"), tmp_path)
    assert main(["diff", before, after, "--no-cache"]) == 0
    out = capsys.readouterr().out
    # THEN the wall, the gone scalar reads with their site, and the what-if side by side are there
    lines = out.splitlines()
    assert lines[2].startswith("  wall      15.82 ms -> 14.56 ms   -1.26 ms (-8%)")
    assert "verdict   unchanged: device-bound" in out
    # the evidence in words, from each side's verdict numbers (not the "{device, host, ...}" line)
    evidence = [line for line in lines if " evidence: " in line]
    assert len(evidence) == 2 and all("would save" in e and "{" not in e for e in evidence)
    (gone,) = [line for line in lines if "scalar_read at" in line]
    assert gone.split()[:4] == ["gone", "4", "->", "0"] and gone.endswith(f"scalar_read at {SITE}")
    assert any(line.split()[:1] == ["no_avoidable_syncs"] for line in lines)
    assert "\x1b" not in out


def test_control_characters_in_trace_names_are_escaped_in_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN an op named with a colour code and a newline WHEN diffed
    before = write(loop("before"), tmp_path)
    after = write(loop("after", op="aten::\x1b[31mred\nline"), tmp_path)
    assert main(["diff", before, after, "--no-cache"]) == 0
    out = capsys.readouterr().out
    # THEN the name is on its row, escaped, and the terminal receives no escape sequence
    assert "\x1b" not in out
    assert any(line.endswith("aten::\\x1b[31mred\\x0aline") for line in out.splitlines())


def test_saved_analyses_compare_like_the_traces(tmp_path: Path) -> None:
    # GIVEN the pair, and each analysis saved by analyze --json
    before, after = write(loop("before", item=True), tmp_path), write(loop("after"), tmp_path)
    saved = []
    for path in (before, after):
        out = tmp_path / f"{Path(path).name}.analysis.json"
        assert main(["analyze", path, "--json", str(out), "-q", "--no-cache"]) == 0
        saved.append(str(out))
    # WHEN the saved analyses are diffed
    from_traces = diff_doc(before, after, tmp_path)
    from_saved = diff_doc(*saved, tmp_path)
    # THEN every figure is the same as from the traces (only the paths differ)
    for key in ("wall_us", "steps", "verdict", "syncs", "findings", "whatif", "device_idle_us"):
        assert from_saved[key] == from_traces[key], key
    assert from_saved["before"] == saved[0]
    # ... and a saved analysis mixes with a trace
    assert diff_doc(saved[0], after, tmp_path)["syncs"] == from_traces["syncs"]
    # ... also when its keys were sorted (as the dashboard's API serves it)
    resorted = tmp_path / "sorted.json"
    resorted.write_text(json.dumps(json.loads(Path(saved[0]).read_text()), sort_keys=True))
    assert diff_doc(str(resorted), after, tmp_path)["wall_us"] == from_traces["wall_us"]
    # ... and an analysis saved before the segments were columns (schema /1: one object per segment)
    doc = json.loads(Path(saved[0]).read_text())
    columns = doc["critical_path"]["segments"]
    doc["schema"] = "stallscope.analysis/1"
    doc["critical_path"]["segments"] = [
        {"kind": k, "lane": str(lane), "name": columns["names"][n], "start_us": a, "end_us": b}
        for k, lane, n, a, b in zip(
            columns["kind"],
            columns["lane"],
            columns["name"],
            columns["start_us"],
            columns["end_us"],
            strict=True,
        )
    ]
    old = tmp_path / "schema1.json"
    old.write_text(json.dumps(doc))
    assert diff_doc(str(old), after, tmp_path)["syncs"] == from_traces["syncs"]


def test_different_step_counts_pair_by_index_and_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN 4 profiled steps before and 6 after
    before_sc, after_sc = loop("four"), loop("six", steps=6)
    before, after = write(before_sc, tmp_path), write(after_sc, tmp_path)
    # WHEN diffed
    d = diff_doc(before, after, tmp_path)
    # THEN the first 4 are paired, the note says so, and the wall is marked not comparable
    s = d["steps"]
    assert (s["count"]["before"], s["count"]["after"], s["paired"]) == (4, 6, 4)
    assert len(s["pairs"]) == 4
    assert s["note"].startswith("before has 4 steps, after 6: the first 4 paired by index")
    assert d["wall_comparable"] is False
    six = sorted(st.dur_us for st in after_sc.steps)
    assert s["median_us"]["after"] == (six[2] + six[3]) / 2
    # ... and check --baseline gates the median step, not the wall
    old, new = side_of(analysis_doc(before), before), side_of(analysis_doc(after), after)
    wall, median = gate(compare(old, new), max_regression_pct=1.0)
    assert not wall.applied and wall.note == "the windows hold 4 and 6 steps"
    assert median.applied
    assert main(["check", after, "--baseline", before, "--max-regression", "1000", "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert "skip wall: the windows hold 4 and 6 steps (limit +1000% not applied)" in out
    assert "ok   step median" in out


def test_a_cpu_only_side_has_no_device_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a CPU-only run of the loop and a GPU run
    cpu, gpu = write(loop("cpu", cpu=True), tmp_path), write(loop("gpu"), tmp_path)
    # WHEN diffed
    d = diff_doc(cpu, gpu, tmp_path)
    # THEN the CPU side's device figures are absent (not 0 or 100%), and so are their changes
    for key in ("device_utilization", "device_busy_us", "device_idle_us", "host_sync_wait_us"):
        assert d[key]["before"] is None and d[key]["change"] is None and d[key]["rel"] is None
    assert d["device_utilization"]["after"] == pytest.approx(
        analysis_doc(gpu)["summary"]["device_utilization"]
    )
    assert d["verdict"]["before"] == {
        "bottleneck": None,
        "evidence": "",
        "cpu_only": True,
        "utilization": None,
        "path_share": None,
        "sensitivity_us": None,
    }
    assert d["verdict"]["changed"] is True
    assert "before is a CPU-only run: no device, sync-wait or device what-if figures" in d["notes"][0]
    whatif = {w["scenario"]: w["saving_us"] for w in d["whatif"]}
    assert whatif["device_2x"]["before"] is None and whatif["device_2x"]["after"] > 0
    assert whatif["host_2x"]["before"] > 0  # a faster host is a CPU-only run's own question
    # ... the terminal says n/a, never 100% idle
    assert main(["diff", cpu, gpu, "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert "utilization n/a -> " in out and "idle n/a -> " in out
    assert d["would_sync_count"]["before"] == 0 and d["would_sync_count"]["after"] is None
    # WHEN both are CPU-only THEN no device line pretends otherwise
    assert main(["diff", cpu, cpu, "--no-cache"]) == 0
    assert "device    none on either side (CPU-only profiles)" in capsys.readouterr().out


def test_cpu_only_bundles_compare_their_would_be_syncs(tmp_path: Path) -> None:
    # GIVEN two CPU-only recordings: a loop logging loss.item() every step, and a clean loop
    examples = REPO / "sample_traces" / "examples"
    d = diff_doc(str(examples / "item_logging"), str(examples / "clean_pipeline"), tmp_path)
    # THEN the 3 would-be syncs in the steps are gone, with their finding, and nothing claims a device
    assert (d["would_sync_count"]["before"], d["would_sync_count"]["after"]) == (3, 0)
    (finding,) = [r for r in d["findings"] if r["name"].startswith("examples/item_logging.py:18")]
    assert finding["status"] == "gone" and finding["count"]["before"] == 3
    assert d["device_idle_us"] == {"before": None, "after": None, "change": None, "rel": None}
    assert [w["scenario"] for w in d["whatif"]] == ["host_2x", "input_overlapped"]
    assert d["verdict"]["changed"] is False
    page = tmp_path / "cpu.html"
    assert main(["diff", d["before"], d["after"], "--report", str(page), "-q"]) == 0
    assert "would-be syncs (CPU-only)" in page.read_text()


def test_the_html_report_escapes_trace_names(tmp_path: Path) -> None:
    # GIVEN an after run whose kernel and an op are named like markup
    before = write(loop("before"), tmp_path)
    after = write(loop("after", kernel=HOSTILE_KERNEL, op=HOSTILE_OP), tmp_path)
    page, data = tmp_path / "diff.html", tmp_path / "diff.json"
    # WHEN the diff is written as a page and as JSON
    argv = ["diff", before, after, "--report", str(page), "--json", str(data), "-q", "--no-cache"]
    assert main(argv) == 0
    html = page.read_text()
    doc = json.loads(data.read_text())
    # THEN the names are in the comparison, and the page holds them only escaped
    assert row(doc["kernels"], HOSTILE_KERNEL)["status"] == "new"
    assert row(doc["ops"], HOSTILE_OP)["status"] == "new"
    assert "<script>alert" not in html and "<img" not in html
    assert "&lt;script&gt;alert(&#39;k&#39;)&lt;/script&gt;_gemm" in html
    assert "aten::&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in html
    # ... and its embedded data is the JSON document
    m = re.search(r'<script type="application/json" id="stallscope-diff">(.*?)</script>', html, re.S)
    assert m is not None and json.loads(m.group(1)) == doc
    assert html.count("<script") == 1  # data only: the page runs no script


def test_the_html_page_marks_each_change_better_or_worse(tmp_path: Path) -> None:
    # GIVEN the removed item sync WHEN written as a page
    before, after = write(loop("before", item=True), tmp_path), write(loop("after"), tmp_path)
    page = tmp_path / "diff.html"
    assert main(["diff", before, after, "--report", str(page), "-q", "--no-cache"]) == 0
    cells = {
        m["metric"]: (m["tone"], m["change"])
        for m in re.finditer(
            r"<tr><td>(?P<metric>[^<]+)</td>(?:<td[^>]*>[^<]*</td>){2}\s*"
            r'<td class="num ?(?P<tone>\w*)">(?P<change>[^<]*)</td></tr>',
            page.read_text(),
        )
    }
    # THEN a shorter wall and a busier device are better, the unchanged busy time neither
    assert cells["wall (window)"] == ("better", "-1.26 ms (-8%)")
    assert cells["device utilization"][0] == "better"
    assert cells["avoidable syncs"] == ("better", "-4 (-100%)")
    assert cells["profiled steps"] == ("", "no change")
    assert "would-be syncs (CPU-only)" not in cells  # a GPU run has none to count


def test_a_run_against_itself_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write(loop("run", item=True), tmp_path)
    d = diff_doc(run, run, tmp_path)
    assert d["wall_us"]["change"] == 0.0 and d["verdict"]["changed"] is False
    assert d["ops"] == d["kernels"] == d["syncs"] == d["findings"] == []
    assert main(["check", run, "--baseline", run, "--max-regression", "0", "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert "ok   wall 15.82 ms against baseline 15.82 ms (+0.0%; limit +0%)" in out


@pytest.mark.shared
def test_dataloader_workers_on_real_traces(shared_traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN the same ResNet-50 loop on a V100 with DataLoader(num_workers=0), then num_workers=4
    field = shared_traces / "field"
    nw0, nw4 = (str(field / f"kineto_v100_resnet50_nw{n}.pt.trace.json.gz") for n in (0, 4))
    # WHEN diffed
    assert main(["diff", nw0, nw4, "--json", "-", "-q"]) == 0
    d = json.loads(capsys.readouterr().out)
    # THEN loading no longer holds the loop: input-bound before, not after; the single-process loader's
    # __next__ and the data-loading finding are gone; the median step, the wall and device idle fell
    assert d["verdict"]["before"]["bottleneck"] == "input"
    assert d["verdict"]["after"]["bottleneck"] == "host" and d["verdict"]["changed"]
    assert row(d["ops"], "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")["status"] == "gone"
    assert row(d["findings"], "input_bound")["status"] == "gone"
    assert d["steps"]["paired"] == 6 and d["wall_comparable"]
    assert d["steps"]["median_us"]["rel"] == pytest.approx(-0.28, abs=0.01)
    assert d["wall_us"]["rel"] == pytest.approx(-0.20, abs=0.01)
    assert d["device_idle_us"]["rel"] == pytest.approx(-0.50, abs=0.01)
    # ... and the what-if before predicted most of it: overlapping the input saves a third
    overlapped = next(w for w in d["whatif"] if w["scenario"] == "input_overlapped")["saving_us"]
    assert overlapped["before"] / d["wall_us"]["before"] == pytest.approx(0.34, abs=0.01)
    assert overlapped["after"] < 0.01 * d["wall_us"]["after"]


def test_check_baseline_fails_above_the_regression_and_passes_below(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a fast baseline and a new run that added loss.item() in the loop (8.7% slower wall)
    fast_sc, slow_sc = loop("fast"), loop("slow", item=True)
    fast, slow = write(fast_sc, tmp_path), write(slow_sc, tmp_path)
    wall_pct = (slow_sc.window_us / fast_sc.window_us - 1) * 100
    assert 8.0 < wall_pct < 9.0
    median = {n: sorted(s.dur_us for s in sc.steps) for n, sc in (("fast", fast_sc), ("slow", slow_sc))}
    step_pct = ((median["slow"][1] + median["slow"][2]) / (median["fast"][1] + median["fast"][2]) - 1) * 100
    assert step_pct > wall_pct
    base = ["check", slow, "--baseline", fast, "--no-cache", "--max-regression"]
    # WHEN the limit is below the wall's growth THEN both metrics fail, exit 1, and the lines say which
    assert main([*base, f"{wall_pct - 0.5:.2f}"]) == 1
    out = capsys.readouterr().out
    assert (
        f"FAIL wall 15.82 ms against baseline 14.56 ms (+{wall_pct:.1f}%; limit +{wall_pct - 0.5:.2f}%)"
        in out
    )
    assert "FAIL step median" in out and "stallscope check: failed" in out
    # WHEN the limit sits between the two THEN only the median step fails
    assert main([*base, f"{wall_pct + 0.5:.2f}"]) == 1
    out = capsys.readouterr().out
    assert "ok   wall" in out and "FAIL step median" in out
    # WHEN above both THEN it passes
    assert main([*base, f"{step_pct + 1:.0f}"]) == 0
    assert "stallscope check: passed" in capsys.readouterr().out
    # WHEN the new run is the faster one THEN no regression at 0%
    assert main(["check", fast, "--baseline", slow, "--max-regression", "0", "--no-cache"]) == 0
    # WHEN combined with a limit that fails THEN it fails on that limit alone
    assert main([*base, "1000", "--max-avoidable-syncs", "0"]) == 1
    out = capsys.readouterr().out
    assert "FAIL avoidable syncs 4 (limit 0)" in out and "FAIL wall" not in out


def test_check_baseline_reads_a_saved_analysis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN the baseline saved as analyze --json output (what CI keeps as an artifact)
    fast, slow = write(loop("fast"), tmp_path), write(loop("slow", item=True), tmp_path)
    saved = tmp_path / "baseline.json"
    assert main(["analyze", fast, "--json", str(saved), "-q", "--no-cache"]) == 0
    # WHEN checked against it THEN the same regression is found
    assert main(["check", slow, "--baseline", str(saved), "--max-regression", "5", "--no-cache"]) == 1
    assert "FAIL wall 15.82 ms against baseline 14.56 ms" in capsys.readouterr().out
    # ... and a saved new run is checked like its trace, limits included
    new = tmp_path / "new.json"
    assert main(["analyze", slow, "--json", str(new), "-q", "--no-cache"]) == 0
    argv = [
        "check",
        str(new),
        "--baseline",
        str(saved),
        "--max-regression",
        "5",
        "--max-avoidable-syncs",
        "3",
    ]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "FAIL avoidable syncs 4 (limit 3)" in out and "FAIL wall 15.82 ms against baseline 14.56 ms" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["check", "{slow}", "--baseline", "{fast}"], "--baseline and --max-regression go together"),
        (["check", "{slow}", "--max-regression", "5"], "--baseline and --max-regression go together"),
        (["check", "{slow}", "--baseline", "{fast}", "--max-regression", "-1"], "percentage of 0 or more"),
        (["check", "{slow}", "--baseline", "{missing}", "--max-regression", "5"], "missing.json"),
        (["diff", "{fast}", "{missing}"], "missing.json"),
        (
            ["diff", "{fast}", "{diffdoc}"],
            "only stallscope.analysis/1, stallscope.analysis/2, stallscope.analysis/3 can be compared",
        ),
        (["diff", "{truncated}", "{fast}"], "a saved analysis that is not valid JSON"),
        (["diff", "{partial}", "{fast}"], "not a complete stallscope analysis ('summary' missing)"),
        (["diff", "{fast}", "{slow}", "--report", "{tmp}/no/such/folder/x.html"], "does not exist"),
        (["diff", "{saved}", "{fast}", "--rank", "3"], "is a saved analysis of rank 0"),
        (["check", "{partial}", "--max-idle-frac", "0.5"], "not a complete stallscope analysis"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fast, slow = write(loop("fast"), tmp_path), write(loop("slow", item=True), tmp_path)
    (tmp_path / "d.json").write_text('{"schema": "stallscope.diff/1", "before": "x"}')
    (tmp_path / "t.json").write_text('{"schema": "stallscope.analysis/1", "summary": {"wall')
    (tmp_path / "p.json").write_text('{"schema": "stallscope.analysis/1", "window": {}}')
    (tmp_path / "s.json").write_text('{"schema": "stallscope.analysis/1", "source": {"rank": 0}}')
    names = {
        "fast": fast,
        "slow": slow,
        "missing": str(tmp_path / "missing.json"),
        "diffdoc": str(tmp_path / "d.json"),
        "truncated": str(tmp_path / "t.json"),
        "partial": str(tmp_path / "p.json"),
        "saved": str(tmp_path / "s.json"),
        "tmp": str(tmp_path),
    }
    assert main([a.format(**names) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("stallscope: error: ") and message in err


def test_the_diff_schema_is_documented() -> None:
    text = (REPO / "docs" / "output.md").read_text()
    assert "stallscope.diff/1" in text and "stallscope diff" in (REPO / "README.md").read_text()


def test_cut_or_missing_top_tables_are_unknown_not_zero(tmp_path: Path) -> None:
    # GIVEN two analyses whose before lists only its top op (as a saved analysis lists 20)
    before = analysis_doc(write(loop("before", item=True), tmp_path))
    after = analysis_doc(write(loop("after"), tmp_path))
    top = before["tops"]["ops"][0]
    before["tops"]["ops"] = [top]
    # WHEN compared
    d = compare(side_of(before, "before", tops_cut=True), side_of(after, "after", tops_cut=False))
    # THEN an op below before's list entered it (before unknown), the listed one changed or stayed
    rows = {r.name: r for r in d.ops}
    entered = [r for r in d.ops if r.status.value == "entered"]
    assert entered and all(r.time_us.before is None and r.count.before is None for r in entered)
    assert all(r.time_us.after is not None for r in entered)
    assert top["name"] not in rows or rows[top["name"]].time_us.before == top["self_us"]
    # WHEN a side has no top tables at all (an older stallscope) THEN no op rows, and a note says why
    del before["tops"]
    d = compare(side_of(before, "before"), side_of(after, "after"))
    assert d.ops == () and d.kernels == ()
    assert "before has no top tables (an analysis from an older stallscope): ops not compared" in d.notes


def test_as_a_subprocess_piped_output_is_plain_text_and_check_exits_1(tmp_path: Path) -> None:
    # GIVEN the slow and fast loops WHEN run as commands whose stdout is a pipe
    fast, slow = write(loop("fast"), tmp_path), write(loop("slow", item=True), tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "stallscope", *args]
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)

    diff = cli("diff", fast, slow)
    # THEN diff prints plain text (no colour codes) and exits 0; check fails the regression with 1
    assert diff.returncode == 0 and diff.stdout.startswith(f"stallscope diff: before {fast}\n")
    assert "\x1b" not in diff.stdout + diff.stderr
    check = cli("check", slow, "--baseline", fast, "--max-regression", "5")
    assert check.returncode == 1 and "FAIL wall" in check.stdout and check.stderr == ""
    bad = cli("diff", fast, str(tmp_path / "nope.json"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "nope.json" in bad.stderr


def test_the_html_page_shows_code_not_backticks(tmp_path: Path) -> None:
    # GIVEN the removed `.item()` sync, whose finding title marks code with backticks
    before, after = write(loop("before", item=True), tmp_path), write(loop("after"), tmp_path)
    page = tmp_path / "diff.html"
    assert main(["diff", before, after, "--report", str(page), "-q", "--no-cache"]) == 0
    body = page.read_text().split("<body", 1)[1].split("<script", 1)[0]  # the page, not its JSON data
    # THEN the title's code is a <code> element and no backtick is left in the page's text
    assert "<code>.item()</code>" in body and "`" not in body


def _bundle(tmp_path: Path, sc: SynthTrace, host_ms: list[float]) -> str:
    """The synthetic trace in a folder with a hand-made sidecar whose ``step_timing`` times every step
    of the run (``host_ms``), as ``stallscope profile`` writes one."""
    folder = tmp_path / sc.name
    folder.mkdir()
    sc.write(folder / f"{sc.name}.pt.trace.json.gz")
    sidecar = {
        "schema": "stallscope.sidecar/1",
        "run": {},
        "sync_sites": [],
        "step_timing": {"count": len(host_ms), "steps": {"host_ms": host_ms}},
    }
    (folder / "sidecar.json").write_text(json.dumps(sidecar))
    return str(folder)


def _busy(median: float, seed: int, n: int = 200) -> list[float]:
    """A busy machine's step times: most near ``median``, a tenth of them 2-4x longer."""
    import random

    rng = random.Random(seed)
    return [
        median * (rng.uniform(2, 4) if rng.random() < 0.15 else rng.uniform(0.97, 1.03)) for _ in range(n)
    ]


def test_a_window_change_within_the_runs_spread_is_called_noise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN two noisy runs of the same program (every step timed: the same steady state, a busy
    # machine's slow steps), whose profiled windows differ (the after window holds an item sync)
    before = _bundle(tmp_path, loop("before"), _busy(10.0, 1))
    after = _bundle(tmp_path, loop("after", item=True), _busy(10.0, 2))
    d = diff_doc(before, after, tmp_path)
    run = d["run_steps"]
    window = d["steps"]["median_us"]["change"]
    # THEN the windows' change is set against the runs' step-to-step spread, and it is within it
    assert window and abs(window) <= run["spread_us"]
    assert run["spread_us"] > 5000.0  # p90 of a run whose slow tenth is 2-4x longer
    assert (run["reading"], run["window_within_spread"], run["run_within_spread"]) == ("noise", True, True)
    assert run["window_change_us"] == window
    assert run["median_us"]["before"] == pytest.approx(10_000.0, rel=0.05)
    assert run["steps"]["before"] == 200  # steps timed in the run
    assert "within the runs' step-to-step spread" in run["note"] and "noise" in run["note"]
    assert run["note"] in d["notes"]
    # AND the terminal flags the wall change and says so
    assert main(["diff", before, after, "--no-cache"]) == 0
    out = capsys.readouterr().out
    (wall,) = [line for line in out.splitlines() if line.startswith("  wall")]
    assert wall.endswith("(noise: within the runs' step-to-step spread: see run)")
    assert "  run       every step: median" in out and ": noise (see note)" in out
    # AND so does the HTML page
    page = tmp_path / "diff.html"
    assert main(["diff", before, after, "--report", str(page), "-q", "--no-cache"]) == 0
    html = page.read_text()
    assert 'id="diff-run"' in html and 'data-reading="noise"' in html and 'id="diff-untrusted"' in html


def test_a_quiet_run_confirms_a_real_change_and_an_atypical_window_is_named(tmp_path: Path) -> None:
    # GIVEN quiet runs (steps within 1%): after is slower in every step, by the item sync's cost
    before = _bundle(tmp_path, loop("before"), [10.0 + 0.01 * (i % 7) for i in range(50)])
    after_sc = loop("after", item=True)
    slower = [12.0 + 0.01 * (i % 7) for i in range(50)]
    run = diff_doc(before, _bundle(tmp_path, after_sc, slower), tmp_path)["run_steps"]
    # THEN the whole runs confirm the windows' change (both beyond the spread, the same way)
    assert run["spread_us"] < 100.0 and run["window_change_us"] > run["spread_us"]
    assert run["reading"] == "confirmed" and run["run_within_spread"] is False
    # AND when the whole runs did not move, the windows' change is called atypical, not trusted
    same = tmp_path / "same"
    same.mkdir()
    run = diff_doc(
        before, _bundle(same, loop("after", item=True), [10.0 + 0.01 * (i % 7) for i in range(50)]), tmp_path
    )["run_steps"]
    assert run["reading"] == "windows_atypical" and "trust the whole runs" in run["note"]


def test_without_step_timing_there_is_no_run_reading(tmp_path: Path) -> None:
    before, after = write(loop("before"), tmp_path), write(loop("after"), tmp_path)
    d = diff_doc(before, after, tmp_path)
    assert d["run_steps"] is None and not any("whole runs" in n for n in d["notes"])
