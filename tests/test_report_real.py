"""The report of every real trace in ``../shared/traces`` (skipped when absent): it renders, its numbers
are the analysis', and every stream with work in the drawn steps has a timeline row."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from stallscope.analyzer.analysis import analyze
from stallscope.analyzer.core.model import LaneKind
from stallscope.analyzer.load.loader import load
from stallscope.dashboard import report

pytestmark = pytest.mark.shared

TRACES = [
    "hta_a100_alexnet_cuda_sync.pt.trace.json.gz",
    "hta_a100_item_event_sync.pt.trace.json.gz",
    "hta_a100_multistream_event_sync.pt.trace.json.gz",
    "hta_a100_nccl_2rank_rank0.pt.trace.json.gz",
    "tracelens_b300_moe_small.pt.trace.json.gz",
    "tracelens_h100_bert_small_pystack.pt.trace.json.gz",
    "param_dlrm_v100_8rank",
]


def embedded(text: str, ident: str) -> object:
    m = re.search(rf'<script type="application/json" id="{ident}">(.*?)</script>', text, re.S)
    assert m, ident
    return json.loads(m.group(1))


@pytest.mark.parametrize("name", TRACES)
def test_real_trace_report(name: str, shared_traces: Path) -> None:
    traces = load(shared_traces / name, use_cache=False)
    rank = traces.ranks[-1] if len(traces.ranks) > 1 else None
    a = analyze(traces, rank)
    text = report.render(a, report.ReportOptions(cdn=True))
    doc = embedded(text, "stallscope-analysis")
    assert isinstance(doc, dict)
    assert doc["summary"]["device_utilization"] == pytest.approx(a.summary.device_utilization)
    assert [f["rule"] for f in doc["findings"]] == [f.rule for f in a.findings]
    assert text.count('class="finding"') == len(a.findings)
    if rank is not None:
        assert doc["source"]["rank"] == rank and f"rank {rank} of ranks" in text
        shown = dict(re.findall(r'<tr id="rank-\d+" data-rank="(\d+)" data-utilization="([^"]+)"', text))
        assert {int(r): float(u) for r, u in shown.items()} == {
            r: pytest.approx(s.device_utilization) for r, s in a.per_rank.items()
        }
    fig = embedded(text, "timeline-0-data")
    assert isinstance(fig, dict)
    ticks = fig["layout"]["yaxis"]["ticktext"]
    busy_streams = {
        a.model.lanes[int(lane)].label for lane in set(a.model.events.lane[a.model.events.activity_mask()])
    }
    if not a.steps:  # the whole window is drawn: every stream with activity has its row
        assert busy_streams <= set(ticks)
    assert "critical path" in ticks
    assert any(lane.kind == LaneKind.HOST and lane.label in ticks for lane in a.model.lanes)


def test_one_figure_per_claim_on_a_launch_bound_trace(shared_traces: Path, tmp_path: Path) -> None:
    """The claims a careful reader of ``hta_a100_nccl_2rank_rank0`` checks against each other agree, in the
    terminal, the JSON and the report alike."""
    from stallscope.analyzer.document.analysis import to_json
    from stallscope.commands import main
    from stallscope.dashboard.headline import best_saving
    from stallscope.render.summary import render

    a = analyze(load(shared_traces / "hta_a100_nccl_2rank_rank0.pt.trace.json.gz", use_cache=False))
    doc = to_json(a)
    # the headline saving is never pinned on a fix no scenario models: a CUDA graph is not "host 2x"
    (launch,) = [f for f in a.findings if f.rule == "launch_bound"]
    assert launch.est_saving_us == 0.0 and "if host work were halved (host_2x)" in launch.title
    assert best_saving(doc) == (doc["summary"]["est_saving_us"], None)
    page = report.render(a)
    assert "by fixing finding" not in page and "launch_bound)" not in page
    # one count: the launches the title names are the finding's count
    assert f"{launch.count:,} launches" in launch.title
    # cudaEventSynchronize is an event wait, never a device-wide "blanket" one
    assert {s.kind.value for s in a.syncs} == {"event"}
    assert not [f for f in a.findings if "blanket" in f.rule or "torch.cuda.synchronize()" in f.advice]
    # the host's time blocked in syncs is one figure: the summary's is the syncs' own sum (one thread)
    assert doc["summary"]["host_sync_wait_us"] == pytest.approx(sum(s["wait_us"] for s in doc["syncs"]))
    text = render(a)
    out = tmp_path / "a.json"
    assert (
        main(
            [
                "analyze",
                str(shared_traces / "hta_a100_nccl_2rank_rank0.pt.trace.json.gz"),
                "--json",
                str(out),
                "-q",
            ]
        )
        == 0
    )
    assert json.loads(out.read_text())["summary"] == doc["summary"]
    shown = report.ms(doc["summary"]["host_sync_wait_us"])
    assert f"host sync {shown} blocked" in text and shown in page
