"""stallscope: who could have gone ahead, and who had to wait? Public API."""

from analyzer.analysis import Analysis, analyze
from analyzer.errors import StallscopeError, TraceError, UsageError
from analyzer.loader import load
from analyzer.output import to_json

__version__ = "0.1.0"

__all__ = [
    "Analysis",
    "StallscopeError",
    "TraceError",
    "UsageError",
    "__version__",
    "analyze",
    "load",
    "to_json",
]
