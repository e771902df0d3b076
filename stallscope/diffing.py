"""One side of a comparison (``diff``, ``check --baseline``): a trace, folder or bundle analysed now, or an
analysis saved by ``analyze --json``. Either way the result is the analysis document (schema
``stallscope.analysis/3``), so both compare alike (``stallscope.analyzer.document.diff``)."""

from __future__ import annotations

import re
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import msgspec

from stallscope.analyzer.core.errors import TraceError, UsageError
from stallscope.analyzer.document.diff import Side, side_of
from stallscope.analyzer.load.loader import MAX_INFLATED_MB
from stallscope.progress import Progress

Doc = dict[str, Any]
_SAVED = re.compile(rb'\s*\{\s*"schema"\s*:\s*"stallscope\.')
_ALL = 1 << 30  # "every row" for the top tables of a trace analysed now


def is_saved_analysis(path: str) -> bool:
    """True when ``path`` is a JSON file that stallscope wrote (its first key is ``schema``), not a trace."""
    p = Path(path)
    if not p.is_file():
        return False
    try:
        with p.open("rb") as f:
            head = f.read(512)
    except OSError:
        return False
    return _SAVED.match(head) is not None


def load_doc(
    path: str,
    rank: int | None,
    use_cache: bool,
    progress: Progress | None = None,
    time_limit_s: float | None = None,
    max_inflated_mb: float = MAX_INFLATED_MB,
    full_tops: bool = True,
) -> tuple[Doc, bool]:
    """The analysis document of ``path`` and whether its top tables are cut (a saved analysis lists
    its 20 top rows; a trace analysed now lists every op and kernel when ``full_tops``, so a name absent
    there is absent). Bad input is a ``StallscopeError`` (one line naming the file)."""
    if is_saved_analysis(path):
        return _saved(_read_saved(path, max_inflated_mb), path, rank), True
    from stallscope.analysing import load_and_analyse
    from stallscope.analyzer.document.analysis import to_json
    from stallscope.analyzer.load import cache
    from stallscope.analyzer.passes.tops import top_tables

    try:
        a = load_and_analyse(path, rank, use_cache, progress, time_limit_s, max_inflated_mb)
    except TraceError:
        # not a trace: perhaps an analysis whose keys were reordered (the dashboard's API sorts them)
        doc = _saved_anywhere(path, max_inflated_mb)
        if doc is None:
            raise
        return _saved(doc, path, rank), True
    cache.wait()
    doc = to_json(replace(a, critical=None))  # a diff reads no path segments
    if not full_tops:
        return doc, True
    full = top_tables(a.model, a.window.start_us, a.window.end_us, _ALL)
    doc["tops"] = {"ops": [asdict(r) for r in full.ops], "kernels": [asdict(r) for r in full.kernels]}
    return doc, False


def load_side(
    path: str,
    rank: int | None,
    use_cache: bool,
    progress: Progress | None = None,
    time_limit_s: float | None = None,
    max_inflated_mb: float = MAX_INFLATED_MB,
) -> Side:
    doc, cut = load_doc(path, rank, use_cache, progress, time_limit_s, max_inflated_mb)
    return side_of(doc, path, tops_cut=cut)


def _saved(doc: Doc, path: str, rank: int | None) -> Doc:
    source = doc.get("source")
    saved_rank = source.get("rank") if isinstance(source, dict) else None
    if rank is not None and saved_rank != rank:
        raise UsageError(f"--rank {rank}: {path} is a saved analysis of rank {saved_rank}")
    return doc


def _saved_anywhere(path: str, max_inflated_mb: float) -> Doc | None:
    """``path`` as a stallscope analysis whatever its key order, or None when it is not one."""
    try:
        doc = _read_saved(path, max_inflated_mb)
    except TraceError:
        return None
    return doc if str(doc.get("schema", "")).startswith("stallscope.") else None


def _read_saved(path: str, max_inflated_mb: float) -> Doc:
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > max_inflated_mb * 1e6:
            raise TraceError(
                path, f"{size / 1e6:.0f} MB of JSON, more than --max-inflated-mb {max_inflated_mb:g}"
            )
        doc = msgspec.json.decode(p.read_bytes())
    except OSError as exc:
        raise TraceError(path, f"cannot read ({exc.strerror or exc})") from None
    except msgspec.DecodeError as exc:
        raise TraceError(path, f"a saved analysis that is not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise TraceError(path, "not a stallscope analysis")
    return doc
