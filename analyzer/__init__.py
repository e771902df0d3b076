"""stallscope's analyzer: trace files -> trace model -> analysis. Pure: no torch, no plotting.

The package's names are imported on first use (PEP 562), so importing one light module
(``analyzer.errors``) does not pull in numpy and pyarrow."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from analyzer.errors import StallscopeError, TraceError, UsageError
    from analyzer.loader import load
    from analyzer.model import TraceModel, TraceSet

_HOMES = {
    "StallscopeError": "analyzer.errors",
    "TraceError": "analyzer.errors",
    "UsageError": "analyzer.errors",
    "load": "analyzer.loader",
    "TraceModel": "analyzer.model",
    "TraceSet": "analyzer.model",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:  # a submodule not imported yet (``from analyzer import cache`` imports it itself)
        raise AttributeError(f"module 'analyzer' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = ["StallscopeError", "TraceError", "TraceModel", "TraceSet", "UsageError", "load"]
