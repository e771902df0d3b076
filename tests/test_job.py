"""Whole jobs: synthetic ranks with planted stragglers and clock offsets, matched and explained."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from synth.job import JobTruth, Plant, build_job

from stallscope.analyzer.core.errors import TraceError
from stallscope.analyzer.job.align import align_clocks, match
from stallscope.analyzer.job.discover import job_files
from stallscope.analyzer.job.reduce import reduce_file
from stallscope.analyzer.job.result import JobAnalysis
from stallscope.analyzer.job.stragglers import MIN_LATE_US
from stallscope.analyzer.job.tables import RankTable
from stallscope.analyzer.job.verdict import analyze_job
from stallscope.analyzer.passes.critical import Kind

WORLD = 4
STEPS = 5
PLANTS = [
    Plant(rank=2, step=1, cause="input", us=3000.0),
    Plant(rank=1, step=2, cause="host", us=2500.0),
    Plant(rank=3, step=3, cause="sync"),
]
OFFSETS = {1: 1234, 2: -5678, 3: 99_999}
SITES = {
    "input": "train.py:88 in load_batch",
    "host": "train.py:95 in prepare",
    "sync": "train.py:102 in log_loss",
}


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[JobTruth, JobAnalysis]:
    truth = build_job(tmp_path_factory.mktemp("job"), WORLD, STEPS, PLANTS, OFFSETS)
    tables = [reduce_file(str(f), use_cache=False) for f in truth.files]
    assert all(isinstance(t, RankTable) for t in tables)
    return truth, analyze_job([t for t in tables if isinstance(t, RankTable)])


def test_every_collective_is_matched_across_every_rank(planted: tuple[JobTruth, JobAnalysis]) -> None:
    _, job = planted
    assert len(job.instances) == STEPS
    assert all(len(i.arrivals) == WORLD and i.name == "allreduce" for i in job.instances)
    assert [i.number for i in job.instances] == list(range(STEPS))
    assert job.unmatched == 0 and job.size_mismatches == 0


def test_planted_clock_offsets_are_recovered(planted: tuple[JobTruth, JobAnalysis]) -> None:
    truth, job = planted
    for rank, offset in truth.offsets_us.items():
        assert job.offsets_us[rank] == pytest.approx(offset, abs=3.0)
    assert job.residual_max_us < 3.0


@pytest.mark.parametrize("plant", PLANTS, ids=[p.cause for p in PLANTS])
def test_planted_straggler_its_cause_site_and_the_waits(
    planted: tuple[JobTruth, JobAnalysis], plant: Plant
) -> None:
    truth, job = planted
    inst = job.instances[plant.step]
    arrivals = truth.arrivals[plant.step]
    expected_late = arrivals[plant.rank] - statistics.median(
        a for r, a in arrivals.items() if r != plant.rank
    )
    assert truth.straggler(plant.step) == plant.rank  # the simulation made it late
    assert inst.straggler == plant.rank
    assert inst.late_us == pytest.approx(expected_late, abs=2.0)
    assert inst.skew_us == pytest.approx(truth.skew_us(plant.step), abs=2.0)
    assert inst.cause == Kind(plant.cause)
    assert inst.cause_us >= 0.9 * inst.late_us
    assert inst.site == SITES[plant.cause]
    for a in inst.arrivals:  # each rank waited from its own arrival until the last one
        assert a.wait_us == pytest.approx(arrivals[plant.rank] - arrivals[a.rank], abs=2.0)
    assert f"rank {plant.rank} reached allreduce #{plant.step}" in inst.sentence


def test_punctual_collectives_have_no_straggler_and_the_ranking_counts_only_late_ones(
    planted: tuple[JobTruth, JobAnalysis],
) -> None:
    _, job = planted
    planted_steps = {p.step for p in PLANTS}
    for inst in job.instances:
        if inst.index not in planted_steps:
            assert inst.late_us < MIN_LATE_US and inst.cause is None
    last = {s.rank: s.times_last for s in job.rank_stats}
    assert last == {0: 0, 1: 1, 2: 1, 3: 1}
    ranking = [s.rank for s in job.rank_stats if s.times_last]
    assert ranking == [2, 1, 3]  # most lateness first: 3.0 ms input, 2.5 ms host, 1.5 ms sync


def test_findings_whatif_and_heatmap_follow_from_the_instances(planted: tuple[JobTruth, JobAnalysis]) -> None:
    _, job = planted
    assert {(f.rank, f.cause) for f in job.findings} == {(p.rank, p.cause) for p in PLANTS}
    assert all(f.rule == "straggler" and f.advice for f in job.findings)
    late = sum(i.late_us for i in job.instances if i.late_us >= MIN_LATE_US)
    (whatif,) = job.whatif
    assert whatif.scenario == "no_stragglers"
    assert whatif.saving_us == pytest.approx(late)
    assert whatif.predicted_wall_us == pytest.approx(job.wall_us - late)
    assert len(job.cells) == WORLD * STEPS
    cell = next(c for c in job.cells if c.rank == 0 and c.step.endswith(f"#{1 + 1}"))
    assert cell.collective_wait_us == pytest.approx(job.instances[1].arrivals[0].wait_us)
    assert job.collective_wait_us == pytest.approx(sum(c.collective_wait_us for c in job.cells))


def test_sequence_numbers_match_before_order_and_sizes_are_compared(
    planted: tuple[JobTruth, JobAnalysis],
) -> None:
    from dataclasses import replace

    _, job = planted
    tables = list(job.tables)
    # rank 1 lost its first collective from the trace; with sequence numbers the rest still match
    seqd = [
        replace(t, collectives=tuple(replace(c, seq=k) for k, c in enumerate(t.collectives))) for t in tables
    ]
    seqd[1] = replace(seqd[1], collectives=seqd[1].collectives[1:])
    m = match(seqd)
    assert len(m.instances) == STEPS and m.unmatched == 0
    assert sorted(m.instances[0].members) == [0, 2, 3]
    assert m.instances[1].members[1] == 0  # rank 1's first remaining collective is seq 1
    bad = list(tables)
    bad[2] = replace(bad[2], collectives=(replace(bad[2].collectives[0], nelems=7), *bad[2].collectives[1:]))
    assert match(bad).size_mismatches == 1
    clocks = align_clocks(seqd, m.instances)
    assert clocks.offsets_us[3] == pytest.approx(OFFSETS[3], abs=3.0)


def test_job_files_from_folders_nested_folders_and_globs(tmp_path: Path) -> None:
    for r in range(2):
        (tmp_path / f"node{r}").mkdir()
        (tmp_path / f"node{r}" / f"rank{r}.pt.trace.json.gz").write_bytes(b"x")
    nested = job_files([str(tmp_path)])
    assert [p.name for p in nested] == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    assert job_files([str(tmp_path / "node*" / "*.json.gz")]) == nested
    assert job_files([str(nested[1]), str(nested[0]), str(nested[1])]) == [nested[1], nested[0]]
    with pytest.raises(TraceError, match="no file matches"):
        job_files([str(tmp_path / "nothing*.json")])
    with pytest.raises(TraceError, match="no such file"):
        job_files([str(tmp_path / "missing.json")])


def test_collective_args_written_in_other_scripts_digits_are_not_numbers() -> None:
    from stallscope.analyzer.job.collectives import _int

    # "²" passes str.isdigit and int() refuses it: such an arg is absent, never a crash
    assert [_int(v) for v in ("²", "-12", " 7 ", "1" * 40, 5, None)] == [None, -12, 7, None, 5, None]
