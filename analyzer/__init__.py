"""stallscope's analyzer: trace files -> trace model -> analysis. Pure: no torch, no plotting."""

from analyzer.errors import StallscopeError, TraceError, UsageError
from analyzer.loader import load
from analyzer.model import TraceModel, TraceSet

__all__ = ["StallscopeError", "TraceError", "TraceModel", "TraceSet", "UsageError", "load"]
