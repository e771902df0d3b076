"""stallscope's analyzer: trace files -> trace model -> analysis. Pure: no torch, no plotting.

The package's names are imported on first use (PEP 562), so importing one light module
(``stallscope.analyzer.errors``) does not pull in numpy and pyarrow."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stallscope.analyzer.errors import StallscopeError, TraceError, UsageError
    from stallscope.analyzer.loader import load
    from stallscope.analyzer.model import TraceModel, TraceSet

_HOMES = {
    "StallscopeError": "stallscope.analyzer.errors",
    "TraceError": "stallscope.analyzer.errors",
    "UsageError": "stallscope.analyzer.errors",
    "load": "stallscope.analyzer.loader",
    "TraceModel": "stallscope.analyzer.model",
    "TraceSet": "stallscope.analyzer.model",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if (
        home is None
    ):  # a submodule not imported yet (``from stallscope.analyzer import cache`` imports it itself)
        raise AttributeError(f"module 'analyzer' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = ["StallscopeError", "TraceError", "TraceModel", "TraceSet", "UsageError", "load"]
