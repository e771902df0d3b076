"""The dashboard under hostile uploads, load and faults (issue 14), on 127.0.0.1 only, bounded in time.

- bundles that cannot be stored (duplicate or over-long member names) and files that are not traces or
  bundles (PNG, ELF, a pickle, random bytes) are refused with 400 at once, never 500;
- 20 uploads at once each get their own, correct analysis;
- an input that hangs or kills its analysis process fails only its own entry; the uploads queued behind
  it are analysed by a fresh process;
- ``kill -9`` of the dashboard, then a restart on the same store: every entry ends ready or failed with a
  reason, none stays pending or analysing.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _kineto import SAMPLES, document, launch_pair
from test_api import call, multipart

import stallscope.dashboard.worker
from stallscope.analyzer.analysis import analyze
from stallscope.analyzer.document.analysis import to_json
from stallscope.analyzer.load.loader import load
from stallscope.dashboard import client
from stallscope.dashboard.app import Running, create_app, open_services
from stallscope.dashboard.store import Status, Store
from stallscope.dashboard.worker import Limits, Worker

ITEM = SAMPLES / "item_in_loop.pt.trace.json.gz"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    services = open_services(tmp_path_factory.mktemp("store"), max_upload_mb=4, processes=False)
    running = Running(create_app(services), "127.0.0.1", 0, quiet=True).start()
    try:
        yield running
    finally:
        running.stop()
        assert services.worker is not None
        services.worker.shutdown()


def tar_of(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


TRACE = json.dumps(document(launch_pair(0, 1, 30, 10, ext=11))).encode()
ELF = b"\x7fELF\x02\x01\x01" + bytes(57) + os.urandom(500)
PNG = b"\x89PNG\r\n\x1a\n" + os.urandom(500)


@pytest.mark.parametrize(
    ("name", "data", "words"),
    [
        ("dup.tar.gz", tar_of([("trace.json", TRACE), ("trace.json", TRACE)]), "two members named"),
        ("long.tar.gz", tar_of([("a" * 300 + ".json", TRACE)]), "longer than the store allows"),
        ("deep.tar.gz", tar_of([("/".join(["d" * 150] * 8) + "/t.json", TRACE)]), "longer than"),
        ("both.tar.gz", tar_of([("x", TRACE), ("x/trace.json", TRACE)]), "bundle"),
        ("image.png", PNG, "a PNG image"),
        ("program", ELF, "an ELF program"),
        ("data.pkl", pickle.dumps({"traceEvents": []}), "a Python pickle"),
        ("noise.bin", b"\x01" + os.urandom(2000), "not a trace or bundle"),
        ("noise.json.gz", b"\x1f\x8b\x08\x00" + bytes(6) + os.urandom(2000), "not a trace or bundle"),
    ],
    ids=["duplicate members", "300-char name", "deep path", "file and folder", "png", "elf", "pickle",
         "random", "gzip of noise"],
)  # fmt: skip
def test_unusable_uploads_are_400_at_once(server: Running, name: str, data: bytes, words: str) -> None:
    before = len(call("GET", f"{server.url}/api/traces")[1])
    body, headers = multipart(name, data)
    status, answer = call("POST", f"{server.url}/api/traces", body, headers)
    assert status == 400, answer
    assert words in answer["error"] and "\n" not in answer["error"]
    assert len(call("GET", f"{server.url}/api/traces")[1]) == before  # nothing was stored


def test_twenty_concurrent_uploads_each_get_their_own_analysis(server: Running, tmp_path: Path) -> None:
    # GIVEN 20 traces that differ (kernel durations 10..29 us)
    paths = []
    for i in range(20):
        events = launch_pair(0, 1, 30, 10 + i, ext=11) + launch_pair(100, 2, 130, 5, ext=12)
        path = tmp_path / f"t{i}.json"
        path.write_text(json.dumps(document(events)))
        paths.append(path)
    ids: dict[int, str] = {}

    def send(i: int) -> None:
        ids[i] = str(client.upload(paths[i], server.url)["id"])

    # WHEN they are uploaded at once
    threads = [threading.Thread(target=send, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(set(ids.values())) == 20
    # THEN each entry holds the analysis of its own file
    for i, trace_id in ids.items():
        assert client.wait(trace_id, server.url, timeout=120)["status"] == "ready"
        status, doc = call("GET", f"{server.url}/api/traces/{trace_id}/analysis")
        assert status == 200
        assert doc["summary"]["device_busy_us"] == 15.0 + i
        assert doc["summary"] == to_json(analyze(load(paths[i], use_cache=False)))["summary"]


def _hang(root: str, trace_id: str, limits: Limits | None = None) -> str:
    """In the analysis process: "hang..." is stuck where no watchdog can reach it (native code that never
    returns); loading "hog..." needs 3 GB."""
    name = Store(root).get(trace_id).name
    if "hang" in name:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(600)
    if "hog" not in name:
        return ANALYSE_ENTRY(root, trace_id, limits)
    import stallscope.analyzer.load.loader

    def hog(*_args: object, **_kwargs: object) -> object:
        return bytearray(3 << 30)

    load, stallscope.analyzer.load.loader.load = stallscope.analyzer.load.loader.load, hog  # type: ignore[assignment]
    try:
        return ANALYSE_ENTRY(root, trace_id, limits)
    finally:
        stallscope.analyzer.load.loader.load = load


ANALYSE_ENTRY = stallscope.dashboard.worker.analyse_entry


def test_a_hung_analysis_fails_only_its_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a worker with a 5 s time limit whose analysis of "hang..." never returns (the child process
    # imports ``_hang`` from this module), a trace of that name and two innocent uploads behind it
    monkeypatch.setattr(stallscope.dashboard.worker, "KILL_GRACE_S", 1.0)
    monkeypatch.setattr(stallscope.dashboard.worker, "analyse_entry", _hang)
    store = Store(tmp_path / "store")
    # (the innocent ones get the same limit: 5 s leaves a busy CI machine room for a fresh process)
    worker = Worker(store, processes=True, limits=Limits(time_s=5.0))
    try:
        hang = store.add("hang.json.gz", io.BytesIO(ITEM.read_bytes()), 1 << 26).id
        innocent = [store.add(f"ok{i}.json.gz", io.BytesIO(ITEM.read_bytes()), 1 << 26).id for i in range(2)]
        # WHEN they are analysed
        futures = [worker.submit(trace_id) for trace_id in (hang, *innocent)]
        with pytest.raises(TimeoutError):
            futures[0].result(timeout=120)
        # THEN the hung one fails with a reason, and the others are analysed by a fresh process
        assert [f.result(timeout=120) for f in futures[1:]] == ["ready", "ready"]
        entry = store.get(hang)
        assert entry.status is Status.ERROR and "did not finish within 5 s" in entry.error
    finally:
        worker.shutdown()


def _start_dashboard(store: Path) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "stallscope", "dashboard", "--store", str(store), "--port", "0", "--no-auth"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "stallscope dashboard: http://127.0.0.1:PORT  (store ...)"
    assert "http://127.0.0.1:" in line, line
    return proc, line.split()[2]


def test_kill_9_then_restart_leaves_no_entry_stuck(tmp_path: Path) -> None:
    # GIVEN a dashboard (its own process, real analysis children) receiving six uploads
    store = tmp_path / "store"
    proc, url = _start_dashboard(store)
    try:
        ids = [str(client.upload(ITEM, url)["id"]) for _ in range(6)]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and all(e.status is Status.PENDING for e in Store(store).entries()):
            time.sleep(0.01)  # until the analyses have begun
    finally:
        # WHEN it is killed with SIGKILL while they are queued and analysed
        proc.kill()
        proc.wait(timeout=30)
    statuses = {e.status for e in Store(store).entries()}
    assert statuses <= {Status.PENDING, Status.ANALYSING, Status.READY} and statuses != {Status.PENDING}
    # AND started again on the same store
    proc, url = _start_dashboard(store)
    try:
        deadline = time.monotonic() + 120
        while Store(store).unfinished() and time.monotonic() < deadline:
            time.sleep(0.2)
        # THEN every entry is complete and correct: none is left pending or analysing
        expected = to_json(analyze(load(ITEM, use_cache=False)))["summary"]
        for trace_id in ids:
            entry = client.wait(trace_id, url, timeout=30)
            assert entry["status"] == "ready", entry
            assert call("GET", f"{url}/api/traces/{trace_id}/analysis")[1]["summary"] == expected
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_an_analysis_over_its_memory_limit_fails_only_its_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN analysis processes limited to 2 GB, a trace whose loading needs 3 GB, and an innocent one
    monkeypatch.setattr(stallscope.dashboard.worker, "analyse_entry", _hang)
    store = Store(tmp_path / "store")
    worker = Worker(store, processes=True, limits=Limits(memory_mb=2048))
    try:
        hog = store.add("hog.json.gz", io.BytesIO(ITEM.read_bytes()), 1 << 26).id
        fine = store.add("fine.json.gz", io.BytesIO(ITEM.read_bytes()), 1 << 26).id
        # WHEN both are analysed THEN the first fails with a reason and the second is analysed
        assert worker.submit(hog).result(timeout=120) == "error"
        assert worker.submit(fine).result(timeout=120) == "ready"
        assert store.get(hog).error == "out of memory while analysing the trace"
    finally:
        worker.shutdown()


@pytest.mark.parametrize("log", [False, True])
def test_the_request_log_is_off_unless_asked_and_plain_when_not_a_terminal(tmp_path: Path, log: bool) -> None:
    # GIVEN `stallscope dashboard` with its stderr going to a pipe (not a terminal), with and without --log
    cmd = [
        sys.executable,
        "-m",
        "stallscope",
        "dashboard",
        "--store",
        str(tmp_path / "s"),
        "--port",
        "0",
        "--no-auth",
    ]
    proc = subprocess.Popen(
        cmd + (["--log"] if log else []), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().split()[2]
    try:
        # WHEN a request comes in
        assert call("GET", f"{url}/api/traces")[0] == 200
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    # THEN only --log writes a line for it, and that line has no colour codes
    assert ('"GET /api/traces HTTP/1.1" 200' in err) is log, err
    assert "\x1b" not in err
