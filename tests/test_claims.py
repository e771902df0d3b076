"""From a claim to its evidence (stallscope.dashboard.claims): the range and the outlined events of each
finding, sync, gap, critical-path segment and a job's collective, on builder traces (GIVEN / WHEN / THEN)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from synth import library as sc
from synth.job import Plant, build_job
from synth.trace import SynthTrace

from stallscope.analyzer.analysis import Analysis, analyze
from stallscope.analyzer.core.names import ACTIVITY_KINDS
from stallscope.analyzer.document.job import job_json
from stallscope.analyzer.job.execute import Execution
from stallscope.analyzer.load.loader import load
from stallscope.dashboard import claims, report
from stallscope.dashboard.timeline import extract
from stallscope.jobs import load_and_analyse_job


def analysed(s: SynthTrace, tmp_path: Path) -> Analysis:
    return analyze(load(s.write(tmp_path / f"{s.name}.pt.trace.json.gz"), use_cache=False))


@pytest.fixture
def item(tmp_path: Path) -> Analysis:
    return analysed(sc.item_in_loop(steps=4), tmp_path)


def drawn_rows(a: Analysis) -> set[str]:
    return {r.key for r in extract(a.model, a, a.window.start_us, a.window.end_us).rows}


def test_a_sync_opens_its_wait_and_the_idle_charged_to_it_with_its_calls_outlined(item: Analysis) -> None:
    a = item
    g = a.graph
    assert g is not None
    for i, s in enumerate(a.syncs):
        c = claims.claim(a, f"sync-{i}")
        assert c is not None
        charged = [gap.end_us for gap in a.gaps if gap.blocking_call in s.calls]
        assert c.start_us == s.start_us and c.end_us == max([s.start_us + s.wait_us, *charged])
        calls = sorted(
            (float(a.model.events.ts[int(g.call_event[k])]), float(a.model.events.end[int(g.call_event[k])]))
            for k in s.calls
        )
        assert sorted((m[1], m[2]) for m in c.marks) == calls
        assert {m[0] for m in c.marks} <= drawn_rows(a) and all(m[0].startswith("api:") for m in c.marks)
        # the view adds a margin on both sides, inside the window
        lo, hi = c.view(a.window.start_us, a.window.end_us)
        pad = max((c.end_us - c.start_us) * claims.MARGIN, claims.MIN_MARGIN_US)
        assert lo == max(a.window.start_us, c.start_us - pad) and hi == min(a.window.end_us, c.end_us + pad)


def test_a_false_sync_finding_opens_its_costliest_sync_and_outlines_every_one_at_its_site(
    item: Analysis,
) -> None:
    a = item
    f = a.findings[0]
    assert f.rule == "false_sync_scalar_read"
    at_site = [i for i, s in enumerate(a.syncs) if s.call_site == f.call_site and s.avoidable]
    assert len(at_site) == f.count == 4
    c = claims.claim(a, "finding-1")
    assert c is not None
    costliest = max(at_site, key=lambda i: a.syncs[i].wait_us + a.syncs[i].bubble_us)
    assert c.start_us == a.syncs[costliest].start_us
    assert len(c.marks) == sum(len(a.syncs[i].calls) for i in at_site)
    assert c.note == "the costliest of 4 syncs at this site"


def test_a_gap_outlines_itself_and_the_device_events_that_bound_it(item: Analysis) -> None:
    a = item
    ev = a.model.events
    inside = [
        i for i, g in enumerate(a.gaps) if g.start_us > a.window.start_us and g.end_us < a.window.end_us
    ]
    assert inside
    for i in inside:
        gap = a.gaps[i]
        c = claims.claim(a, f"gap-{i}")
        assert c is not None and (c.start_us, c.end_us) == (gap.start_us, gap.end_us)
        assert c.marks[0] == (f"gaps:{gap.device}", gap.start_us, gap.end_us)
        device = [m for m in c.marks if m[0].startswith("stream:")]
        acts = np.flatnonzero(ev.is_kind(*ACTIVITY_KINDS))
        before = float(ev.end[acts][ev.end[acts] <= gap.start_us + 1e-6].max())
        after = float(ev.ts[acts][ev.ts[acts] >= gap.end_us - 1e-6].min())
        assert [m[2] for m in device if m[2] <= gap.start_us + 1e-6] == [pytest.approx(before)]
        assert [m[1] for m in device if m[1] >= gap.end_us - 1e-6] == [pytest.approx(after)]


def test_a_segment_outlines_itself_and_its_event(item: Analysis) -> None:
    a = item
    cp = a.critical
    assert cp is not None
    i = int(np.argmax(cp.end_us - cp.start_us))
    c = claims.claim(a, f"segment-{i}")
    assert c is not None
    assert c.marks[0] == ("critical", float(cp.start_us[i]), float(cp.end_us[i]))
    event = int(cp.event[i])
    if event >= 0:
        assert c.marks[1][1:] == (float(a.model.events.ts[event]), float(a.model.events.end[event]))


def test_ids_that_name_nothing_give_none(item: Analysis) -> None:
    for bad in (
        "finding-0",
        f"finding-{len(item.findings) + 1}",
        "sync-x",
        "gap--1",
        "segment-999999",
        "nope",
        "collective-0",
    ):
        assert claims.claim(item, bad) is None


def test_a_straggler_opens_the_collective_on_this_rank_with_its_kernel_outlined(tmp_path: Path) -> None:
    # GIVEN 3 ranks, rank 1 made 1.5 ms late before step 2's all-reduce, rank 2's clock 5 ms ahead
    build_job(tmp_path / "job", 3, 3, [Plant(rank=1, step=2, cause="host", us=1500.0)], offsets_us={2: 5000})
    a, job = load_and_analyse_job([str(tmp_path / "job")], None, Execution(use_cache=False))
    assert job is not None and a.model.rank == 0
    doc = job_json(job)
    worst = doc["collectives"]["worst"][0]
    assert worst["straggler"] == 1
    # WHEN its claim is made on rank 0's analysis
    c = claims.claim(a, "collective-0", doc)
    assert c is not None
    # THEN it runs from the first arrival to the end, on rank 0's clock, and outlines rank 0's kernel,
    # which began at rank 0's arrival and lasted its wait plus the transfer
    off = doc["clock_offsets_us"]["0"]
    mine = next(x for x in worst["arrivals"] if x["rank"] == 0)
    assert (c.start_us, c.end_us) == (worst["first_arrival_us"] + off, worst["end_us"] + off)
    ((row, s, e),) = c.marks
    assert row.startswith("stream:") and s == pytest.approx(mine["arrive_us"] + off, abs=1e-3)
    assert e - s == pytest.approx(mine["dur_us"], abs=1e-3)
    assert "rank 1 was last, 1.500 ms late" in c.note
    # AND the report's straggler finding and its collective link to it
    page = report.render(a, job=job)
    assert 'data-claim="collective-0"' in page.split('id="job-findings"', 1)[1].split("</ol>", 1)[0]
    assert 'data-claim="collective-0"' in page.split('id="job-worst"', 1)[1]


@pytest.mark.parametrize("claim_id", ["sync-²", "finding-¹", "gap-١", "sync-" + "9" * 5000])
def test_an_id_whose_number_is_not_ascii_digits_names_nothing(item: Analysis, claim_id: str) -> None:
    # GIVEN a claim id whose number str.isdigit accepts but int() refuses (or that is too long for int())
    # THEN it names nothing, as any unknown id, where the sync-0 claim still exists
    assert claims.claim(item, "sync-0") is not None
    assert claims.claim(item, claim_id) is None
