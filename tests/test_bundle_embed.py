"""One file to carry: the trace of a bundle carries its sidecar under the top-level key "stallscope",
other readers see the Kineto JSON they know, and the analyzer reads the trace alone as the bundle."""

from __future__ import annotations

import gzip
import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from stallscope.analyzer.analysis import analyze
from stallscope.analyzer.load.loader import load
from stallscope.analyzer.load.sidecar import SCHEMA, embedded_sidecar
from stallscope.collector.embed import embed_sidecar

TRACE = {
    "schemaVersion": 1,
    "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.0, "dur": 5.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 20.0, "dur": 2.0},
    ],
    "displayTimeUnit": "ms",
}
SIDE: dict[str, Any] = {
    "schema": SCHEMA,
    "run": {"argv": ["train.py"], "notes": []},
    "sync_sites": [
        {"file": "train.py", "line": 7, "function": "main", "op": "Tensor.item", "thread": "1",
         "on_device": True, "count": 1, "first_us": 11.0, "times_us": [11.0]}
    ],
    "step_timing": {},
}  # fmt: skip


def _write(path: Path, doc: dict[str, Any]) -> Path:
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return path


def test_embedding_keeps_the_kineto_document_and_adds_one_key(tmp_path: Path) -> None:
    # GIVEN a Kineto trace, WHEN the sidecar is embedded
    trace = _write(tmp_path / "t.pt.trace.json.gz", TRACE)
    embed_sidecar(trace, SIDE)
    # THEN it is still one JSON object with every Kineto key and value, plus "stallscope" first
    with gzip.open(trace, "rt") as f:
        doc = json.load(f)
    assert list(doc) == ["stallscope", *TRACE]
    assert {k: doc[k] for k in TRACE} == TRACE
    assert doc["stallscope"] == SIDE
    # AND the analyzer reads it back from the start of the file
    side, problem = embedded_sidecar(trace)
    assert problem is None and side is not None
    assert [(s.file, s.line) for s in side.sites] == [("train.py", 7)]
    # AND it is a known key: no "unknown key" note in the analysis
    model = load(trace, use_cache=False).models[0]
    assert "stallscope" not in model.report.unknown_keys
    assert model.event_count == 2


def test_traces_without_the_key_and_broken_keys(tmp_path: Path) -> None:
    plain = _write(tmp_path / "old.pt.trace.json.gz", TRACE)
    assert embedded_sidecar(plain) == (None, None)
    bad = _write(tmp_path / "bad.pt.trace.json.gz", {"stallscope": {"schema": "other"}, **TRACE})
    side, problem = embedded_sidecar(bad)
    assert side is None and problem is not None and "not a stallscope.sidecar/1 document" in problem
    assert load(bad, use_cache=False).sidecar is None


ITEM = """\
import torch

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(4, 8)
for _ in range(5):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(loss.item())  # line 11
"""


def test_a_trace_copied_alone_keeps_its_findings(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from stallscope.collector.bundle import bundle_trace
    from stallscope.commands import main

    # GIVEN a profiled program's bundle
    script = tmp_path / "item.py"
    script.write_text(textwrap.dedent(ITEM))
    out = tmp_path / "bundle"
    window = ["--no-analyze", "--skip", "0", "--warmup", "0", "--steps", "2"]
    assert main(["profile", "-o", str(out), *window, str(script)]) == 0
    trace = bundle_trace(out)
    assert trace is not None and trace.name.startswith("item-") and trace.name.endswith(".pt.trace.json.gz")
    # WHEN only the trace file is carried elsewhere and analysed
    alone = tmp_path / "elsewhere" / trace.name
    alone.parent.mkdir()
    shutil.copy(trace, alone)
    a_alone, a_bundle = analyze(load(alone, use_cache=False)), analyze(load(out, use_cache=False))
    # THEN its findings are the bundle's, with the exact line of the sidecar
    assert a_alone.sidecar is not None
    sites = [(f.rule, f.call_site.line if f.call_site else None) for f in a_alone.findings]
    assert sites == [(f.rule, f.call_site.line if f.call_site else None) for f in a_bundle.findings]
    assert sites and sites[0][1] == 11
