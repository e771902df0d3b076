"""The committed example bundles (real CPU recordings of ``examples/*.py``) yield their planted finding.

No torch needed: these are files. ``sample_traces/record_examples.py`` re-records them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stallscope.analyzer.analysis import analyze
from stallscope.analyzer.load.loader import load
from stallscope.commands import main

EXAMPLES = Path(__file__).resolve().parents[1] / "sample_traces" / "examples"
EXPECTED: dict[str, Any] = json.loads((EXAMPLES / "expected.json").read_text())


def test_every_example_has_a_bundle() -> None:
    examples = {p.stem for p in (EXAMPLES.parents[1] / "examples").glob("*.py")}
    assert set(EXPECTED) == examples
    for name in EXPECTED:
        assert {p.name for p in (EXAMPLES / name).iterdir()} == {"sidecar.json", "trace.pt.trace.json.gz"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bundle_yields_its_planted_finding(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    expected = EXPECTED[name]
    # WHEN the bundle is analysed (trace + sidecar)
    a = analyze(load(EXAMPLES / name, use_cache=False))
    # THEN the findings are the expected ones, the planted line first, from the sidecar's exact site
    assert [f.rule for f in a.findings] == expected["findings"]
    assert len(a.steps) == expected["steps"] and a.model.event_count == expected["events"]
    assert a.run_timing is not None and a.run_timing.steps >= 10
    if expected["top_rule"] is None:
        assert a.findings == ()
        return
    top = a.findings[0]
    assert top.rule == expected["top_rule"] and top.call_site is not None
    assert (top.call_site.file, top.call_site.line) == (expected["file"], expected["line"])
    # AND the CLI names that line
    assert main(["analyze", "--no-cache", str(EXAMPLES / name)]) == 0
    assert f"{expected['file']}:{expected['line']}" in capsys.readouterr().out
