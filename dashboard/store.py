"""The dashboard's trace store: a folder with an SQLite catalog and one sub-folder per trace.

Layout under the store root::

    catalog.sqlite                  id, name, time, size, tags, status, headline numbers, checksums
    tmp/                            uploads and results being written (never served)
    traces/<id>/input/...           the uploaded file (``trace.json[.gz]`` or an unpacked ``bundle/``)
    traces/<id>/result-<n>/         events.parquet + model.json (the trace model), analysis.json
    traces/<id>/result-<n>/ranks/<r>/   a job's other rank's model, written when its timeline is first shown

Every write goes to ``tmp/`` (or a ``.tmp-`` folder) first and is renamed into place; the catalog row is
written in one transaction after the files are in place, with a checksum of each result file. A reader
only serves an entry whose row says ``ready`` and whose files match their checksums; anything else is
reported (``CorruptEntry``), never served. SQLite (WAL, a connection per call) makes concurrent uploads
from threads or processes safe, and the folder survives restarts: entries left ``pending`` or
``analysing`` by a stopped server are picked up again (``unfinished``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import sqlite3
import tempfile
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import IO, Any, NoReturn

import pyarrow as pa

from stallscope.analyzer.core.errors import StallscopeError
from stallscope.analyzer.core.model import TraceModel
from stallscope.analyzer.document.tracks import Awaited
from stallscope.analyzer.load.cache import (  # the cache's own Parquet layout
    MODEL_FILES,
    read_model,
    write_model,
)
from stallscope.dashboard.headline import catalog_summary
from stallscope.dashboard.unpack import BadUpload, place

ID_RE = re.compile(r"[0-9a-f]{32}")
OVERVIEW = "overview.json"  # the analysis without the critical path's segments (``Store.overview``)
ANNOTATED = "annotated.json.gz"  # the trace with its analysis as extra tracks (``Store.annotated``)
RANKS = "ranks"  # beside a job entry's result: ranks/<rank>/, each other rank's model once it was shown
SUMS = "checksums.json"
_MODELS_KEPT = 4  # decoded trace models kept in memory (the timeline asks for windows of the same trace)


class Status(str, Enum):
    PENDING = "pending"  # stored, waiting for the worker
    ANALYSING = "analysing"
    READY = "ready"
    ERROR = "error"  # the trace could not be analysed; ``error`` says why
    CORRUPT = "corrupt"  # files missing or not matching their checksums


class StoreError(StallscopeError):
    """Base of the store's errors (one line, safe to show to a user)."""


class UnknownTrace(StoreError):
    def __init__(self, trace_id: str) -> None:
        super().__init__(f"no trace with id {trace_id[:40]!r}")


class CorruptEntry(StoreError):
    """An entry whose files are missing, half-written or changed since they were stored."""


class NotReady(StoreError):
    """The entry exists but has no analysis (yet, or because analysing it failed)."""


class TooLarge(BadUpload):
    pass


class StoreFull(BadUpload):
    """The store cannot make room for an upload within its limit (every older entry is pinned or still
    being analysed)."""


class NoSuchRank(StoreError):
    """A rank the entry's job does not have (or a rank number that is not one)."""


@dataclass(frozen=True)
class Entry:
    id: str
    name: str  # the uploaded file name: text for display only, never a path
    uploaded_at: float  # seconds since the epoch
    size_bytes: int
    status: Status
    progress: str
    error: str
    tags: tuple[str, ...]
    summary: dict[str, Any] | None  # ``headline.catalog_summary`` once ready (headline numbers)
    pinned: bool = False  # kept when the store is over its limit

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "uploaded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.uploaded_at)),
            "size_bytes": self.size_bytes,
            "status": self.status.value,
            "progress": self.progress,
            "error": self.error,
            "tags": list(self.tags),
            "summary": self.summary,
            "pinned": self.pinned,
        }


