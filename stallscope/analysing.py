"""Load a trace and analyse one of its ranks, as ``analyze``, ``check`` and ``report`` all do."""

from __future__ import annotations

from analyzer.analysis import Analysis, analyze
from analyzer.errors import UsageError
from analyzer.loader import load
from stallscope.progress import Progress


def load_and_analyse(
    trace: str, rank: int | None, use_cache: bool, progress: Progress | None = None
) -> Analysis:
    """Load ``trace`` (file, rank folder or bundle) and analyse ``rank`` (default: the lowest). A rank
    the trace does not have is a ``UsageError`` naming the ranks it has. Progress stages go to
    ``progress``; the caller ends it (``progress.done()``) and waits for the model cache (``cache.wait()``).
    Imported by the commands when they run: it imports the analyzer."""
    traces = load(trace, use_cache=use_cache, progress=progress)
    if rank is not None and rank not in traces.ranks:
        raise UsageError(f"--rank {rank}: {trace} has ranks {', '.join(map(str, traces.ranks))}")
    if progress is not None:
        progress("analysing")
    return analyze(traces, rank)
