"""stallscope: who could have gone ahead, and who had to wait? Public API.

The names are imported on first use (PEP 562): ``import stallscope`` and the command line stay light,
and a command that is answered from the cache never imports the analyzer's numeric stack."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stallscope.analyzer.analysis import Analysis, analyze
    from stallscope.analyzer.core.errors import StallscopeError, TraceError, UsageError
    from stallscope.analyzer.document.analysis import to_json
    from stallscope.analyzer.load.loader import load
    from stallscope.api import Profile, profile, profiled, step

__version__ = "0.1.0"

#: public name -> the module that defines it
_HOMES = {
    "Analysis": "stallscope.analyzer.analysis",
    "analyze": "stallscope.analyzer.analysis",
    "StallscopeError": "stallscope.analyzer.core.errors",
    "TraceError": "stallscope.analyzer.core.errors",
    "UsageError": "stallscope.analyzer.core.errors",
    "load": "stallscope.analyzer.load.loader",
    "to_json": "stallscope.analyzer.document.analysis",
    "Profile": "stallscope.api",  # no torch until a session starts
    "profile": "stallscope.api",
    "profiled": "stallscope.api",
    "step": "stallscope.api",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'stallscope' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])


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
