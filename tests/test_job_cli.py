"""``stallscope analyze`` on whole jobs: in-process, on a real Dask LocalCluster, and the real DLRM job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from synth.job import Plant, build_job

from stallscope.analyzer.job.execute import Execution, reduce_all
from stallscope.analyzer.job.tables import RankTable
from stallscope.analyzer.job.verdict import analyze_job
from stallscope.commands import main

DLRM = "param_dlrm_v100_8rank"


@pytest.fixture
def job_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "job"
    build_job(folder, 4, 3, [Plant(rank=3, step=1, cause="input", us=2000.0)], {2: 777})
    return folder


def _analyze(tmp_path: Path, *args: str) -> tuple[dict[str, Any], int]:
    out = tmp_path / f"out{len(list(tmp_path.glob('out*.json')))}.json"
    code = main(["analyze", *args, "--json", str(out), "-q"])
    return (json.loads(out.read_text()) if out.exists() else {}), code


def test_a_folder_of_ranks_gets_the_job_key_and_section(
    job_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc, code = _analyze(tmp_path, str(job_folder))
    assert code == 0
    job = doc["job"]
    assert [r["rank"] for r in job["ranks"]] == [0, 1, 2, 3]
    assert job["collectives"]["matched"] == 3
    worst = job["collectives"]["worst"][0]
    assert (worst["straggler"], worst["cause"], worst["site"]) == (3, "input", "train.py:88 in load_batch")
    assert len(worst["arrivals"]) == 4
    assert job["clock_offsets_us"]["2"] == pytest.approx(777, abs=3)
    assert job["stragglers"] == [
        {
            "rank": 3,
            "times_last": 1,
            "late_us": worst["late_us"],
            "late_by_cause_us": {"input": worst["late_us"]},
        }
    ]
    assert job["whatif"][0]["saving_us"] == pytest.approx(worst["late_us"])
    assert doc["source"]["ranks"] == [0, 1, 2, 3] and doc["source"]["rank"] == 0
    assert [r["rank"] for r in doc["per_rank"]] == [0, 1, 2, 3]
    assert main(["analyze", str(job_folder), "--rank", "3"]) == 0
    text = capsys.readouterr().out
    assert "rank 3 of 4" in text or "rank 3" in text
    assert "job       4 ranks" in text and "rank 3 reached allreduce #1 (group 0)" in text


def test_one_rank_file_has_no_job(job_folder: Path, tmp_path: Path) -> None:
    doc, code = _analyze(tmp_path, str(job_folder / "rank0.pt.trace.json.gz"))
    assert code == 0 and doc["job"] is None


def test_bad_job_options_and_inputs_are_one_line_errors(
    job_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", str(job_folder), "--rank", "9"]) == 2
    assert main(["analyze", str(job_folder / "nothing*.json")]) == 2
    assert main(["analyze", str(job_folder), "--workers", "2", "--scheduler", "tcp://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("stallscope: error: ") for line in err)
    assert "has ranks 0, 1, 2, 3" in err[0] and "no file matches" in err[1]


def test_dask_local_cluster_gives_the_same_job_and_a_corrupt_rank_is_that_ranks_error(
    job_folder: Path, tmp_path: Path
) -> None:
    (job_folder / "rank9.pt.trace.json.gz").write_bytes(b"\x1f\x8b\x08\x00 truncated")
    files = sorted(job_folder.glob("*.json.gz"))
    seq_tables, seq_failed = reduce_all(files, Execution(workers=1, use_cache=False))
    messages: list[str] = []
    tables, failed = reduce_all(files, Execution(workers=2, use_cache=False), messages.append)
    assert messages[-1] == f"ranks analysed {len(files)}/{len(files)}"
    assert [f.path for f in failed] == [str((job_folder / "rank9.pt.trace.json.gz").resolve())]
    assert "rank9.pt.trace.json.gz" in failed[0].error and "gzip" in failed[0].error
    assert "\n" not in failed[0].error and failed == seq_failed
    assert sorted(t.rank for t in tables) == [0, 1, 2, 3]
    assert sorted(tables, key=lambda t: t.rank) == sorted(seq_tables, key=lambda t: t.rank)
    on_dask, in_process = analyze_job(tables, failed), analyze_job(seq_tables, seq_failed)
    assert on_dask.instances == in_process.instances and on_dask.offsets_us == in_process.offsets_us
    assert on_dask.instances[1].straggler == 3


def test_cli_reports_the_failed_rank_and_analyses_the_rest(job_folder: Path, tmp_path: Path) -> None:
    (job_folder / "rank9.pt.trace.json").write_text('{"traceEvents": [')
    doc, code = _analyze(tmp_path, str(job_folder), "--no-cache")
    assert code == 0
    (failed,) = doc["job"]["failed"]
    assert failed["path"].endswith("rank9.pt.trace.json") and "truncated JSON" in failed["error"]
    assert len(doc["job"]["ranks"]) == 4
    assert any("rank9.pt.trace.json" in n for n in doc["source"]["notes"])


@pytest.mark.shared
def test_real_dlrm_job_matches_collectives_across_all_eight_ranks(shared_traces: Path) -> None:
    tables, failed = reduce_all(sorted((shared_traces / DLRM).glob("*.json.gz")), Execution(use_cache=False))
    assert failed == [] and sorted(t.rank for t in tables) == list(range(8))
    job = analyze_job([t for t in tables if isinstance(t, RankTable)])
    assert len(job.instances) == 8 and job.unmatched == 0
    assert all(len(i.arrivals) == 8 for i in job.instances)
    assert sorted({i.name for i in job.instances}) == ["allreduce", "alltoall"]
    assert sorted(job.offsets_us) == list(range(8)) and job.offsets_us[0] == 0.0
    assert max(abs(v) for v in job.offsets_us.values()) < 50.0  # one host's clock: offsets are tiny
    assert job.residual_max_us < 10.0
    assert all(i.skew_us > 0 for i in job.instances)
    assert job.instances[0].straggler == 7 and job.instances[0].skew_us > 1000.0


def test_scheduler_option_uses_a_running_cluster(job_folder: Path, tmp_path: Path) -> None:
    from dask.distributed import LocalCluster

    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        on_cluster, code = _analyze(tmp_path, str(job_folder), "--scheduler", cluster.scheduler_address)
    assert code == 0
    in_process, _ = _analyze(tmp_path, str(job_folder), "--workers", "1")
    assert on_cluster["job"] == in_process["job"]
    assert on_cluster["job"]["collectives"]["worst"][0]["straggler"] == 3


def test_a_local_cluster_listens_on_loopback_only() -> None:
    from stallscope.analyzer.job.execute import _client

    with _client(Execution(workers=2)) as client:
        info = client.scheduler_info()
        addresses = [info["address"], *info["workers"]]
        http = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.http_server.address)
    assert len(addresses) == 3 and all(a.startswith("tcp://127.0.0.1:") for a in addresses)
    assert http == "127.0.0.1"


def test_an_unexpected_error_on_one_rank_is_that_ranks_failure(
    job_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import stallscope.analyzer.job.execute as execute

    real = execute.reduce_file

    def flaky(path: str, use_cache: bool = True) -> object:
        if path.endswith("rank1.pt.trace.json.gz"):
            raise KeyError("boom")
        return real(path, use_cache)

    monkeypatch.setattr(execute, "reduce_file", flaky)
    tables, failed = reduce_all(sorted(job_folder.glob("*.json.gz")), Execution(use_cache=False))
    assert sorted(t.rank for t in tables) == [0, 2, 3]
    assert len(failed) == 1 and failed[0].error.endswith(
        "rank1.pt.trace.json.gz: analysis failed (KeyError: 'boom')"
    )


@pytest.mark.shared
def test_collective_args_of_a_real_nccl_trace_identify_its_collectives(shared_traces: Path) -> None:
    from stallscope.analyzer.job.reduce import reduce_file

    path = shared_traces / "hta_a100_nccl_2rank_rank0.pt.trace.json.gz"
    table = reduce_file(str(path), use_cache=False)
    assert isinstance(table, RankTable) and table.rank == 0 and table.world_size == 2
    names = {c.name for c in table.collectives}
    assert names == {"allreduce", "broadcast"}
    assert all(c.group == "0" and c.dtype in ("Float", "Long") and c.nelems > 0 for c in table.collectives)
    allreduce = [c for c in table.collectives if c.name == "allreduce"]
    assert {c.nelems for c in allreduce} >= {2049000, 7875584, 6563840}
    assert table.overlap.comm_us > 0 and table.overlap.compute_us > table.overlap.comm_us


def test_two_files_of_one_rank_keep_the_newest_and_say_so(job_folder: Path, tmp_path: Path) -> None:
    rank1 = (job_folder / "rank1.pt.trace.json.gz").read_bytes()
    (job_folder / "rank1.1700000000001.pt.trace.json.gz").write_bytes(rank1)
    doc, code = _analyze(tmp_path, str(job_folder))
    assert code == 0
    assert [r["rank"] for r in doc["job"]["ranks"]] == [0, 1, 2, 3]
    assert doc["job"]["ranks"][1]["path"].endswith("rank1.1700000000001.pt.trace.json.gz")
    assert (
        "rank 1: using rank1.1700000000001.pt.trace.json.gz, ignoring rank1.pt.trace.json.gz"
        in doc["job"]["notes"]
    )


def test_files_without_distributed_info_are_separate_runs_on_the_job_path_too(
    job_folder: Path, tmp_path: Path, shared_traces: Path
) -> None:
    # GIVEN a folder with one ranked file and two runs without distributedInfo (real single-GPU traces)
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "rank1.pt.trace.json.gz").write_bytes((job_folder / "rank1.pt.trace.json.gz").read_bytes())
    for name in (
        "tracelens_h100_bert_small_pystack.pt.trace.json.gz",
        "tracelens_b300_moe_small.pt.trace.json.gz",
    ):
        (mixed / name).symlink_to(shared_traces / name)
    # WHEN analysed THEN only the ranked file is a rank: no job of 3 ranks numbered 0-2, and a note names the rest
    doc, code = _analyze(tmp_path, str(mixed))
    assert code == 0 and doc["job"] is None
    assert doc["source"]["ranks"] == [1] and doc["source"]["path"].endswith("rank1.pt.trace.json.gz")
    (note,) = [n for n in doc["source"]["notes"] if "without distributedInfo" in n]
    assert "2 more trace files" in note and "tracelens_h100_bert_small_pystack" in note
    # AND two runs of one model on different GPUs are not "rank 0 of 2" with a job wall across their clocks
    runs = tmp_path / "runs"
    runs.mkdir()
    for name in (
        "tracelens_h100_bert_small_pystack.pt.trace.json.gz",
        "tracelens_b300_moe_small.pt.trace.json.gz",
    ):
        (runs / name).symlink_to(shared_traces / name)
    doc, code = _analyze(tmp_path, str(runs))
    assert code == 0 and doc["job"] is None and doc["source"]["ranks"] == [0]
    assert doc["summary"]["wall_us"] < 10_000  # one run's window (2.45 ms), not the span of two clocks
