"""``stallscope analyze`` in-process (``main(argv)``) and as a subprocess, on the committed sample traces.

The sample traces are simulated (``tests/synth``); ``sample_traces/expected.json`` holds their
ground truth, and window and device busy time are exact there.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from _kineto import REPO, SAMPLES

from stallscope import __version__
from stallscope.analyzer.analysis import analyze
from stallscope.analyzer.document.analysis import encoded_document, to_json
from stallscope.analyzer.document.encoding import OneLine, encode_compact, encode_json
from stallscope.analyzer.load import cache
from stallscope.analyzer.load.loader import load
from stallscope.commands import main
from stallscope.progress import Progress

EXPECTED: dict[str, Any] = json.loads((SAMPLES / "expected.json").read_text())
SAMPLE = SAMPLES / "item_in_loop.pt.trace.json.gz"

TOP_LEVEL = {
    "schema",
    "source",
    "window",
    "summary",
    "devices",
    "critical_path",
    "gaps",
    "syncs",
    "findings",
    "steps",
    "whatif",
    "pipeline",
    "per_rank",
}
SUMMARY = {
    "wall_us",
    "device_busy_us",
    "device_idle_us",
    "device_utilization",
    "host_sync_wait_us",
    "sync_count",
    "avoidable_sync_count",
    "critical_path_us",
    "bottleneck",
    "est_saving_us",
}


def strict_json(text: str) -> Any:
    """Parse JSON, refusing NaN/Infinity (the output contract is plain JSON)."""

    def refuse(name: str) -> Any:
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def test_human_summary(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN the item_in_loop sample (4 steps, 1 host thread, 1 stream)
    # WHEN analysed without options
    assert main(["analyze", str(SAMPLE)]) == 0
    out, err = capsys.readouterr()
    # THEN the summary leads with the verdict, then says events, lanes, window, utilization and the steps,
    # and stderr stays quiet
    events = load(SAMPLE).models[0].event_count
    lines = out.splitlines()
    assert lines[1].startswith("  verdict   device-bound: the GPU is the critical resource")
    assert "GPU 0 utilization 89.9%" in lines[1]
    # the verdict's evidence: share of the path, utilization, what each speed-up saves
    assert lines[2].startswith("            evidence: The critical path is device ")
    assert "the GPU was busy 90% of the time" in lines[2] and "2× faster compute would save" in lines[2]
    assert "{" not in lines[2]
    assert lines[5].startswith("  findings 1. [high] `.item()` / scalar read syncs the GPU at train.py:42")
    assert lines[6].startswith("              fix: Keep the value on the device")
    assert lines[7] == "  syncs     5 blocking, 4 avoidable:"
    assert lines[8].split()[:5] == ["4", "x", "scalar_read", "at", "train.py:42"]
    assert lines[9].split()[:3] == ["what-if", "as", "recorded"]
    assert (
        f"  trace     {events:,} events (json.gz, rank 0); 1 host thread, 1 stream; "
        "window 16.02 ms (4 profiled steps)"
    ) in lines
    assert "NVIDIA H100 80GB HBM3: busy 14.41 ms, idle 1.61 ms, utilization 89.9%" in out
    assert len(lines) <= 25
    assert "  steps     name" in out
    assert [line.split()[0] for line in out.splitlines() if "ProfilerStep#" in line] == [
        f"ProfilerStep#{n}" for n in range(1, 5)
    ]
    assert err == ""  # the progress indicator prints nothing for a small, quick file


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_json_output_matches_the_sample_ground_truth(name: str, tmp_path: Path) -> None:
    # GIVEN a sample trace and its simulated ground truth
    want = EXPECTED[name]
    out = tmp_path / "analysis.json"
    # WHEN analysed with --json
    assert main(["analyze", str(SAMPLES / name), "--json", str(out), "-q"]) == 0
    doc = strict_json(out.read_text())
    # THEN every key of the contract is there
    assert set(doc) >= TOP_LEVEL
    assert doc["schema"] == "stallscope.analysis/3"
    assert set(doc["summary"]) >= SUMMARY
    # ... the window and the device's busy time are the simulated ones, exactly
    assert doc["window"] == want["window"]
    (device,) = doc["devices"]
    assert device["busy_us"] == want["device"]["busy_us"]
    assert device["idle_us"] == want["device"]["idle_us"]
    assert round(device["utilization"], 4) == want["device"]["utilization"]
    assert doc["summary"]["wall_us"] == want["wall_us"]
    assert doc["summary"]["device_busy_us"] == want["device"]["busy_us"]
    # ... and so are the steps
    fields = ("name", "start_us", "dur_us", "device_busy_us", "device_idle_us")
    assert [{k: s[k] for k in fields} for s in doc["steps"]] == [
        {k: s[k] for k in fields} for s in want["steps"]
    ]
    # ... the source says what was read
    src = doc["source"]
    assert (src["path"], src["format"], src["ranks"]) == (str(SAMPLES / name), "json.gz", [0])
    assert src["devices"] == [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]
    assert src["events"] == sum(v for k, v in want["event_counts"].items() if k[0] == "X" or k[:2] == "i:")
    assert src["skipped"] == {} and src["unknown_categories"] == {}
    assert doc["per_rank"] == [{"rank": 0, "summary": doc["summary"]}]


def test_json_critical_path_segments_are_columns_on_one_line_each(tmp_path: Path) -> None:
    # GIVEN a sample trace, analysed in process and with --json
    out = tmp_path / "analysis.json"
    assert main(["analyze", str(SAMPLE), "--json", str(out), "-q", "--no-cache"]) == 0
    text = out.read_text()
    segments = strict_json(text)["critical_path"]["segments"]
    a = analyze(load(SAMPLE, use_cache=False))
    assert a.critical is not None
    want = a.critical.segments
    # THEN the segments are columns of `count` entries, the same segments as the analysis's, in order
    assert segments["count"] == len(want) > 10
    assert segments["kind"] == [s.kind.value for s in want]
    assert segments["lane"] == [s.lane for s in want]
    assert segments["start_us"] == [s.start_us for s in want]
    assert segments["end_us"] == [s.end_us for s in want]
    names = [segments["names"][i] for i in segments["name"]]
    assert names == [a.model.strings[int(a.model.events.name[s.event])] if s.event >= 0 else "" for s in want]
    assert len(set(segments["names"])) == len(segments["names"]) and "cudaLaunchKernel" in names
    # ... they tile the window
    assert segments["start_us"][1:] == segments["end_us"][:-1]
    # ... and each column is written on one line of the otherwise indented document
    lines = text.splitlines()
    for key in ("kind", "lane", "name", "start_us", "end_us", "names"):
        (line,) = [ln for ln in lines if ln.lstrip().startswith(f'"{key}": [')]
        assert line.rstrip(",").endswith("]")
    assert '\n  "length_us": ' in text  # the rest stays indented one space per level


def test_one_line_values_cannot_be_forged_by_trace_text() -> None:
    # GIVEN a document whose strings look like the placeholders a one-line value is written through
    doc = {"a": OneLine(b"[1,2]"), "label": "0:0", "b": [OneLine(b'["x"]'), '"0":1']}
    # WHEN encoded THEN each one-line value is its text, and every string is kept as it was
    assert json.loads(encode_json(doc)) == {"a": [1, 2], "label": "0:0", "b": [["x"], '"0":1']}
    # ... and the compact encoder (the dashboard's store) writes the same values
    assert json.loads(encode_compact(doc)) == json.loads(encode_json(doc))


def test_json_gaps_are_one_per_line_whatever_their_text(tmp_path: Path) -> None:
    # GIVEN an analysis whose gaps' details hold what the line cut looks for, and quotes and newlines
    a = analyze(load(SAMPLE, use_cache=False))
    assert len(a.gaps) >= 2
    hostile = ['op },{"device": 7} "quoted"', "two\nlines },\n  {"]
    a = replace(a, gaps=tuple(g._replace(detail=hostile[i % 2]) for i, g in enumerate(a.gaps)))
    # WHEN written as --json writes it
    text = encode_json(encoded_document(a)).decode()
    doc = strict_json(text)
    # THEN the gaps are to_json's, each its own line of the document
    assert doc["gaps"] == to_json(a)["gaps"]
    assert [g["detail"] for g in doc["gaps"]][:2] == hostile
    lines = [ln for ln in text.splitlines() if ln.startswith('  {"device":')]
    assert len(lines) == len(a.gaps) and all(json.loads(ln.rstrip(",")) for ln in lines)


def test_json_to_stdout_is_json_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(SAMPLE), "--json", "-"]) == 0
    out, err = capsys.readouterr()
    doc = strict_json(out)
    assert doc["window"]["dur_us"] == EXPECTED[SAMPLE.name]["window"]["dur_us"]
    assert err == ""


def test_json_file_and_summary_together(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "a.json"
    assert main(["analyze", str(SAMPLE), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "utilization" in text and f"  json      {out}" in text
    assert strict_json(out.read_text())["schema"] == "stallscope.analysis/3"


def test_quiet_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(SAMPLE), "-q"]) == 0
    assert capsys.readouterr() == ("", "")


def test_no_cache_leaves_the_cache_alone(capsys: pytest.CaptureFixture[str]) -> None:
    # WHEN analysed with --no-cache, nothing is written to the cache
    assert main(["analyze", str(SAMPLE), "--no-cache", "-q"]) == 0
    assert not cache.cache_root().exists()
    # ... and without it, a model entry appears; the output is the same either way
    assert main(["analyze", str(SAMPLE), "--json", "-"]) == 0
    first = capsys.readouterr().out
    assert [p for p in cache.cache_root().iterdir() if p.name != "index"]
    assert main(["analyze", str(SAMPLE), "--json", "-", "--no-cache"]) == 0
    assert capsys.readouterr().out == first
    assert main(["analyze", str(SAMPLE), "--json", "-"]) == 0  # from the cache
    assert capsys.readouterr().out == first


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"stallscope {__version__}"


def test_progress_is_silent_when_quick_and_shows_stages_when_slow() -> None:
    quick = io.StringIO()
    p = Progress(stream=quick, delay=5.0)
    p("reading")
    p.done()
    assert quick.getvalue() == ""
    slow = io.StringIO()
    p = Progress(stream=slow, delay=0.01)
    p("reading big.json")
    deadline = time.monotonic() + 5
    while "reading" not in slow.getvalue() and time.monotonic() < deadline:
        time.sleep(0.01)
    p.done()
    lines = slow.getvalue().splitlines()
    assert lines[0].startswith("stallscope: reading big.json... (")
    assert lines[-1].startswith("stallscope: done in ")
    disabled = io.StringIO()
    p = Progress(stream=disabled, delay=0.0, enabled=False)
    p("reading")
    time.sleep(0.05)
    p.done()
    assert disabled.getvalue() == ""


# ----- as a subprocess ----------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # XDG_CACHE_HOME is the test's isolated one
    return subprocess.run(
        [sys.executable, "-m", "stallscope", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
        check=False,
    )


def test_subprocess_analyze_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    name = "worked_example_serial.pt.trace.json.gz"
    proc = run_cli("analyze", str(SAMPLES / name), "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert "3 profiled steps" in proc.stdout
    doc = strict_json(out.read_text())
    assert doc["window"] == EXPECTED[name]["window"]
    assert doc["devices"][0]["busy_us"] == EXPECTED[name]["device"]["busy_us"] == 18000


def test_subprocess_bad_input_and_version(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    proc = run_cli("analyze", str(bad))
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"stallscope: error: {bad}: truncated JSON (the file ends in the middle of the document)"
    ]
    version = run_cli("--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"stallscope {__version__}")
