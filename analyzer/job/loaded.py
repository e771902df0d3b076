"""The job of a rank set already loaded in this process (the dashboard's upload of a rank folder)."""

from __future__ import annotations

from analyzer.analysis import Analysis, analyze_model
from analyzer.job.collectives import scan_args
from analyzer.job.reduce import reduce_analysis
from analyzer.job.result import JobAnalysis
from analyzer.job.verdict import analyze_job
from analyzer.model import TraceSet


def job_of_set(traces: TraceSet, chosen: Analysis) -> JobAnalysis | None:
    """None for a single rank; else every rank reduced (``chosen`` reused for its own rank, the others
    analysed here, one after another) and the job analysis."""
    if len(traces.models) < 2:
        return None
    tables = [
        reduce_analysis(chosen if m is chosen.model else analyze_model(m), scan_args(m.path), rank=r)
        for m, r in zip(traces.models, traces.ranks, strict=True)
    ]
    return analyze_job(tables)
