"""Load a trace and analyse one of its ranks, as ``analyze``, ``check`` and ``report`` all do."""

from __future__ import annotations

from stallscope.allocator import collect_less, keep_freed_memory
from stallscope.analyzer.analysis import Analysis, analyze
from stallscope.analyzer.core.errors import UsageError
from stallscope.analyzer.load import cache
from stallscope.analyzer.load.decode_pool import default_workers
from stallscope.analyzer.load.loader import MAX_INFLATED_MB, load
from stallscope.progress import Progress
from stallscope.watchdog import Watchdog, budget_s


def load_and_analyse(
    trace: str,
    rank: int | None,
    use_cache: bool,
    progress: Progress | None = None,
    time_limit_s: float | None = None,
    max_inflated_mb: float = MAX_INFLATED_MB,
) -> Analysis:
    """Load ``trace`` (file, rank folder or bundle) and analyse ``rank`` (default: the lowest). A rank
    the trace does not have is a ``UsageError`` naming the ranks it has. Progress stages go to
    ``progress``; the caller ends it (``progress.done()``) and waits for the model cache (``cache.wait()``).
    Loading and analysing run under a ``Watchdog``: ``time_limit_s`` seconds (None: what the trace's size
    warrants, ``budget_s``; 0: no limit); a file beyond ``max_inflated_mb`` of JSON is refused. Imported by the commands when they run: it imports the analyzer."""
    limit = budget_s(trace) if time_limit_s is None else time_limit_s
    keep_freed_memory()  # a command that loads and exits: large blocks from the heap, kept once freed
    collect_less()
    with Watchdog(trace, limit) as dog:

        def say(message: str) -> None:
            dog.stage(message)
            if progress is not None:
                progress(message)

        dog.stage("loading")
        with cache.writes_in_a_child():  # the model cache written beside the analysis, not under its GIL
            traces = load(
                trace,
                use_cache=use_cache,
                progress=say,
                max_inflated_mb=max_inflated_mb,
                workers=default_workers(),
            )
        if rank is not None and rank not in traces.ranks:
            raise UsageError(f"--rank {rank}: {trace} has ranks {', '.join(map(str, traces.ranks))}")
        say("analysing")
        return analyze(traces, rank, stage=lambda name: say(f"analysing: {name}"))
