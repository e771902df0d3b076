"""stallscope: who could have gone ahead, and who had to wait? Public API."""

from analyzer.analysis import Analysis, analyze
from analyzer.errors import StallscopeError, TraceError, UsageError
from analyzer.loader import load
from analyzer.output import to_json
from stallscope.api import Profile, profile, profiled, step  # no torch until a session starts

__version__ = "0.1.0"

__all__ = [
    "Analysis",
    "Profile",
    "StallscopeError",
    "TraceError",
    "UsageError",
    "__version__",
    "analyze",
    "load",
    "profile",
    "profiled",
    "step",
    "to_json",
]
