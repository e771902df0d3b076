"""Load and analyse what ``analyze`` was given: one rank as before, or a whole job (two or more rank
files) whose ranks are reduced in this process or on Dask, plus the chosen rank's full analysis."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from stallscope.analysing import load_and_analyse
from stallscope.analyzer.analysis import Analysis, analyze_model
from stallscope.analyzer.core.errors import StallscopeError, TraceError, UsageError
from stallscope.analyzer.job.discover import job_files
from stallscope.analyzer.job.execute import Execution, reduce_all
from stallscope.analyzer.job.result import JobAnalysis
from stallscope.analyzer.job.verdict import analyze_job, dedupe
from stallscope.analyzer.load.loader import bundle_without_trace, load_file
from stallscope.progress import Progress
from stallscope.watchdog import MAX_INFLATED_MB

#: ranks a job report draws a timeline of (each needs that rank's full analysis): the most late first
MAX_TIMELINE_RANKS = 8


def load_and_analyse_job(
    inputs: list[str],
    rank: int | None,
    how: Execution,
    progress: Progress | None = None,
    time_limit_s: float | None = None,
    max_inflated_mb: float = MAX_INFLATED_MB,
) -> tuple[Analysis, JobAnalysis | None]:
    """A single rank (one file or bundle): today's analysis and no job. Two or more rank files: every
    rank reduced (``how``), the job analysis, and the full analysis of ``rank`` (default: the lowest)
    whose ``per_rank`` holds every rank's summary."""
    try:
        files = job_files(inputs)
    except TraceError:  # a stallscope bundle without a trace says why
        why = bundle_without_trace(Path(inputs[0])) if len(inputs) == 1 else None
        if why is None:
            raise
        raise TraceError(inputs[0], why) from None
    if len(files) < 2:
        one = inputs[0] if len(inputs) == 1 else str(files[0])
        return load_and_analyse(one, rank, how.use_cache, progress, time_limit_s, max_inflated_mb), None
    say = progress or (lambda _m: None)
    say(f"ranks analysed 0/{len(files)}")
    tables, failures = reduce_all(files, how, say)
    tables, notes = dedupe(tables)
    if not tables:
        if len(failures) == 1:
            raise StallscopeError(failures[0].error)
        raise TraceError(" ".join(inputs), f"none of {len(files)} trace files loads ({failures[0].error})")
    if len(tables) == 1 and not failures:  # one rank (or one run) left: not a job
        (only,) = tables
        single = load_and_analyse(only.path, rank, how.use_cache, progress, time_limit_s, max_inflated_mb)
        return replace(single, notes=tuple(notes) + single.notes), None
    chosen = (
        min(tables, key=lambda t: t.rank)
        if rank is None
        else next((t for t in tables if t.rank == rank), None)
    )
    if chosen is None:
        have = ", ".join(str(t.rank) for t in sorted(tables, key=lambda t: t.rank))
        raise UsageError(f"--rank {rank}: {' '.join(inputs)} has ranks {have}")
    say(f"analysing rank {chosen.rank}")
    result = analyze_model(load_file(Path(chosen.path), use_cache=how.use_cache))
    skipped = tuple(f"skipped {f.error}" for f in failures)
    job = analyze_job(tables, failures, tuple(notes))
    result = replace(
        result,
        model=replace(result.model, rank=chosen.rank),
        ranks=job.ranks,
        per_rank={t.rank: (result.summary if t is chosen else t.summary) for t in tables},
        notes=skipped + tuple(notes) + result.notes,
    )
    return result, job


def timeline_ranks(
    job: JobAnalysis,
    chosen: Analysis,
    how: Execution,
    progress: Progress | None = None,
    limit: int = MAX_TIMELINE_RANKS,
) -> dict[int, Analysis]:
    """The full analyses a job report draws timelines from: ``chosen`` and up to ``limit`` ranks in all,
    those that made the others wait most first (the straggler's timeline is the one a reader wants),
    then by rank. A rank file that no longer loads is left out (its table row says how to report it)."""
    say = progress or (lambda _m: None)
    late = {s.rank: s.late_us for s in job.rank_stats}
    paths = {t.rank: t.path for t in job.tables}
    mine = chosen.model.rank
    order = sorted(paths, key=lambda r: (r != mine, -late.get(r, 0.0), r))[:limit]
    out: dict[int, Analysis] = {}
    for r in order:
        if r == mine:
            out[r] = chosen
            continue
        say(f"analysing rank {r} for its timeline")
        try:
            out[r] = analyze_model(load_file(Path(paths[r]), use_cache=how.use_cache))
        except StallscopeError:
            continue
    return out
