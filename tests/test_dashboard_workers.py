"""Analyses side by side: ``stallscope dashboard --analysis-workers N`` (N local processes) and
``--scheduler ADDRESS`` (an existing Dask cluster), each upload under its own limits, each failure its
own upload's alone. Everything binds to 127.0.0.1.

The speed comparison runs the one-worker and the two-worker queues at the same time, on the same uploads:
both then meet the same load from whatever else this shared machine runs, so which finishes first says
how many analyses each runs at once, not how busy the machine happened to be during each.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from _kineto import SAMPLES

import stallscope.dashboard.worker
from stallscope.analyzer.core.errors import StallscopeError
from stallscope.commands import main
from stallscope.dashboard import client
from stallscope.dashboard.app import Running, create_app, open_services
from stallscope.dashboard.store import Status, Store
from stallscope.dashboard.worker import ClusterWorker, Limits, Worker, analyse_entry, analyse_in_child

ITEM = SAMPLES / "item_in_loop.pt.trace.json.gz"
LAUNCH = SAMPLES / "launch_bound.pt.trace.json.gz"
BROKEN = ITEM.read_bytes()[: ITEM.stat().st_size // 2]  # a truncated gzip file
MB = 1 << 20
ID_ARGS = ("correlation", "External id", "Python id", "Python parent id", "Ev Idx", "Record function id")


def tiled(source: Path, copies: int) -> bytes:
    """``source`` repeated ``copies`` times end to end (times shifted, linking ids offset per copy): a
    real trace whose analysis takes long enough to measure."""
    doc = json.loads(gzip.decompress(source.read_bytes()))
    meta = [e for e in doc["traceEvents"] if e.get("ph") == "M"]
    body = [e for e in doc["traceEvents"] if e.get("ph") != "M"]
    timed = [e for e in body if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 10.0
    ids = [v for e in body for k, v in (e.get("args") or {}).items() if k in ID_ARGS and isinstance(v, int)]
    id_span = max(ids + [e["id"] for e in body if isinstance(e.get("id"), int)]) + 1
    events = list(meta)
    for c in range(copies):
        for e in body:
            e2 = dict(e)
            if "ts" in e2:
                e2["ts"] = round(e2["ts"] + span * c, 3)
            if isinstance(e2.get("id"), int):
                e2["id"] += id_span * c
            if e2.get("args"):
                e2["args"] = {
                    k: v + id_span * c if k in ID_ARGS and isinstance(v, int) and v >= 0 else v
                    for k, v in e2["args"].items()
                }
            if str(e2.get("name", "")).startswith("ProfilerStep#"):
                e2["name"] = f"ProfilerStep#{int(e2['name'].split('#')[1]) + 1000 * c}"
            events.append(e2)
    return gzip.compress(json.dumps({**doc, "traceEvents": events}).encode(), compresslevel=1)


def comparable(doc: dict[str, Any]) -> dict[str, Any]:
    """The analysis document without what names the upload (its file name)."""
    return {**doc, "source": {k: v for k, v in doc["source"].items() if k != "path"}}


def unfinished(entries: list[Any]) -> bool:
    return any(e.status in (Status.PENDING, Status.ANALYSING) for e in entries)


# ----- --analysis-workers N ----------------------------------------------------------------------------


def test_two_analysis_workers_run_side_by_side_and_finish_before_one(tmp_path: Path) -> None:
    # GIVEN a queue of one worker process and one of two, each process started by a first small upload
    stores = {n: Store(tmp_path / f"store-{n}") for n in (1, 2)}
    workers = {n: Worker(stores[n], workers=n) for n in (1, 2)}
    took: dict[int, float] = {}
    most = {1: 0, 2: 0}  # the most entries seen under analysis at once
    progress: set[str] = set()  # entries seen 'analysing' with a progress message of their own
    try:
        first = [
            workers[n].submit(stores[n].add("first.json.gz", io.BytesIO(ITEM.read_bytes()), MB).id)
            for n in (1, 2)
            for _ in range(n)
        ]
        assert [f.result(timeout=120) for f in first] == ["ready"] * 3
        assert [len(workers[n].child_pids()) for n in (1, 2)] == [1, 2]
        # AND four uploads each of a real trace tiled 300 times (about a second of analysis each)
        data = tiled(ITEM, 300)
        ids = {
            n: [s.add(f"tiled-{i}.json.gz", io.BytesIO(data), 64 * MB).id for i in range(4)]
            for n, s in stores.items()
        }
        # WHEN both queues get their four at once
        start = time.monotonic()
        for n in (1, 2):
            for trace_id in ids[n]:
                workers[n].submit(trace_id)
        while len(took) < 2 and time.monotonic() - start < 600:
            for n in (1, 2):
                if n in took:
                    continue
                entries = [e for e in stores[n].entries() if e.id in ids[n]]
                busy = [e for e in entries if e.status is Status.ANALYSING]
                most[n] = max(most[n], len(busy))
                progress |= {e.id for e in busy if e.progress}
                if not unfinished(entries):
                    took[n] = time.monotonic() - start
            time.sleep(0.05)
    finally:
        for worker in workers.values():
            worker.shutdown()
    # THEN all eight are ready, each having shown its progress
    assert all(stores[n].get(trace_id).status is Status.READY for n in (1, 2) for trace_id in ids[n])
    assert progress == set(ids[1] + ids[2])
    # AND two ran at once with two workers, one with one, and the two workers finished first
    assert most == {1: 1, 2: 2}
    assert took[2] < took[1], took
    print(f"four analyses: {took[1]:.1f} s with one worker, {took[2]:.1f} s with two")
    # AND the analyses are the same whichever process made them
    docs = [comparable(stores[n].analysis(trace_id)) for n in (1, 2) for trace_id in ids[n]]
    assert docs[0]["source"]["events"] == 300 * _reference(tmp_path, ITEM)["source"]["events"]
    assert all(doc == docs[0] for doc in docs[1:])


def test_a_killed_analysis_process_fails_only_its_entry_and_the_other_worker_goes_on(tmp_path: Path) -> None:
    # GIVEN two workers and five uploads
    store = Store(tmp_path / "store")
    worker = Worker(store, workers=2)
    try:
        ids = [store.add(f"item-{i}.json.gz", io.BytesIO(ITEM.read_bytes()), MB).id for i in range(5)]
        futures = [worker.submit(trace_id) for trace_id in ids]
        deadline = time.monotonic() + 60
        while len(worker.child_pids()) < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        # WHEN one of the two analysis processes is killed while it starts its first entry
        os.kill(worker.child_pids()[0], signal.SIGKILL)
        outcomes = []
        for future in futures:
            try:
                outcomes.append(future.result(timeout=120))
            except Exception:
                outcomes.append("failed")
    finally:
        worker.shutdown()
    # THEN exactly that entry fails, with one line, and the other four (those queued behind) are analysed
    assert sorted(outcomes) == ["failed", "ready", "ready", "ready", "ready"], outcomes
    failed = [e for e in store.entries() if e.status is Status.ERROR]
    assert len(failed) == 1 and failed[0].error.startswith("the analysis process stopped")
    assert "\n" not in failed[0].error


def _start_dashboard(store: Path, *options: str) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "stallscope", "dashboard", "--store", str(store), "--port", "0", "--no-auth"]
    proc = subprocess.Popen([*cmd, *options], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "stallscope dashboard: http://127.0.0.1:PORT  (store ...)"
    assert "http://127.0.0.1:" in line, line
    return proc, line.split()[2]


def test_the_dashboard_with_two_workers_resumes_what_was_left_and_fails_a_broken_upload_alone(
    tmp_path: Path,
) -> None:
    # GIVEN a store a stopped dashboard left with one upload waiting and one half analysed
    store = tmp_path / "store"
    before = Store(store)
    left = [before.add(f"left-{i}.json.gz", io.BytesIO(ITEM.read_bytes()), MB).id for i in range(2)]
    before.set_progress(left[1], "analysing")
    # WHEN `stallscope dashboard --analysis-workers 2` starts on it and gets a broken and a good upload
    proc, url = _start_dashboard(store, "--analysis-workers", "2")
    try:
        broken = tmp_path / "broken.json.gz"
        broken.write_bytes(BROKEN)
        new = [str(client.upload(path, url)["id"]) for path in (broken, LAUNCH)]
        entries = {trace_id: client.wait(trace_id, url, timeout=120, poll_s=0.1) for trace_id in left + new}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # THEN the broken upload alone fails, in one line naming it; the others are analysed
    assert entries[new[0]]["status"] == "error"
    assert (
        entries[new[0]]["error"].startswith("broken.json.gz: ")
        and "truncated gzip" in entries[new[0]]["error"]
    )
    assert [entries[i]["status"] for i in (*left, new[1])] == ["ready", "ready", "ready"]
    expected = comparable(_reference(tmp_path, ITEM))
    assert all(comparable(Store(store).analysis(i)) == expected for i in left)


def _reference(tmp_path: Path, trace: Path) -> dict[str, Any]:
    """The analysis document of ``trace`` made in this process (no worker)."""
    store = Store(tmp_path / f"reference-{trace.name}")
    trace_id = store.add(trace.name, io.BytesIO(trace.read_bytes()), MB).id
    assert analyse_entry(str(store.root), trace_id) == "ready"
    return store.analysis(trace_id)


# ----- --scheduler ADDRESS ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    """A local Dask cluster of two worker processes on 127.0.0.1 (no dashboard), closed afterwards."""
    from dask.distributed import LocalCluster

    cluster = LocalCluster(  # type: ignore[no-untyped-call]
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
        silence_logs=logging.ERROR,
    )
    with cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        yield str(cluster.scheduler_address)


def test_uploads_are_analysed_on_a_dask_cluster_and_a_broken_one_fails_alone(
    tmp_path: Path, scheduler: str
) -> None:
    # GIVEN a store with an upload a stopped dashboard left waiting, and a dashboard on the cluster
    store = tmp_path / "store"
    left = Store(store).add("left.json.gz", io.BytesIO(ITEM.read_bytes()), MB).id
    services = open_services(store, max_upload_mb=8, scheduler=scheduler)
    assert isinstance(services.worker, ClusterWorker)
    running = Running(create_app(services), "127.0.0.1", 0, quiet=True).start()
    try:
        # WHEN a good and a broken upload arrive
        broken = tmp_path / "broken.json.gz"
        broken.write_bytes(BROKEN)
        new = [str(client.upload(path, running.url)["id"]) for path in (LAUNCH, broken)]
        entries = {i: client.wait(i, running.url, timeout=120, poll_s=0.1) for i in (left, *new)}
    finally:
        running.stop()
        services.worker.shutdown()
    # THEN the left one and the good one are analysed as in this process, the broken one fails alone
    assert [entries[i]["status"] for i in (left, new[0])] == ["ready", "ready"]
    assert comparable(services.store.analysis(left)) == comparable(_reference(tmp_path, ITEM))
    assert comparable(services.store.analysis(new[0])) == comparable(_reference(tmp_path, LAUNCH))
    assert entries[new[1]]["status"] == "error"
    assert (
        entries[new[1]]["error"].startswith("broken.json.gz: ")
        and "truncated gzip" in entries[new[1]]["error"]
    )


def test_an_analysis_process_dying_on_the_cluster_fails_its_entry_and_the_cluster_goes_on(
    tmp_path: Path, scheduler: str
) -> None:
    # GIVEN analyses limited to 64 MB of address space: the analysis process dies importing its modules
    store = Store(tmp_path / "store")
    starved = ClusterWorker(store, scheduler, limits=Limits(memory_mb=64))
    try:
        victim = store.add("victim.json.gz", io.BytesIO(ITEM.read_bytes()), MB).id
        # WHEN one upload is analysed that way THEN its entry says the process stopped, in one line
        assert starved.submit(victim).result(timeout=120) == "error"
    finally:
        starved.shutdown()
    entry = store.get(victim)
    assert entry.error.startswith("the analysis process stopped (exit code ") and "\n" not in entry.error
    # AND the cluster's workers are unharmed: the next upload is analysed there
    worker = ClusterWorker(store, scheduler)
    try:
        fine = store.add("fine.json.gz", io.BytesIO(ITEM.read_bytes()), MB).id
        assert worker.submit(fine).result(timeout=120) == "ready"
    finally:
        worker.shutdown()


def test_a_store_given_by_a_relative_path_is_found_by_the_cluster(
    tmp_path: Path, scheduler: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a dashboard started in another folder than the cluster's workers, with `--store store`
    monkeypatch.chdir(tmp_path)
    store = Store("store")
    worker = ClusterWorker(store, scheduler)
    try:
        trace_id = store.add("item.json.gz", io.BytesIO(ITEM.read_bytes()), MB).id
        # WHEN an upload is analysed there THEN the task found the store
        assert worker.submit(trace_id).result(timeout=120) == "ready"
    finally:
        worker.shutdown()


def test_a_hung_analysis_process_is_killed_past_its_time_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the task a Dask worker runs, with a 1 s limit and 1 s of grace, on an upload
    monkeypatch.setattr(stallscope.dashboard.worker, "KILL_GRACE_S", 1.0)
    store = Store(tmp_path / "store")
    trace_id = store.add("hung.json.gz", io.BytesIO(ITEM.read_bytes()), MB).id
    outcome: list[str] = []
    task = threading.Thread(
        target=lambda: outcome.append(analyse_in_child(str(store.root), trace_id, Limits(time_s=1.0)))
    )
    me = psutil.Process()
    task.start()
    # WHEN its analysis process hangs where no watchdog reaches (stopped as soon as it exists)
    stopped = False
    deadline = time.monotonic() + 30
    while not stopped and task.is_alive() and time.monotonic() < deadline:
        for child in me.children():
            with contextlib.suppress(psutil.Error):
                if "child_main" in " ".join(child.cmdline()):
                    child.send_signal(signal.SIGSTOP)
                    stopped = True
        time.sleep(0.005)
    task.join(timeout=60)
    # THEN it is killed past the limit and the grace, and the entry says why
    assert stopped and outcome == ["error"]
    assert store.get(trace_id).error == "the analysis did not finish within 1 s and was stopped"


def test_a_task_on_a_machine_without_the_store_says_so_and_makes_no_store(tmp_path: Path) -> None:
    # GIVEN a store folder this (Dask worker's) machine cannot see
    root = tmp_path / "elsewhere" / "store"
    # WHEN the task is run THEN it says where the workers must run, without naming the server's folder
    with pytest.raises(
        StallscopeError, match=r"store is not visible on .*must run on the dashboard's machine"
    ) as caught:
        analyse_in_child(str(root), "0" * 32)
    assert str(root) not in str(caught.value)
    assert not root.exists()


# ----- argument errors --------------------------------------------------------------------------------


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (["--analysis-workers", "0"], "--analysis-workers must be a whole number of processes"),
        (["--analysis-workers", "-1"], "--analysis-workers must be a whole number of processes"),
        (["--analysis-workers", "two"], "not 'two'"),
        (["--analysis-workers", "1.5"], "not '1.5'"),
        (["--analysis-workers", "²"], "not '²'"),
        (["--analysis-workers", "99999"], "from 1 to 9999"),
        (["--analysis-workers", "2", "--scheduler", "127.0.0.1:8786"], "--analysis-workers and --scheduler"),
        (["--scheduler", " "], "give the address of a Dask scheduler"),
        (["--scheduler", "127.0.0.1"], "not a scheduler's address (missing port number"),
        (["--scheduler", "inproc://x"], "not a scheduler's address"),
    ],
)
def test_bad_worker_options_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str], words: str
) -> None:
    code = main(["dashboard", "--store", str(tmp_path / "store"), "--port", "0", "--no-auth", *options])
    assert code == 2
    line = _one_line(capsys)
    assert line.startswith("stallscope: error: ") and words in line, line


def test_a_scheduler_that_cannot_be_reached_is_one_line_and_exit_2_within_the_timeout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an address on 127.0.0.1 where nothing listens (the port is held, never listened on)
    monkeypatch.setattr(stallscope.dashboard.worker, "CONNECT_TIMEOUT_S", 2.0)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{held.getsockname()[1]}"
        # WHEN the dashboard is started with it
        start = time.monotonic()
        code = main(
            [
                "dashboard",
                "--store",
                str(tmp_path / "store"),
                "--port",
                "0",
                "--no-auth",
                "--scheduler",
                address,
            ]
        )
        took = time.monotonic() - start
    # THEN it gives up after its timeout with one line, before serving anything
    assert code == 2
    assert _one_line(capsys).startswith(f"stallscope: error: --scheduler {address}: cannot connect (")
    assert took < 30
