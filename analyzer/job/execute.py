"""Run the per-rank reductions: one after another in this process, or in parallel on Dask.

``--workers N`` starts a ``dask.distributed`` LocalCluster of N worker processes bound to 127.0.0.1;
``--scheduler ADDRESS`` submits to an existing cluster (its workers need stallscope installed and the
files at the same paths). One rank's failure, even a crashed worker, is that rank's ``RankFailure``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stallscope.analyzer.core.errors import UsageError
from stallscope.analyzer.job.reduce import reduce_file
from stallscope.analyzer.job.tables import RankFailure, RankTable

Say = Callable[[str], None]
_CONNECT_TIMEOUT_S = 10


@dataclass(frozen=True)
class Execution:
    """Where the ranks are analysed: ``workers`` processes on a local cluster (None: in this process,
    one after another) or the cluster at ``scheduler``."""

    workers: int | None = None
    scheduler: str | None = None
    use_cache: bool = True

    @property
    def distributed(self) -> bool:
        return self.scheduler is not None or (self.workers is not None and self.workers > 1)


def default_workers() -> int:
    return max(os.cpu_count() or 1, 1)


def reduce_all(
    files: list[Path], how: Execution, say: Say | None = None
) -> tuple[list[RankTable], list[RankFailure]]:
    """Every file's table, or its failure; progress as "ranks analysed k/n"."""
    tell = say or (lambda _m: None)
    paths = [str(f.resolve()) for f in files]
    results: list[RankTable | RankFailure] = []
    if not how.distributed:
        for p in paths:
            try:
                results.append(reduce_file(p, how.use_cache))
            except Exception as exc:  # a bug on one rank: that rank's error, as on a worker
                results.append(RankFailure(p, _failed(p, exc)))
            tell(f"ranks analysed {len(results)}/{len(paths)}")
    else:
        with _client(how) as client:
            results = _on_dask(client, paths, how.use_cache, tell)
    tables = [r for r in results if isinstance(r, RankTable)]
    failures = [r for r in results if isinstance(r, RankFailure)]
    return tables, sorted(failures, key=lambda f: f.path)


def _on_dask(client: Any, paths: list[str], use_cache: bool, tell: Say) -> list[RankTable | RankFailure]:
    from dask.distributed import as_completed

    futures = client.map(reduce_file, paths, use_cache=use_cache, pure=False)
    path_of = {f.key: p for f, p in zip(futures, paths, strict=True)}
    out: list[RankTable | RankFailure] = []
    for fut in as_completed(futures):  # type: ignore[no-untyped-call]
        try:
            out.append(fut.result())
        except Exception as exc:  # a worker that died or a bug on one rank: that rank's error only
            p = path_of[fut.key]
            out.append(RankFailure(p, _failed(p, exc)))
        tell(f"ranks analysed {len(out)}/{len(paths)}")
    return out


def _failed(path: str, exc: BaseException) -> str:
    return f"{path}: analysis failed ({type(exc).__name__}: {exc})".splitlines()[0]


@contextmanager
def _client(how: Execution) -> Iterator[Any]:
    """A client of the named scheduler, or of a new local cluster on 127.0.0.1 (closed afterwards)."""
    from dask.distributed import Client, LocalCluster

    if how.scheduler is not None:
        try:
            client = Client(how.scheduler, timeout=_CONNECT_TIMEOUT_S)  # type: ignore[no-untyped-call]
        except (OSError, TimeoutError) as exc:
            raise UsageError(f"--scheduler {how.scheduler}: cannot connect ({exc})") from None
        with client:
            yield client
        return
    cluster = LocalCluster(  # type: ignore[no-untyped-call]
        n_workers=how.workers or default_workers(),
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,  # no dashboard; its HTTP endpoints on a free loopback port, not 8787
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
        silence_logs=logging.ERROR,
    )
    with cluster, Client(cluster) as client:  # type: ignore[no-untyped-call]
        yield client