def default_root() -> Path:
    """``$XDG_DATA_HOME/stallscope/dashboard`` (``~/.local/share/...``): survives restarts and reboots."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "stallscope" / "dashboard"


def check_id(trace_id: str) -> str:
    """``trace_id`` if it has the shape of an id this store made (32 hex digits), else ``UnknownTrace``.
    Runs before any filesystem access, so an id can never be a path."""
    if not isinstance(trace_id, str) or not ID_RE.fullmatch(trace_id):
        raise UnknownTrace(str(trace_id))
    return trace_id


_SCHEMA = """
create table if not exists traces (
    id text primary key, name text not null, uploaded_at real not null, size_bytes integer not null,
    tags text not null default '[]', status text not null, progress text not null default '',
    error text not null default '', input text not null, result text not null default '',
    checksums text not null default '{}', summary text,
    utilization real, bottleneck text, avoidable_syncs integer, est_saving_us real, wall_us real
)
"""
_COLUMNS = "id, name, uploaded_at, size_bytes, tags, status, progress, error, summary, pinned"


class Store:
    """One store folder. Safe to share between threads and processes: each call opens its own SQLite
    connection and every write is one transaction.

    ``limit_bytes`` (None: no limit) caps what the entries' folders hold on disk: an upload, and each
    analysis result, first removes the oldest unpinned entries that are not waiting for or under analysis
    until the store fits; an upload that cannot fit even then is refused (``StoreFull``)."""

    def __init__(self, root: str | Path, limit_bytes: int | None = None) -> None:
        self.root = Path(root)
        self.limit_bytes = limit_bytes
        for sub in ("tmp", "traces"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        with self._db() as db:
            db.execute("pragma journal_mode=wal")
            db.execute(_SCHEMA)
            columns = {r[1] for r in db.execute("pragma table_info(traces)")}
            if "pinned" not in columns:  # a store made before pins
                db.execute("alter table traces add column pinned integer not null default 0")
        self._room = threading.Lock()  # one eviction at a time in this process
        self._usage: tuple[float, int] | None = None  # (when, bytes): the last count (``usage``)
        self._models: OrderedDict[str, TraceModel] = OrderedDict()
        self._docs: OrderedDict[str, tuple[tuple[str, int, int], dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()
        self._remove_leftovers()

    def _remove_leftovers(self, older_than_s: float = 3600.0) -> None:
        """Staging folders and uncatalogued entry folders left by a process killed mid-write."""
        with self._db() as db:
            known = {r[0] for r in db.execute("select id from traces")}
        now = time.time()
        stale = list((self.root / "tmp").iterdir())
        stale += [p for p in (self.root / "traces").iterdir() if p.name not in known]
        for path in stale:
            with contextlib.suppress(OSError):
                if now - path.stat().st_mtime > older_than_s:
                    shutil.rmtree(path, ignore_errors=True)

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.root / "catalog.sqlite", timeout=30.0)
        try:
            with db:  # one transaction: committed on success, rolled back on error
                yield db
        finally:
            db.close()

    # -- writing ---------------------------------------------------------------------------------

    def add(self, name: str, data: IO[bytes], max_bytes: int, tags: tuple[str, ...] = ()) -> Entry:
        """Store an uploaded trace or bundle read from ``data`` (at most ``max_bytes``, else ``TooLarge``)
        as a new ``pending`` entry. ``name`` is only displayed; it never becomes a path."""
        trace_id = uuid.uuid4().hex
        staging = Path(tempfile.mkdtemp(prefix=f"{trace_id}-", dir=self.root / "tmp"))
        try:
            upload = staging / "upload"
            size = _copy_limited(data, upload, max_bytes)
            if size == 0:
                raise BadUpload("the uploaded file is empty")
            (staging / "input").mkdir()
            loadable = Path("input") / place(upload, staging / "input", max_bytes)
            self._make_room(_disk_bytes(staging), keep=())
            staging.rename(self.root / "traces" / trace_id)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        clean = _display_name(name)
        with self._db() as db:
            db.execute(
                "insert into traces (id, name, uploaded_at, size_bytes, tags, status, input)"
                " values (?, ?, ?, ?, ?, ?, ?)",
                (
                    trace_id,
                    clean,
                    time.time(),
                    size,
                    json.dumps(list(tags)),
                    Status.PENDING.value,
                    str(loadable),
                ),
            )
        return self.get(trace_id)

    def set_progress(self, trace_id: str, progress: str, status: Status = Status.ANALYSING) -> None:
        with self._db() as db:
            db.execute(
                "update traces set status = ?, progress = ? where id = ?",
                (status.value, progress[:200], check_id(trace_id)),
            )

    def fail(self, trace_id: str, error: str) -> None:
        """Record why the trace could not be analysed (shown in the page and by the API)."""
        with self._db() as db:
            db.execute(
                "update traces set status = ?, error = ?, progress = '' where id = ?",
                (Status.ERROR.value, error[:500], check_id(trace_id)),
            )

    def save_result(self, trace_id: str, model: TraceModel, analysis: dict[str, Any]) -> Entry:
        """Write the trace model (Parquet) and the analysis JSON, then mark the entry ``ready`` with its
        headline numbers, all or nothing."""
        from stallscope.analyzer.document.encoding import encode_compact

        folder = self._folder(trace_id)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder))
        try:
            write_model(tmp, model)
            # msgspec, not the standard library: the whole document of a 10M-event trace is ~300 MB
            (tmp / "analysis.json").write_bytes(encode_compact(analysis))
            (tmp / OVERVIEW).write_bytes(encode_compact(overview_doc(analysis)))
            sums = {f: _sha256(tmp / f) for f in (*MODEL_FILES, "analysis.json", OVERVIEW)}
            result = f"result-{uuid.uuid4().hex[:8]}"
            tmp.rename(folder / result)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        s = catalog_summary(analysis)  # CPU-only: null utilization, ``cpu_only`` set
        with self._db() as db:
            old = db.execute("select result from traces where id = ?", (trace_id,)).fetchone()
            db.execute(
                "update traces set status = ?, progress = '', error = '', result = ?, checksums = ?,"
                " summary = ?, utilization = ?, bottleneck = ?, avoidable_syncs = ?, est_saving_us = ?,"
                " wall_us = ? where id = ?",
                (
                    Status.READY.value,
                    result,
                    json.dumps(sums),
                    json.dumps(s),
                    s.get("device_utilization"),
                    s.get("bottleneck"),
                    s.get("avoidable_sync_count"),
                    s.get("best_saving_us"),
                    s.get("wall_us"),
                    trace_id,
                ),
            )
        if old and old[0] and old[0] != result:
            shutil.rmtree(folder / old[0], ignore_errors=True)
        return self.get(trace_id)

    def fit(self, keep: tuple[str, ...] = ()) -> None:
        """Remove the oldest unpinned settled entries (not those in ``keep``) while the store is over its
        limit; what is pinned or being analysed stays even if that leaves it over (the worker calls this
        after each analysis, whose result adds to the store)."""
        with contextlib.suppress(StoreFull):
            self._make_room(0, keep)

    def pin(self, trace_id: str, pinned: bool = True) -> Entry:
        """Keep (or stop keeping) the entry when the store is over its limit."""
        with self._db() as db:
            found = db.execute(
                "update traces set pinned = ? where id = ?", (int(pinned), check_id(trace_id))
            ).rowcount
        if not found:
            raise UnknownTrace(trace_id)
        return self.get(trace_id)

    def usage(self, max_age_s: float = 0.0) -> int:
        """Bytes the entries' folders hold on disk: counted now, or (for a page polling it) a count at
        most ``max_age_s`` old."""
        now = time.monotonic()
        with self._lock:
            counted = self._usage
        if counted is not None and now - counted[0] <= max_age_s:
            return counted[1]
        used = _disk_bytes(self.root / "traces")
        with self._lock:
            self._usage = (now, used)
        return used

    def _make_room(self, incoming: int, keep: tuple[str, ...]) -> None:
        """Remove the oldest unpinned, settled (ready, error, corrupt) entries not in ``keep`` until the
        store and ``incoming`` more bytes fit its limit; ``StoreFull`` if they cannot."""
        if self.limit_bytes is None:
            return
        with self._room:
            used = self.usage()
            if used + incoming <= self.limit_bytes:
                return
            with self._db() as db:
                candidates = [
                    r[0]
                    for r in db.execute(
                        "select id from traces where pinned = 0 and status not in (?, ?) order by uploaded_at",
                        (Status.PENDING.value, Status.ANALYSING.value),
                    )
                ]
            for trace_id in candidates:
                if used + incoming <= self.limit_bytes:
                    return
                if trace_id in keep:
                    continue
                freed = _disk_bytes(self._folder(trace_id))
                with contextlib.suppress(UnknownTrace):
                    self.delete(trace_id)
                    used -= freed
            if used + incoming > self.limit_bytes:
                mb = self.limit_bytes / (1 << 20)
                raise StoreFull(
                    f"the store is full ({used / (1 << 20):.1f} of {mb:.0f} MB, the rest pinned or being"
                    " analysed): unpin or delete traces to make room"
                )

    def delete(self, trace_id: str) -> None:
        """Remove the entry and its files. The catalog row goes first, so a reader never sees a row
        whose files are being removed."""
        with self._db() as db:
            gone = db.execute("delete from traces where id = ?", (check_id(trace_id),)).rowcount
        if not gone:
            raise UnknownTrace(trace_id)
        with self._lock:
            self._models.pop(trace_id, None)
            for name in ("analysis.json", OVERVIEW):
                self._docs.pop(f"{trace_id}/{name}", None)
        shutil.rmtree(self.root / "traces" / trace_id, ignore_errors=True)

    # -- reading ---------------------------------------------------------------------------------

    def get(self, trace_id: str) -> Entry:
        with self._db() as db:
            row = db.execute(f"select {_COLUMNS} from traces where id = ?", (check_id(trace_id),)).fetchone()
        if row is None:
            raise UnknownTrace(trace_id)
        return _entry(row)

    def entries(self) -> list[Entry]:
        """Every entry, newest first."""
        with self._db() as db:
            rows = db.execute(f"select {_COLUMNS} from traces order by uploaded_at desc").fetchall()
        return [_entry(r) for r in rows]

    def unfinished(self) -> list[str]:
        """Ids of entries still waiting for (or interrupted during) analysis, oldest first."""
        with self._db() as db:
            rows = db.execute(
                "select id from traces where status in (?, ?) order by uploaded_at",
                (Status.PENDING.value, Status.ANALYSING.value),
            ).fetchall()
        return [r[0] for r in rows]

    def input_path(self, trace_id: str) -> Path:
        """What the loader reads for this entry (a file or a folder inside the entry's folder)."""
        with self._db() as db:
            row = db.execute("select input from traces where id = ?", (check_id(trace_id),)).fetchone()
        if row is None:
            raise UnknownTrace(trace_id)
        path = self._folder(trace_id) / str(row[0])
        if not path.exists():
            self._mark_corrupt(trace_id, "the uploaded file is missing")
        return path

    def analysis(self, trace_id: str) -> dict[str, Any]:
        """The analysis JSON (schema ``stallscope.analysis/3``) of a ready entry. The last few parsed
        documents are kept (a 1M-event trace's is tens of MB); a kept one is served only while its file
        is the one that was verified (same folder, size and mtime). Callers must not modify it."""
        return self._doc(trace_id, "analysis.json")

    def overview(self, trace_id: str) -> dict[str, Any]:
        """The analysis JSON without the critical path's segment list (``overview_doc``), for the pages
        that show figures and tables: its size does not grow with the trace's events the way the
        segments do (a million on a 10M-event trace). Entries stored before it existed get the whole
        document. Callers must not modify it."""
        folder, _ = self._verified_stat(trace_id)
        if not (folder / OVERVIEW).exists():
            return self.analysis(trace_id)
        return self._doc(trace_id, OVERVIEW)

    def _doc(self, trace_id: str, name: str) -> dict[str, Any]:
        folder, stat = self._verified_stat(trace_id, name)
        key = f"{trace_id}/{name}"
        with self._lock:
            kept = self._docs.get(key)
            if kept is not None and kept[0] == stat:
                self._docs.move_to_end(key)
                return kept[1]
        folder = self._result(trace_id, (name,))
        doc: dict[str, Any] = json.loads((folder / name).read_text())
        with self._lock:
            self._docs[key] = (stat, doc)
            while len(self._docs) > _MODELS_KEPT:
                self._docs.popitem(last=False)
        return doc

    def _verified_stat(self, trace_id: str, name: str = "analysis.json") -> tuple[Path, tuple[str, int, int]]:
        """The result folder and what identifies its analysis file now (without reading it)."""
        with self._db() as db:
            row = db.execute("select result from traces where id = ?", (check_id(trace_id),)).fetchone()
        if row is None:
            raise UnknownTrace(trace_id)
        folder = self._folder(trace_id) / str(row[0])
        try:
            st = (folder / name).stat()
        except OSError:
            return folder, (str(row[0]), -1, -1)
        return folder, (str(row[0]), st.st_size, st.st_mtime_ns)

    def model(self, trace_id: str) -> TraceModel:
        """The entry's trace model, memory-mapped from its Parquet table; the last few stay decoded."""
        with self._lock:
            if trace_id in self._models:
                self._models.move_to_end(trace_id)
                return self._models[trace_id]
        folder = self._result(trace_id, MODEL_FILES)
        try:
            model = read_model(folder, self.get(trace_id).name)
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
            self._mark_corrupt(trace_id, "the stored trace model cannot be read")
        with self._lock:
            self._models[trace_id] = model
            while len(self._models) > _MODELS_KEPT:
                self._models.popitem(last=False)
        return model

    def annotated(self, trace_id: str, awaited: Callable[[], Mapping[int, Awaited]] | None = None) -> Path:
        """The entry's trace with its analysis as extra tracks (``stallscope annotate``), written on first
        request beside the entry's result and kept there (all or nothing: a request that finds it finds it
        whole). The trace file is the analysed rank's. ``awaited``: what each sync waited for
        (``awaited_by_sync`` of the typed analysis), asked for only when the file is written."""
        from stallscope.analyzer.document.annotate import anchors_of, write_annotated

        doc = self.analysis(trace_id)
        folder = self._result(trace_id, ("analysis.json",))
        target = folder / ANNOTATED
        if not target.exists():
            source = _analysed_file(self.input_path(trace_id), doc)
            try:
                model, waits = self.model(trace_id), awaited() if awaited else None
                anchors = anchors_of(doc, model.events, waits)
                write_annotated(source, doc, model.lanes, target, awaited=waits, anchors=anchors)
            except StallscopeError as exc:
                raise NotReady(f"trace {trace_id} cannot be annotated: {exc}") from None
        return target

    def rank_file(self, trace_id: str, rank: int) -> Path:
        """The uploaded trace file of ``rank`` of a ready job entry (the job document names each rank's
        file; the upload keeps every one). ``NoSuchRank`` for a rank the job does not have."""
        doc = self.overview(trace_id)
        job = doc.get("job") or {}
        if rank not in {r.get("rank") for r in job.get("ranks") or ()}:
            raise NoSuchRank(f"rank {rank} is not in this {'job' if job else 'trace'}")
        return _rank_file(self.input_path(trace_id), doc, rank)

    def rank_model(self, trace_id: str, rank: int, max_inflated_mb: float | None = None) -> TraceModel:
        """The trace model of one rank of a job entry, from that rank's file alone (the other ranks are
        not read, the job is not reduced again). The first load writes it beside the entry's result
        (``ranks/<rank>/``, Parquet, with checksums), so a later one (after a restart, or once
        ``LiveAnalyses`` let it go) memory-maps it instead of decoding the JSON again; a damaged copy is
        dropped and rebuilt from the file. Not kept in memory here: the caller keeps what it builds."""
        path = self.rank_file(trace_id, rank)
        folder = self._result(trace_id, ()) / RANKS / str(rank)
        model = self._kept_rank(folder, path.name)
        if model is None:
            model = self._load_rank(path, rank, max_inflated_mb)
            self._keep_rank(folder, model)
        return model

    def _kept_rank(self, folder: Path, name: str) -> TraceModel | None:
        try:
            sums = json.loads((folder / SUMS).read_text())
            if all(_sha256(folder / f) == sums.get(f) for f in MODEL_FILES):
                return read_model(folder, name)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
            pass
        shutil.rmtree(folder, ignore_errors=True)  # damaged: the rank's file is the truth, load it again
        return None

    def _keep_rank(self, folder: Path, model: TraceModel) -> None:
        """Write ``model`` into ``folder``, all or nothing; a failure (full disk) only costs the next load."""
        with contextlib.suppress(OSError, ValueError, pa.ArrowException):
            folder.parent.mkdir(exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder.parent))
            try:
                write_model(tmp, model)
                (tmp / SUMS).write_text(json.dumps({f: _sha256(tmp / f) for f in MODEL_FILES}))
                tmp.rename(folder)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)  # gone once renamed; left when another wrote first

    @staticmethod
    def _load_rank(path: Path, rank: int, max_inflated_mb: float | None) -> TraceModel:
        from stallscope.analyzer.load.loader import MAX_INFLATED_MB, load

        name = path.name
        try:
            traces = load(path, use_cache=False, max_inflated_mb=max_inflated_mb or MAX_INFLATED_MB)
        except StallscopeError as exc:
            raise NotReady(f"rank {rank} cannot be loaded: {str(exc).replace(str(path), name)}") from None
        model = traces.models[0]
        if model.rank is not None and model.rank != rank:
            raise NotReady(f"{name} holds rank {model.rank}, not rank {rank}")
        return dataclasses.replace(model, path=name)  # never the server's folders

    def _folder(self, trace_id: str) -> Path:
        return self.root / "traces" / check_id(trace_id)

    def _result(self, trace_id: str, files: tuple[str, ...]) -> Path:
        """The folder of a ready entry's result after checking ``files`` against their checksums."""
        with self._db() as db:
            row = db.execute(
                "select status, error, result, checksums from traces where id = ?", (check_id(trace_id),)
            ).fetchone()
        if row is None:
            raise UnknownTrace(trace_id)
        status, error, result, checksums = row
        if status == Status.ERROR.value:
            raise NotReady(f"trace {trace_id} could not be analysed: {error}")
        if status == Status.CORRUPT.value:
            raise CorruptEntry(f"trace {trace_id} is corrupt: {error}")
        if status != Status.READY.value:
            raise NotReady(f"trace {trace_id} is not analysed yet ({status})")
        folder = self._folder(trace_id) / str(result)
        sums = json.loads(checksums)
        for name in files:
            digest = sums.get(name)
            try:
                ok = _sha256(folder / name) == digest
            except OSError:
                ok = False
            if not ok:
                self._mark_corrupt(trace_id, f"{name} is missing or does not match its checksum")
        return folder

    def _mark_corrupt(self, trace_id: str, why: str) -> NoReturn:
        with self._db() as db:
            db.execute(
                "update traces set status = ?, error = ? where id = ?", (Status.CORRUPT.value, why, trace_id)
            )
        with self._lock:
            self._models.pop(trace_id, None)
            for name in ("analysis.json", OVERVIEW):
                self._docs.pop(f"{trace_id}/{name}", None)
        raise CorruptEntry(f"trace {trace_id} is corrupt: {why}")


