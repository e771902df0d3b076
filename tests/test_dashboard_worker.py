"""The background analysis: a restarted dashboard analyses what a stopped one left unfinished, in a child
process, with progress recorded in the store; the web process keeps answering meanwhile."""

from __future__ import annotations

import io
import time
from pathlib import Path

from stallscope.analyzer.analysis import analyze
from stallscope.analyzer.document.analysis import to_json
from stallscope.analyzer.load.loader import load
from stallscope.dashboard.app import open_services
from stallscope.dashboard.store import Status, Store

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
ITEM = SAMPLES / "item_in_loop.pt.trace.json.gz"


def test_a_restarted_dashboard_analyses_what_was_left_in_a_child_process(tmp_path: Path) -> None:
    before = Store(tmp_path / "store")  # a dashboard that stored two uploads, then stopped
    waiting = before.add("waiting.json.gz", io.BytesIO(ITEM.read_bytes()), 1 << 26).id
    cut = before.add("cut.json.gz", io.BytesIO(ITEM.read_bytes()), 1 << 26).id
    before.set_progress(cut, "analysing")
    seen: set[str] = set()
    services = open_services(tmp_path / "store", max_upload_mb=64)  # processes=True: the real worker
    try:
        store = services.store
        deadline = time.monotonic() + 120
        while store.unfinished() and time.monotonic() < deadline:
            seen |= {store.get(i).status.value for i in (waiting, cut)}
            time.sleep(0.02)  # the web process is free to poll while the child works
        assert store.unfinished() == []
    finally:
        assert services.worker is not None
        services.worker.shutdown()
    expected = to_json(analyze(load(ITEM, use_cache=False)))["summary"]
    for trace_id in (waiting, cut):
        assert store.get(trace_id).status is Status.READY
        assert store.analysis(trace_id)["summary"] == expected
    assert "pending" in seen or "analysing" in seen
