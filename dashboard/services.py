"""What the API routes and the pages share."""

from __future__ import annotations

from dataclasses import dataclass, field

from stallscope.dashboard.live import LiveAnalyses
from stallscope.dashboard.store import Store
from stallscope.dashboard.worker import AnalysisQueue


@dataclass(frozen=True)
class Services:
    """The store, the analysis queue (local processes or a Dask cluster; None: uploads wait until one is
    attached), the typed analyses the timeline needs, and the upload limit in bytes."""

    store: Store
    worker: AnalysisQueue | None
    max_upload_bytes: int
    live: LiveAnalyses = field(init=False)

    def __post_init__(self) -> None:
        limit = self.worker.limits.max_inflated_mb if self.worker is not None else None
        object.__setattr__(self, "live", LiveAnalyses(self.store, limit))
