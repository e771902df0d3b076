"""Find, read and decode traces: a ``.json``/``.json.gz`` file, a folder of rank files
(``tensorboard_trace_handler`` output) or a stallscope bundle. Returns one model per rank."""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Callable, Hashable
from pathlib import Path

from stallscope.analyzer.core.errors import TraceError
from stallscope.analyzer.core.model import TraceModel, TraceSet
from stallscope.analyzer.load import cache
from stallscope.analyzer.load.build import build_model
from stallscope.analyzer.load.decode_pool import (
    Pieces,
    WorkerLost,
    default_workers,
    parts_in_order,
    start_early,
    stop_early,
)
from stallscope.analyzer.load.raw import BATCH_BYTES, TOO_DEEP, decode
from stallscope.analyzer.load.sidecar import embedded_sidecar, read_sidecar
from stallscope.analyzer.load.stream import (
    Blanks,
    NotStreamable,
    OnlyWhitespace,
    TooDeep,
    TooLarge,
    blocks,
    check_depth,
    stream_document,
    stream_pieces,
)

Progress = Callable[[str], None]
_GZIP_MAGIC = b"\x1f\x8b"
_NOT_TRACES = {"sidecar.json", "analysis.json"}
MAX_INFLATED_MB = 4096  # default limit on a trace file's JSON, inflated: a few MB of gzip can hold GBs
#: events allowed per byte of that limit: a real event takes 200-400 bytes of JSON and about as much
#: memory once loaded; an 80-million-event file of 25-byte events would need 24 GB
EVENT_BYTES = 150


def load(
    path: str | Path,
    *,
    use_cache: bool = True,
    progress: Progress | None = None,
    max_inflated_mb: float = MAX_INFLATED_MB,
    workers: int = 0,
) -> TraceSet:
    """Load every trace at ``path``. Raises ``TraceError`` (one line, names the file) when nothing usable
    is there; a folder with some bad files loads the rest and says what it skipped in ``notes``. A file
    whose JSON (inflated, for gzip) exceeds ``max_inflated_mb`` is refused without inflating it whole.
    ``workers``: processes that help decode each large file (``load_file``)."""
    p = Path(path)
    if not p.exists():
        raise TraceError(str(path), "no such file or directory")
    limit = int(max_inflated_mb * 1e6)
    if p.is_dir():
        return _load_folder(p, use_cache, progress, limit, workers)
    try:
        model = load_file(p, use_cache=use_cache, progress=progress, limit=limit, workers=workers)
    finally:
        stop_early()  # workers ``start_decoding`` started that the parse did not take (a cached model)
    sidecar, problem = embedded_sidecar(p)
    return TraceSet(str(path), (model,), (problem,) if problem else (), sidecar)


def trace_files(folder: Path) -> list[Path]:
    """Trace files directly inside ``folder`` (``*.pt.trace.json[.gz]`` first, else any ``*.json[.gz]``);
    when there are none, those of its subfolders one level down (``tensorboard_trace_handler`` output kept
    in a folder per run or per worker), in path order."""
    files = _files_in(folder)
    if files:
        return files
    subfolders = sorted(d for d in _entries(folder) if d.is_dir())
    nested = [f for d in subfolders for f in _files_in(d)]
    kineto = [f for f in nested if ".pt.trace.json" in f.name]
    return kineto or nested


