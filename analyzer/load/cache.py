"""Parquet cache of built trace models, keyed by the content of the trace file.

Layout: ``$XDG_CACHE_HOME/stallscope/models-v<N>/<content key>/{events.parquet, model.json}``, plus a small
stat index (path, size, mtime, inode -> content key) so an unchanged file is not even re-read. Entries are
written to a temporary folder and renamed into place; an unreadable entry is ignored and rebuilt. After each
write the cache is pruned to its size limit, least recently used entries first (``cachekeys.prune``).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from stallscope.analyzer.core.model import (
    Counters,
    Device,
    EventTable,
    Lane,
    LaneKind,
    LoadReport,
    Series,
    Step,
    TraceModel,
)
from stallscope.analyzer.load.cachekeys import (  # re-exported: the loader and the tools know them as cache.*
    CACHE_VERSION,
    cache_root,
    hash_file,
    hasher,
    known_key,
    prune,
    remember_key,
    stat_token,
    touch,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "CACHE_VERSION",
    "cache_root",
    "hash_file",
    "hasher",
    "known_key",
    "load_cached",
    "prune",
    "read_model",
    "remember_key",
    "stat_token",
    "store",
    "wait",
    "write_model",
    "writes_in_a_child",
]


def load_cached(key: str, path: str) -> TraceModel | None:
    """The cached model for ``key``, or None when absent or unreadable (it is then rebuilt)."""
    wait(key)
    folder = cache_root() / key
    if not folder.is_dir():  # the common miss: no need to import pyarrow to learn it
        return None
    pa, _ = _arrow_modules()
    try:
        model = read_model(folder, path)
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
        return None
    touch(folder)
    return model


MODEL_FILES = ("events.parquet", "model.json")


def write_model(folder: Path, model: TraceModel) -> None:
    """Write ``model`` into ``folder`` as ``MODEL_FILES`` (the event columns as Parquet, the rest as
    JSON). The cache and the dashboard's store share this layout."""
    pa, pq = _arrow_modules()
    table = pa.table({name: _arrow(values) for name, values in model.events.columns().items()})
    pq.write_table(table, folder / "events.parquet", compression="lz4", use_dictionary=False)
    (folder / "model.json").write_text(json.dumps(_meta_of(model)))


def read_model(folder: Path, path: str) -> TraceModel:
    """The model ``write_model`` wrote into ``folder``; ``path`` becomes its source path. Raises
    ``OSError``, ``ValueError``, ``KeyError``, ``TypeError`` or ``pyarrow.ArrowException`` when the
    files are missing or damaged."""
    _, pq = _arrow_modules()
    meta = json.loads((folder / "model.json").read_text())
    table = pq.ParquetFile(folder / "events.parquet", memory_map=True).read()  # no pandas import
    return _model_from(meta, table, path)


def store(
    key: str, model: TraceModel, source: Path | None = None, token: dict[str, int] | None = None
) -> None:
    """Write the model under ``key`` in the background (the caller goes on analysing meanwhile) and
    remember ``source``'s content key. Failures (read-only cache, full disk) are not errors. A load of the
    same key waits for the write; the interpreter waits for pending writes before it exits. The writer is
    a thread, or a forked process inside ``writes_in_a_child()``."""
    child = _Child.start(key, model, source, token) if _in_a_child else None
    thread = threading.Thread(
        target=_store_now, args=(key, model, source, token), name=f"stallscope-cache-{key[:8]}"
    )
    with _pending_lock:  # before the thread starts: it drops its own entry when done
        _pending[key] = thread if child is None else child
    if child is None:
        thread.start()


def wait(key: str | None = None) -> None:
    """Block until the pending write of ``key`` (or every pending write) is on disk."""
    with _pending_lock:
        writers = [_pending[key]] if key in _pending else [] if key is not None else list(_pending.values())
    for writer in writers:
        writer.join()
    with _pending_lock:  # a thread drops its own entry; a child's is the parent's to drop
        for k in [k for k, w in _pending.items() if isinstance(w, _Child) and w in writers]:
            del _pending[k]


