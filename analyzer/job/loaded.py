"""A rank set already loaded in this process (the dashboard's upload of a rank folder): the chosen rank's
analysis, as ``stallscope.analyzer.analysis.analyze`` gives it, and the whole job, each rank analysed once."""

from __future__ import annotations

from dataclasses import replace

from stallscope.analyzer.analysis import Analysis, analyze, analyze_model
from stallscope.analyzer.core.model import TraceSet
from stallscope.analyzer.job.collectives import scan_args
from stallscope.analyzer.job.reduce import reduce_analysis
from stallscope.analyzer.job.result import JobAnalysis
from stallscope.analyzer.job.verdict import analyze_job


def analyse_set(traces: TraceSet, rank: int | None = None) -> tuple[Analysis, JobAnalysis | None]:
    """``analyze(traces, rank)`` and, for two or more ranks, the job: every rank is analysed once (the
    chosen one with the set's sidecar) and reduced; ``per_rank`` comes from the same analyses."""
    if len(traces.models) < 2:
        return analyze(traces, rank), None
    chosen = traces.for_rank(rank)
    result = analyze_model(chosen, None, traces.sidecar)
    tables = [
        reduce_analysis(result if m is chosen else analyze_model(m), scan_args(m.path), rank=r)
        for m, r in zip(traces.models, traces.ranks, strict=True)
    ]
    per_rank = {t.rank: t.summary for t in tables}
    result = replace(result, ranks=tuple(traces.ranks), per_rank=per_rank, notes=traces.notes + result.notes)
    return result, analyze_job(tables)