def _entries(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError as exc:
        raise TraceError(str(folder), f"cannot read ({exc.strerror or exc})") from None


def _files_in(folder: Path) -> list[Path]:
    files = sorted(f for f in _entries(folder) if f.is_file() and f.name.endswith((".json", ".json.gz")))
    files = [f for f in files if f.name not in _NOT_TRACES]
    kineto = [f for f in files if ".pt.trace.json" in f.name]
    return kineto or files


def _load_folder(
    folder: Path, use_cache: bool, progress: Progress | None, limit: int, workers: int
) -> TraceSet:
    files = trace_files(folder)
    if not files:
        raise TraceError(str(folder), _no_trace_files(folder))
    models: list[TraceModel] = []
    notes: list[str] = []
    errors: list[TraceError] = []
    for f in files:
        try:
            models.append(load_file(f, use_cache=use_cache, progress=progress, limit=limit, workers=workers))
        except TraceError as exc:
            errors.append(exc)
            notes.append(f"skipped {exc}")
    if not models:
        raise (
            errors[0]
            if len(errors) == 1
            else TraceError(str(folder), f"none of {len(files)} trace files loads ({errors[0]})")
        )
    sidecar, problem = read_sidecar(folder)
    if sidecar is None and problem is None and len(files) == 1:  # a trace that carries its sidecar
        sidecar, problem = embedded_sidecar(files[0])
    if problem:
        notes.append(problem)
    return TraceSet(str(folder), _one_per_rank(models, notes), tuple(notes), sidecar)


def _no_trace_files(folder: Path) -> str:
    return bundle_without_trace(folder) or "directory contains no trace files (*.json, *.json.gz)"


def bundle_without_trace(folder: Path) -> str | None:
    """For a stallscope bundle that holds no trace (only its ``sidecar.json``): one line saying why, from
    the sidecar; None for any other folder."""
    if not folder.is_dir() or trace_files(folder):
        return None
    sidecar, _problem = read_sidecar(folder)
    if sidecar is None:
        return None
    why = sidecar.run.get("no_trace")
    if not isinstance(why, str) or not why.strip():
        why = "its sidecar.json does not say why"
    return f"a stallscope bundle without a trace: {' '.join(why.split())[:300]}"


def _one_per_rank(models: list[TraceModel], notes: list[str]) -> tuple[TraceModel, ...]:
    """Ranks come only from ``distributedInfo``. When a rank has several files (a profiler schedule that
    repeated), the newest by name wins and the rest are noted. Files without ``distributedInfo`` are
    separate runs, not ranks: with ranked files they are left out; without any, the first is analysed.
    Either way a note names the runs left out."""
    by_rank: dict[int, TraceModel] = {}
    unranked = [m for m in models if m.rank is None]
    for m in sorted((m for m in models if m.rank is not None), key=lambda m: _file_order(m.path)):
        assert m.rank is not None
        if m.rank in by_rank:
            notes.append(
                f"rank {m.rank}: using {Path(m.path).name}, ignoring older {Path(by_rank[m.rank].path).name}"
            )
        by_rank[m.rank] = m
    if not by_rank:
        first, *unranked = unranked
        by_rank[0] = first
        used = f"analysed {_shown(first.path)}"
    else:
        used = f"analysed the {len(by_rank)} ranked file{'s' if len(by_rank) > 1 else ''}"
    if unranked:
        names = ", ".join(_shown(m.path) for m in unranked[:5]) + (", ..." if len(unranked) > 5 else "")
        notes.append(
            f"{len(unranked)} more trace file{'s' if len(unranked) > 1 else ''} without distributedInfo "
            f"{'are separate runs' if len(unranked) > 1 else 'is a separate run'}, not ranks, and "
            f"{'were' if len(unranked) > 1 else 'was'} not analysed ({used}): {names}"
        )
    return tuple(by_rank[r] for r in sorted(by_rank))


def _shown(path: str) -> str:
    """A file's name with its subfolder (runs kept one level down are told apart by their folder)."""
    p = Path(path)
    return f"{p.parent.name}/{p.name}" if p.parent.name else p.name


def _file_order(path: str) -> tuple[int, str]:
    stamp = re.findall(r"\.([0-9]{10,18})\.", Path(path).name)
    return (int(stamp[-1]) if stamp else 0, path)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TraceError(str(path), f"cannot read ({exc.strerror or exc})") from None


def read_json_bytes(path: Path, max_inflated_mb: float = MAX_INFLATED_MB) -> bytes:
    """The file's JSON text, gunzipped when it is gzip; ``TraceError`` when it cannot be read."""
    return _json_bytes(_read(path), path, int(max_inflated_mb * (1 << 20)))


def _json_bytes(data: bytes, path: Path, limit: int) -> bytes:
    """The file's JSON bytes, gunzipped when it is gzip (by content, not by name), at most ``limit``."""
    if data[:2] != _GZIP_MAGIC:
        if path.name.endswith(".gz") and data:
            raise TraceError(str(path), "not a valid gzip file (no gzip header)")
        if len(data) > limit:
            raise _too_large(path, limit)
        return data
    out = bytearray()
    blanks = Blanks()  # GBs of whitespace between tokens (a few MB of gzip) are squeezed, never held
    inflated = 0
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            while inflated <= limit and (block := f.read(1 << 20)):  # inflated and counted as it goes
                inflated += len(block)
                blanks.add(out, block)
    except EOFError:
        raise TraceError(str(path), "truncated gzip file (compressed stream ends early)") from None
    except (OSError, zlib.error) as exc:
        raise TraceError(str(path), f"not a valid gzip file ({exc})") from None
    if inflated > limit:
        raise _too_large(path, limit)
    return bytes(out)


def _too_large(path: Path, limit: int) -> TraceError:
    return TraceError(
        str(path), f"holds more than {limit / 1e6:,.0f} MB of JSON once inflated (--max-inflated-mb)"
    )


def load_file(
    path: Path,
    *,
    use_cache: bool = True,
    progress: Progress | None = None,
    limit: int = int(MAX_INFLATED_MB * 1e6),
    workers: int = 0,
) -> TraceModel:
    """One trace file -> model, from the cache when the same content was built before. ``workers``:
    processes that help decode a large file (``stallscope.analyzer.load.decode_pool``; the command line uses one where
    there is a second core)."""
    say = progress or (lambda _msg: None)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise TraceError(str(path), f"cannot read ({exc.strerror or exc})") from None
    key = None
    token = cache.stat_token(path)  # before reading: a file changed meanwhile must not get this key
    if use_cache:
        key = cache.known_key(path) or cache.hash_file(path)
        cached = cache.load_cached(key, str(path))
        if cached is not None:
            cache.remember_key(path, key, token)
            return cached
    say(f"reading {path.name} ({size / 1e6:.1f} MB)")
    fmt = _format(path)
    streamed = _streamed(path, size)
    model = _build_streaming(path, fmt, say, limit, _workers_for(fmt, size, workers)) if streamed else None
    if model is None:
        if size > limit:  # not even compressed could it fit
            raise _too_large(path, limit)
        if streamed:  # the stream gave up: before the document is held whole, its depth is read as it streams
            _check_depth(path, limit)
        data = _json_bytes(_read(path), path, limit)
        doc = decode(data, str(path))
        del data  # the event slices keep it alive only until the last batch is decoded
        model = build_model(doc, str(path), fmt, say, limit // EVENT_BYTES)
    if key is not None:
        say("writing the cache")
        cache.store(key, model, path, token)
    return model


def _check_depth(path: Path, limit: int) -> None:
    """Refuse a nesting bomb (or a file past ``limit``) in bounded memory; any other trouble is left to
    the whole decode, which words it precisely."""
    try:
        check_depth(blocks(path, _is_gzip(path), limit))
    except TooDeep:
        raise TraceError(str(path), TOO_DEEP) from None
    except TooLarge:
        raise _too_large(path, limit) from None
    except (NotStreamable, OSError, EOFError, zlib.error, ValueError):
        pass


def start_decoding(
    path: str | Path,
    *,
    use_cache: bool = True,
    max_inflated_mb: float = MAX_INFLATED_MB,
    workers: int | None = None,
) -> None:
    """Start the decode workers of ``load(path, ...)`` (same arguments; ``workers``: by default the
    command line's, ``decode_pool.default_workers``) now, where it will parse a file with them (a large
    file, not in the model cache): they take its first pieces while the caller prepares
    (``decode_pool.start_early``). ``load`` stops them if its parse does not take them."""
    path, limit = Path(path), int(max_inflated_mb * 1e6)
    workers = default_workers() if workers is None else workers
    try:
        size = path.stat().st_size
        if not path.is_file() or not _streamed(path, size) or _workers_for(_format(path), size, workers) < 1:
            return
        if use_cache:
            known = cache.known_key(path)
            if known is not None and (cache.cache_root() / known).is_dir():
                return
        gzipped = _is_gzip(path)
    except OSError:
        return
    key, make = _rereading(path, gzipped, limit)
    start_early(key, workers, make)


def _rereading(path: Path, gzipped: bool, limit: int) -> tuple[Hashable, Callable[[], Pieces]]:
    """What decode workers are told of a file: the key its parse is known by (``start_decoding`` and the
    parse must agree on it), and how to read it again, cut as this process cuts it."""
    return (str(path), gzipped, limit), lambda: stream_pieces(blocks(path, gzipped, limit))[1]


def _format(path: Path) -> str:
    return "json.gz" if path.name.endswith(".gz") else "json"


def _streamed(path: Path, size: int) -> bool:
    """Is the file parsed as a stream of pieces (else whole)?"""
    return size >= _STREAM_MIN_BYTES or (size >= _STREAM_MIN_GZIP_BYTES and _is_gzip(path))


def _workers_for(fmt: str, size: int, workers: int) -> int:
    """Decode workers for a file of ``size`` bytes: none for one batch or two (they would not pay for their
    start)."""
    return 0 if size < (_WORKER_MIN_GZIP_BYTES if fmt == "json.gz" else _WORKER_MIN_BYTES) else workers


_STREAM_MIN_BYTES = 1 << 20
_STREAM_MIN_GZIP_BYTES = 64 << 10  # smaller gzip files inflate to at most ~64 MB (deflate's ratio ~1000)
_WORKER_MIN_BYTES = (
    3 * BATCH_BYTES
)  # files from which decode workers help (``stallscope.analyzer.load.decode_pool``)
_WORKER_MIN_GZIP_BYTES = _WORKER_MIN_BYTES // 8  # trace JSON deflates about 8-12 times


def _is_gzip(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(2) == _GZIP_MAGIC
    except OSError:
        return False


def _build_streaming(path: Path, fmt: str, say: Progress, limit: int, workers: int) -> TraceModel | None:
    """Build from a streamed decode; None when the file is not laid out for streaming (then the caller
    decodes it whole, which also gives the precise error for a broken file). Refuses a file past
    ``limit`` bytes of JSON, one of whitespace only, and one nested too deeply, as it streams (bounded
    memory)."""
    gzipped = _is_gzip(path)
    try:
        if workers < 1:
            doc = stream_document(blocks(path, gzipped, limit))
            return build_model(doc, str(path), fmt, say, limit // EVENT_BYTES)
        doc, pieces = stream_pieces(blocks(path, gzipped, limit))
        key, make = _rereading(path, gzipped, limit)
        parts = parts_in_order(pieces, workers, make, key=key)
        try:
            return build_model(doc, str(path), fmt, say, limit // EVENT_BYTES, parts)
        except WorkerLost:
            return _build_streaming(path, fmt, say, limit, 0)
    except TooLarge:
        raise _too_large(path, limit) from None
    except OnlyWhitespace:
        raise TraceError(str(path), "empty file (only whitespace)") from None
    except TooDeep:  # refused as it streams: the whole decode would hold the document first
        raise TraceError(str(path), TOO_DEEP) from None
    except (NotStreamable, OSError, EOFError, zlib.error, ValueError, RecursionError):
        return None  # ValueError: a decoder's surprise (bad UTF-8, number out of range...)