@contextlib.contextmanager
def writes_in_a_child() -> Iterator[None]:
    """Inside: models are written from a forked process instead of a thread (a command that analyses and
    exits). The thread imports pyarrow (0.3 s of Python) and encodes the columns while the analysis runs,
    and the two share one interpreter lock; a child runs beside it on the other core, with the model's
    memory shared (it only reads it). Elsewhere than on Linux, or once the process has imported pyarrow
    (a child could inherit locks its threads held), a thread writes."""
    global _in_a_child
    before, _in_a_child = _in_a_child, True
    try:
        yield
    finally:
        _in_a_child = before


class _Writer(Protocol):
    def join(self) -> None: ...


class _Child:
    """A forked process writing one model; ``join`` waits for it (killing it after ``_CHILD_LIMIT_S``: a
    child stuck on a lock some thread of the parent held when it forked must not hang the parent)."""

    def __init__(self, pid: int) -> None:
        self.pid, self._done = pid, False

    @staticmethod
    def start(
        key: str, model: TraceModel, source: Path | None, token: dict[str, int] | None
    ) -> _Child | None:
        if not sys.platform.startswith("linux") or "pyarrow" in sys.modules:  # macOS: fork is unsafe
            return None
        try:
            with warnings.catch_warnings():  # 3.12+: forking with threads (the progress timer) warns
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError:
            return None
        if pid == 0:  # the child: write, and leave without running the parent's exit handlers
            code = 1
            try:
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the parent's
                _drop_freed_memory()
                _write_entry(key, model, source, token)
                code = 0
            finally:
                os._exit(code)
        return _Child(pid)

    def join(self) -> None:
        deadline = time.monotonic() + _CHILD_LIMIT_S
        while not self._done:
            try:
                done, _ = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                done = self.pid
            if done or time.monotonic() > deadline:
                if not done:
                    with contextlib.suppress(OSError):
                        os.kill(self.pid, signal.SIGKILL)
                        os.waitpid(self.pid, 0)
                self._done = True
            else:
                time.sleep(0.005)