def _analysed_file(path: Path, doc: dict[str, Any]) -> Path:
    """The trace file of the rank ``doc`` analysed, in the uploaded ``path`` (a file, or a folder: a
    bundle, or rank files whose names the job's ranks keep)."""
    return _rank_file(path, doc, doc.get("source", {}).get("rank"))


def _rank_file(path: Path, doc: dict[str, Any], rank: int | None) -> Path:
    """The trace file of ``rank`` in the uploaded ``path`` (see ``_analysed_file``)."""
    from stallscope.analyzer.load.loader import trace_files

    if path.is_file():
        return path
    files = trace_files(path)
    if len(files) == 1:
        return files[0]
    ranks = (doc.get("job") or {}).get("ranks") or []
    name = next((r.get("path") for r in ranks if r.get("rank") == rank), None)
    found = [f for f in files if f.name == name]
    if len(found) != 1:
        raise NotReady(f"cannot tell which of {len(files)} trace files rank {rank} is")
    return found[0]


def _entry(row: tuple[Any, ...]) -> Entry:
    trace_id, name, at, size, tags, status, progress, error, summary, pinned = row
    return Entry(
        trace_id,
        name,
        float(at),
        int(size),
        Status(status),
        progress,
        error,
        tuple(json.loads(tags)),
        json.loads(summary) if summary else None,
        bool(pinned),
    )


def _copy_limited(data: IO[bytes], target: Path, max_bytes: int) -> int:
    size = 0
    with target.open("xb") as out:
        while chunk := data.read(1 << 20):
            size += len(chunk)
            if size > max_bytes:
                raise TooLarge(f"upload is larger than the limit of {max_bytes // (1 << 20)} MB")
            out.write(chunk)
    return size


def _disk_bytes(folder: Path) -> int:
    """Bytes of the regular files under ``folder`` (a file that vanishes while counted counts 0)."""
    total = 0
    for dirpath, _dirs, files in os.walk(folder):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_size
    return total


def _display_name(name: str) -> str:
    """The last component of the uploaded name, without control characters; text for display only."""
    base = re.split(r"[/\\]", name or "")[-1]
    base = "".join(ch for ch in base if ch.isprintable())[:200]
    return base or "trace"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def overview_doc(analysis: dict[str, Any]) -> dict[str, Any]:
    """The analysis document without ``critical_path.segments`` (every other key as it is)."""
    cp = analysis.get("critical_path")
    if not isinstance(cp, dict) or "segments" not in cp:
        return analysis
    return {**analysis, "critical_path": {k: v for k, v in cp.items() if k != "segments"}}
