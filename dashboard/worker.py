"""Background analysis of uploaded traces, off the web server's process.

Each upload is analysed in a child process (one at a time: the machine's cores serve the pages meanwhile);
the child writes its progress and result into the store, which the pages poll. A failure of any kind
becomes the entry's one-line ``error``; a child that dies (out of memory, killed) fails its entry and the
next upload gets a fresh process. Entries left unfinished by a stopped server are queued again on start.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import threading
import time
from pathlib import Path

from analyzer.errors import StallscopeError
from dashboard.store import Store


def analyse_entry(root: str, trace_id: str) -> str:
    """Load, analyse and store one entry of the store at ``root``; returns its final status. Never raises
    for a bad trace: the error is recorded in the entry."""
    from analyzer.job.loaded import analyse_set
    from analyzer.job.output import job_json
    from analyzer.loader import load
    from analyzer.output import to_json

    store = Store(root)
    entry = store.get(trace_id)
    path = store.input_path(trace_id)
    say = _Throttled(store, trace_id)
    try:
        say("loading")
        traces = load(path, use_cache=False, progress=say)
        say("analysing" if len(traces.models) < 2 else f"analysing {len(traces.models)} ranks and the job")
        result, job = analyse_set(traces)
        doc = to_json(result)
        doc["source"]["path"] = entry.name  # never show the server's folders
        doc["job"] = job_json(job) if job else None
        for rank in doc["job"]["ranks"] if doc["job"] else ():
            rank["path"] = Path(rank["path"]).name
        say("saving")
        store.save_result(trace_id, result.model, doc)
    except StallscopeError as exc:
        store.fail(trace_id, str(exc).replace(str(path), entry.name))
    except MemoryError:
        store.fail(trace_id, "out of memory while analysing the trace")
    except Exception as exc:  # a bug must not leave the entry 'analysing' forever
        store.fail(trace_id, f"internal error: {type(exc).__name__}: {exc}".splitlines()[0])
    return store.get(trace_id).status.value


class _Throttled:
    """Progress messages into the catalog, at most a few writes a second."""

    def __init__(self, store: Store, trace_id: str) -> None:
        self._store, self._id, self._last = store, trace_id, 0.0

    def __call__(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last >= 0.25:
            self._last = now
            self._store.set_progress(self._id, message)


def _exit_with_parent(parent: int) -> None:
    """In the analysis process: exit when the dashboard is gone (killed without a chance to stop its
    pool), instead of lingering as an orphan."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="stallscope-parent-watch", daemon=True).start()


class Worker:
    """Queue of analyses. ``processes=False`` runs them in a thread of this process instead (simpler to
    debug; the page stays responsive but shares the interpreter)."""

    def __init__(self, store: Store, processes: bool = True) -> None:
        self.store = store
        self._processes = processes
        self._lock = threading.Lock()
        self._pool = self._new_pool()

    def _new_pool(self) -> cf.Executor:
        if self._processes:
            return cf.ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_exit_with_parent,
                initargs=(os.getpid(),),
            )
        return cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="stallscope-analysis")

    def submit(self, trace_id: str) -> cf.Future[str]:
        with self._lock:
            try:
                future = self._pool.submit(analyse_entry, str(self.store.root), trace_id)
            except (cf.BrokenExecutor, RuntimeError):  # a child died earlier: start a fresh pool
                self._pool.shutdown(wait=False)
                self._pool = self._new_pool()
                future = self._pool.submit(analyse_entry, str(self.store.root), trace_id)
        future.add_done_callback(lambda f: self._finished(trace_id, f))
        return future

    def _finished(self, trace_id: str, future: cf.Future[str]) -> None:
        exc = future.exception()
        if exc is not None:  # the child process itself failed (killed, out of memory)
            self.store.fail(trace_id, f"the analysis process stopped ({type(exc).__name__})")

    def resume(self) -> list[str]:
        """Queue every entry a previous server left pending or half analysed."""
        ids = self.store.unfinished()
        for trace_id in ids:
            self.submit(trace_id)
        return ids

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
