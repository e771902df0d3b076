"""The dashboard's trace store: uploads stored atomically, analysed into Parquet + JSON, served only when
intact, safe with two writers at once, and unchanged across a restart."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import statistics
import tarfile
import threading
import zipfile
from pathlib import Path

import pytest

from stallscope.analyzer.analysis import analyze
from stallscope.analyzer.document.analysis import to_json
from stallscope.analyzer.load.loader import load
from stallscope.dashboard.headline import best_saving
from stallscope.dashboard.store import (
    CorruptEntry,
    NotReady,
    Status,
    Store,
    StoreFull,
    TooLarge,
    UnknownTrace,
    check_id,
)
from stallscope.dashboard.unpack import BadUpload
from stallscope.dashboard.worker import Worker, analyse_entry

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
ITEM = SAMPLES / "item_in_loop.pt.trace.json.gz"
CPU_ONLY = SAMPLES / "examples" / "item_logging" / "trace.pt.trace.json.gz"  # no device activity
MB = 1 << 20


def stored(store: Store, path: Path = ITEM, name: str | None = None) -> str:
    """GIVEN a file uploaded and analysed in this process -> its id."""
    entry = store.add(name or path.name, io.BytesIO(path.read_bytes()), 64 * MB)
    assert analyse_entry(str(store.root), entry.id) == "ready", store.get(entry.id).error
    return entry.id


def test_upload_is_analysed_into_the_same_json_as_the_cli(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    trace_id = stored(store)
    entry = store.get(trace_id)
    direct = to_json(analyze(load(ITEM, use_cache=False)))
    doc = store.analysis(trace_id)
    assert entry.status is Status.READY and entry.name == ITEM.name
    assert entry.size_bytes == ITEM.stat().st_size
    assert doc["summary"] == direct["summary"] and entry.summary == {
        **direct["summary"],
        "cpu_only": False,
        "best_saving_us": best_saving(direct)[0],
        # what a run's page shows of a capture (this trace is none)
        "capture": None,
        "step_us": statistics.median(s["dur_us"] for s in direct["steps"]),
        "step_count": len(direct["steps"]),
        "top_findings": [{k: f[k] for k in ("rule", "title", "est_saving_us")} for f in direct["findings"]],
        "finding_rules": sorted({f["rule"] for f in direct["findings"]}),
    }
    assert doc["syncs"] == direct["syncs"] and doc["findings"] == direct["findings"]
    assert doc["source"]["path"] == ITEM.name  # the server's folders are never shown
    model = store.model(trace_id)
    assert model.event_count == direct["source"]["events"]
    assert store.model(trace_id) is model  # decoded once, then served from memory


def test_a_cpu_only_trace_is_catalogued_with_no_utilization(tmp_path: Path) -> None:
    """GIVEN a trace with no device activity WHEN it is analysed THEN the catalog says CPU-only and keeps a
    null utilization, as the analysis JSON itself does (no device figures on a CPU-only run)."""
    store = Store(tmp_path / "store")
    trace_id = stored(store, CPU_ONLY)
    direct = to_json(analyze(load(CPU_ONLY, use_cache=False)))
    assert direct["devices"] == [] and direct["summary"]["device_utilization"] is None
    summary = store.get(trace_id).summary
    assert summary is not None and summary["cpu_only"] is True and summary["device_utilization"] is None
    assert summary["wall_us"] == direct["summary"]["wall_us"]
    assert store.analysis(trace_id)["summary"] == direct["summary"]
    with sqlite3.connect(store.root / "catalog.sqlite") as db:
        assert db.execute("select utilization from traces where id = ?", (trace_id,)).fetchone() == (None,)


def test_upload_over_the_limit_leaves_nothing_behind(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    with pytest.raises(TooLarge, match="limit of 1 MB"):
        store.add("big.json", io.BytesIO(b"[" + b" " * (MB + 10) + b"]"), MB)
    assert store.entries() == []
    assert list((store.root / "tmp").iterdir()) == [] and list((store.root / "traces").iterdir()) == []


def test_a_bad_trace_is_stored_with_a_one_line_error_naming_the_upload(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    entry = store.add("broken.json", io.BytesIO(b'{"traceEvents": [1, 2'), MB)
    assert analyse_entry(str(store.root), entry.id) == "error"
    after = store.get(entry.id)
    assert after.error.startswith("broken.json: ") and "\n" not in after.error
    assert str(store.root) not in after.error
    with pytest.raises(NotReady, match="could not be analysed"):
        store.analysis(entry.id)


def test_two_threads_uploading_at_once_both_land_intact(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    a, b = SAMPLES / "item_in_loop.pt.trace.json.gz", SAMPLES / "input_bound.pt.trace.json.gz"
    ids: dict[str, str] = {}
    barrier = threading.Barrier(2)

    def upload(path: Path) -> None:
        barrier.wait()
        ids[path.name] = stored(Store(tmp_path / "store"), path)

    threads = [threading.Thread(target=upload, args=(p,)) for p in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {e.name for e in store.entries()} == {a.name, b.name}
    for path in (a, b):
        expected = to_json(analyze(load(path, use_cache=False)))["summary"]
        assert store.analysis(ids[path.name])["summary"] == expected


def test_the_store_survives_a_restart_and_resumes_unfinished_entries(tmp_path: Path) -> None:
    first = Store(tmp_path / "store")
    done = stored(first)
    waiting = first.add("later.json.gz", io.BytesIO(ITEM.read_bytes()), 64 * MB).id
    first.set_progress(waiting, "analysing")  # the server stopped mid-analysis
    second = Store(tmp_path / "store")
    assert [e.id for e in second.entries()] == [waiting, done]
    assert second.analysis(done) == first.analysis(done)
    assert second.unfinished() == [waiting]
    assert analyse_entry(str(second.root), waiting) == "ready"
    assert second.unfinished() == []


def test_the_overview_is_the_analysis_without_the_critical_path_segments(tmp_path: Path) -> None:
    # GIVEN an analysed upload
    store = Store(tmp_path / "store")
    trace_id = stored(store)
    # WHEN the pages read its overview (bounded whatever the trace's size) and the API its analysis
    full, overview = store.analysis(trace_id), store.overview(trace_id)
    # THEN the overview holds every key of the analysis but the segment list
    assert full["critical_path"]["segments"] and "segments" not in overview["critical_path"]
    assert {k: v for k, v in full["critical_path"].items() if k != "segments"} == overview["critical_path"]
    assert {k: v for k, v in full.items() if k != "critical_path"} == {
        k: v for k, v in overview.items() if k != "critical_path"
    }
    # AND an entry stored before overviews existed is served its whole analysis
    (result,) = (tmp_path / "store" / "traces" / trace_id).glob("result-*")
    (result / "overview.json").unlink()
    assert Store(tmp_path / "store").overview(trace_id) == full


def test_a_changed_overview_file_is_reported_not_served(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    trace_id = stored(store)
    (result,) = (tmp_path / "store" / "traces" / trace_id).glob("result-*")
    (result / "overview.json").write_text("{}")
    with pytest.raises(CorruptEntry, match=r"overview.json is missing or does not match"):
        store.overview(trace_id)


def test_a_changed_analysis_file_is_reported_not_served(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    trace_id = stored(store)
    assert store.analysis(trace_id)["summary"]["wall_us"] > 1.0  # parsed and kept in memory
    (result,) = (tmp_path / "store" / "traces" / trace_id).glob("result-*")
    doc = json.loads((result / "analysis.json").read_text())
    doc["summary"]["wall_us"] = 1.0
    (result / "analysis.json").write_text(json.dumps(doc))
    with pytest.raises(CorruptEntry, match=r"analysis.json is missing or does not match"):
        store.analysis(trace_id)
    assert store.get(trace_id).status is Status.CORRUPT
    with pytest.raises(CorruptEntry):  # stays reported, also after a restart
        Store(tmp_path / "store").analysis(trace_id)


def test_a_missing_parquet_table_is_reported_not_served(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    trace_id = stored(store)
    (result,) = (tmp_path / "store" / "traces" / trace_id).glob("result-*")
    (result / "events.parquet").unlink()
    with pytest.raises(CorruptEntry, match=r"events\.parquet"):
        store.model(trace_id)


def test_half_written_folders_are_never_listed_and_are_cleaned_up(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    orphan = store.root / "traces" / ("a" * 32)  # renamed into place, then the process died
    orphan.mkdir()
    staging = store.root / "tmp" / "x-half"
    staging.mkdir()
    assert Store(store.root).entries() == []
    for p in (orphan, staging):
        os.utime(p, (0, 0))
    Store(store.root)
    assert not orphan.exists() and not staging.exists()


@pytest.mark.parametrize("bad", ["../x", "A" * 32, "a" * 31, "a" * 32 + "/..", "", "0" * 32 + "\n"])
def test_ids_are_checked_before_any_file_is_touched(tmp_path: Path, bad: str) -> None:
    store = Store(tmp_path / "store")
    with pytest.raises(UnknownTrace):
        check_id(bad)
    with pytest.raises(UnknownTrace):
        store.analysis(bad)
    with pytest.raises(UnknownTrace):
        store.delete(bad)


def test_delete_removes_row_and_files(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    trace_id = stored(store)
    store.delete(trace_id)
    assert store.entries() == [] and not (store.root / "traces" / trace_id).exists()
    with pytest.raises(UnknownTrace):
        store.get(trace_id)


def test_upload_names_are_text_never_paths(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    entry = store.add("../../etc/x.json", io.BytesIO(ITEM.read_bytes()), 64 * MB)
    assert entry.name == "x.json"
    assert not (tmp_path / "etc").exists()
    files = [p.name for p in (store.root / "traces" / entry.id / "input").iterdir()]
    assert files == ["trace.json.gz"]  # chosen from the bytes (gzip), not from the name


def _tar_bundle(path: Path, members: dict[str, bytes], symlink: str | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        if symlink:
            link = tarfile.TarInfo(symlink)
            link.type = tarfile.SYMTYPE
            link.linkname = "/etc/passwd"
            tf.addfile(link)
    return path


def test_a_tarred_bundle_folder_is_unpacked_and_analysed(tmp_path: Path) -> None:
    bundle = _tar_bundle(tmp_path / "run.tgz", {"run/rank-0.pt.trace.json.gz": ITEM.read_bytes()})
    store = Store(tmp_path / "store")
    trace_id = stored(store, bundle)
    assert store.analysis(trace_id)["summary"] == to_json(analyze(load(ITEM, use_cache=False)))["summary"]


@pytest.mark.parametrize("member", ["../evil.json", "/abs.json", "a/../../evil.json"])
def test_bundles_with_unsafe_paths_are_refused(tmp_path: Path, member: str) -> None:
    zpath = tmp_path / "b.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr(member, ITEM.read_bytes())
    store = Store(tmp_path / "store")
    with pytest.raises(BadUpload, match="unsafe path"):
        store.add("b.zip", io.BytesIO(zpath.read_bytes()), 64 * MB)
    assert not (tmp_path / "evil.json").exists()
    assert store.entries() == [] and list((store.root / "tmp").iterdir()) == []


def test_bundles_with_links_or_too_many_bytes_are_refused(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    linked = _tar_bundle(tmp_path / "l.tgz", {"t.json": b"[]"}, symlink="sidecar.json")
    with pytest.raises(BadUpload, match="not a regular file"):
        store.add("l.tgz", io.BytesIO(linked.read_bytes()), 64 * MB)
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("t.json", b" " * (3 * MB))
    assert bomb.stat().st_size < MB
    with pytest.raises(BadUpload, match="unpacks to more than"):
        store.add("bomb.zip", io.BytesIO(bomb.read_bytes()), MB)
    assert store.entries() == []


def _settled(store: Store, name: str, size: int) -> str:
    """GIVEN a ``size``-byte JSON upload whose analysis is over (here: failed), so the limit may drop it."""
    data = b'{"traceEvents": [' + b" " * (size - 19) + b"]}"
    trace_id = store.add(name, io.BytesIO(data), 64 * MB).id
    store.fail(trace_id, "not analysed in this test")
    return trace_id


def test_a_store_over_its_limit_drops_its_oldest_unpinned_entries_and_keeps_pinned_ones(
    tmp_path: Path,
) -> None:
    # GIVEN a store limited to 350 kB holding three 100 kB entries, the oldest pinned
    store = Store(tmp_path / "store", limit_bytes=350_000)
    a, b, c = (_settled(store, n, 100_000) for n in ("a", "b", "c"))
    assert store.pin(a).pinned and store.usage() == 300_000
    # WHEN a fourth arrives (400 kB would be over the limit)
    d = _settled(store, "d", 100_000)
    # THEN the oldest unpinned one went, files and all; the pinned one and the newer ones stay
    assert {e.id for e in store.entries()} == {a, c, d}
    assert not (store.root / "traces" / b).exists()
    assert store.usage() == 300_000 <= store.limit_bytes  # type: ignore[operator]
    assert [e.pinned for e in store.entries() if e.id == a] == [True]


def test_a_store_whose_older_entries_are_all_pinned_refuses_an_upload_that_does_not_fit(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "store", limit_bytes=250_000)
    kept = [_settled(store, n, 100_000) for n in ("a", "b")]
    for trace_id in kept:
        store.pin(trace_id)
    with pytest.raises(StoreFull, match="store is full"):
        _settled(store, "c", 100_000)
    assert sorted(e.id for e in store.entries()) == sorted(kept)
    assert sorted(p.name for p in (store.root / "traces").iterdir()) == sorted(kept)
    assert list((store.root / "tmp").iterdir()) == []
    # unpinning one makes room again: it is the one that goes
    store.pin(kept[0], pinned=False)
    c = _settled(store, "c", 100_000)
    assert {e.id for e in store.entries()} == {kept[1], c}


def test_entries_waiting_for_analysis_are_never_dropped_and_fit_keeps_the_one_just_analysed(
    tmp_path: Path,
) -> None:
    # GIVEN a store with an unlimited past: a pending entry (oldest), then two settled ones
    store = Store(tmp_path / "store")
    pending = store.add("p", io.BytesIO(b'{"traceEvents": []}' + b" " * 99_981), 64 * MB).id
    old, new = _settled(store, "old", 100_000), _settled(store, "new", 100_000)
    # WHEN its limit shrinks to 150 kB and it is fitted after "new"'s analysis
    store.limit_bytes = 150_000
    store.fit(keep=(new,))
    # THEN only "old" could go; the store stays over its limit rather than drop the others
    assert {e.id for e in store.entries()} == {pending, new} and old not in {e.id for e in store.entries()}
    assert store.usage() == 200_000


def test_pins_survive_a_restart_and_a_store_made_before_pins_opens(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    trace_id = _settled(store, "a", 1000)
    store.pin(trace_id)
    assert Store(tmp_path / "store").get(trace_id).pinned
    # a catalog without the column (an older version's) gains it, every entry unpinned
    with sqlite3.connect(tmp_path / "store" / "catalog.sqlite") as db:
        db.execute("alter table traces drop column pinned")
    assert Store(tmp_path / "store").get(trace_id).pinned is False
    with pytest.raises(UnknownTrace):
        store.pin("0" * 32)


def test_the_worker_makes_room_after_an_analysis_adds_its_result(tmp_path: Path) -> None:
    # GIVEN a store filled to 1 kB under its limit by two settled entries and a trace uploaded after them
    store = Store(tmp_path / "store")
    old, newer = _settled(store, "old", 100_000), _settled(store, "newer", 100_000)
    trace_id = store.add(ITEM.name, io.BytesIO(ITEM.read_bytes()), 64 * MB).id
    store.limit_bytes = store.usage() + 1000
    worker = Worker(store, processes=False)
    try:
        # WHEN it is analysed (its Parquet table and analysis JSON put the store over its limit)
        assert worker.submit(trace_id).result(timeout=120) == "ready"
    finally:
        worker.shutdown()
    # THEN the oldest settled entry made room; the newer one and the one just analysed stay
    assert {e.id for e in store.entries()} == {newer, trace_id} and old != newer
    assert store.usage() <= store.limit_bytes