def _drop_freed_memory() -> None:
    """In the writer child: unmap, from this process only, the heap memory the parent had freed (glibc's
    ``malloc_trim``). The parent's analysis reuses that memory; while the child shared it, each page the
    parent wrote was first copied for it (on a 1M-event trace, tens of MB and ~0.05 s of the parent's
    time). Elsewhere, nothing."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


_CHILD_LIMIT_S = 600.0
_in_a_child = False
_pending: dict[str, _Writer] = {}
_pending_lock = threading.Lock()


def _store_now(key: str, model: TraceModel, source: Path | None, token: dict[str, int] | None) -> None:
    """The writer thread."""
    try:
        _write_entry(key, model, source, token)
    finally:
        with _pending_lock:
            if _pending.get(key) is threading.current_thread():
                del _pending[key]


def _write_entry(key: str, model: TraceModel, source: Path | None, token: dict[str, int] | None) -> None:
    root = cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        _remove_stale_temporaries(root)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    except OSError:
        return
    try:
        write_model(tmp, model)
        shutil.rmtree(root / key, ignore_errors=True)  # an unreadable entry: rename cannot replace it
        os.replace(tmp, root / key)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return
    prune()
    if source is not None and token is not None:
        remember_key(source, key, token)


def _remove_stale_temporaries(root: Path, older_than_s: float = 3600.0) -> None:
    """Half-written entries left by an interrupted process (Ctrl-C during a write)."""
    now = time.time()
    for tmp in root.glob(".tmp-*"):
        with contextlib.suppress(OSError):
            if now - tmp.stat().st_mtime > older_than_s:
                shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink()


def _meta_of(model: TraceModel) -> dict[str, Any]:
    return {
        "format": model.format,
        "strings": list(model.strings),
        "lanes": [asdict(lane) for lane in model.lanes],
        "devices": [asdict(d) for d in model.devices],
        "steps": [asdict(s) for s in model.steps],
        "rank": model.rank,
        "world_size": model.world_size,
        "display_time_unit": model.display_time_unit,
        "base_time_ns": model.base_time_ns,
        "report": asdict(model.report),
        "counters": {  # small: counters are few next to events (model.json stays a few MB at most)
            "series": [asdict(s) for s in model.counters.series],
            "sample_series": model.counters.sample_series.tolist(),
            "ts": model.counters.ts.tolist(),
            "value": model.counters.value.tolist(),
        },
    }


def _arrow_modules() -> tuple[Any, Any]:
    """pyarrow and pyarrow.parquet, imported when a model is first written or read (0.3 s of imports that
    a first ``analyze`` then spends in the cache writer's thread, beside the analysis)."""
    import pyarrow
    import pyarrow.parquet

    return pyarrow, pyarrow.parquet


def _arrow(values: npt.NDArray[Any]) -> pa.Array:
    """Zero-copy Arrow view of a numpy column (``pa.array`` would import pandas, in a background thread)."""
    pa, _ = _arrow_modules()
    contiguous = np.ascontiguousarray(values)
    arrow_type = {"float64": pa.float64(), "int64": pa.int64(), "int32": pa.int32(), "int8": pa.int8()}
    return pa.Array.from_buffers(
        arrow_type[str(contiguous.dtype)], len(contiguous), [None, pa.py_buffer(contiguous)]
    )


def _numpy(column: pa.ChunkedArray) -> npt.NDArray[Any]:
    """Zero-copy view of a null-free numeric column (``to_numpy`` would import pandas: +1 s)."""
    array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if array.null_count:
        raise ValueError("cached column has nulls")
    dtype = np.dtype("float64" if str(array.type) == "double" else str(array.type))
    out = np.frombuffer(
        array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize
    )
    return out


def _model_from(meta: dict[str, Any], table: pa.Table, path: str) -> TraceModel:
    columns = {
        f.name: _numpy(table.column(f.name))
        for f in fields(EventTable)
        if f.name not in _ADDED_COLUMNS or f.name in table.column_names
    }
    for name, dtype in _ADDED_COLUMNS.items():  # a model stored before the column existed (dashboard store)
        columns.setdefault(name, np.full(table.num_rows, -1, dtype=dtype))
    events = EventTable(**columns)
    report = dict(meta["report"])
    report["notes"] = tuple(report.get("notes", ()))
    report["unknown_keys"] = tuple(report.get("unknown_keys", ()))
    return TraceModel(
        path=path,
        format=meta["format"],
        events=events,
        strings=tuple(meta["strings"]),
        lanes=tuple(Lane(**{**d, "kind": LaneKind(d["kind"])}) for d in meta["lanes"]),
        devices=tuple(Device(**d) for d in meta["devices"]),
        steps=tuple(Step(**s) for s in meta["steps"]),
        rank=meta["rank"],
        world_size=meta["world_size"],
        display_time_unit=meta["display_time_unit"],
        base_time_ns=meta["base_time_ns"],
        report=LoadReport(**report),
        counters=_counters_from(meta.get("counters")),
    )


#: event columns added after the first stored models: absent from those, they read as "none" (-1)
_ADDED_COLUMNS = {"stack": np.int32}


def _counters_from(meta: dict[str, Any] | None) -> Counters:
    if meta is None:  # stored before counters were kept
        return Counters()
    return Counters(
        tuple(Series(**s) for s in meta["series"]),
        np.array(meta["sample_series"], dtype=np.int32),
        np.array(meta["ts"], dtype=np.float64),
        np.array(meta["value"], dtype=np.float64),
    )
