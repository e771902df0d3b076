"""The dashboard's analysis worker: a child process that dies mid-job fails its entry with a one-line
error, and the next upload is analysed by a fresh process."""

from __future__ import annotations

import io
import os
import signal
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from stallscope.dashboard.store import Status, Store
from stallscope.dashboard.worker import Worker

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
ITEM = SAMPLES / "item_in_loop.pt.trace.json.gz"


def _upload(store: Store) -> str:
    return store.add(ITEM.name, io.BytesIO(ITEM.read_bytes()), 1 << 26).id


def test_a_killed_analysis_process_fails_its_entry_and_the_next_gets_a_fresh_one(tmp_path: Path) -> None:
    # GIVEN a worker with its analysis child process, busy with one upload
    store = Store(tmp_path / "store")
    worker = Worker(store, processes=True)
    try:
        first = _upload(store)
        future = worker.submit(first)
        deadline = time.monotonic() + 60
        children: list[int] = []
        while not children and time.monotonic() < deadline:
            children = worker.child_pids()
            time.sleep(0.05)
        assert children, "the analysis process never started"
        # WHEN that process is killed (out of memory, an operator's kill -9)
        os.kill(children[0], signal.SIGKILL)
        with pytest.raises(BrokenProcessPool):  # killed while still starting up: the job never ran
            future.result(timeout=60)
        deadline = time.monotonic() + 10
        while store.get(first).status is not Status.ERROR and time.monotonic() < deadline:
            time.sleep(0.05)
        # THEN the entry says so in one line instead of staying 'analysing' forever
        entry = store.get(first)
        assert entry.status is Status.ERROR, entry
        assert entry.error.startswith("the analysis process stopped") and "\n" not in entry.error
        # AND the next upload is analysed by a fresh process
        second = _upload(store)
        assert worker.submit(second).result(timeout=120) == "ready"
        assert store.get(second).status is Status.READY
    finally:
        worker.shutdown()
