"""Background analysis of uploaded traces, off the web server's process.

Uploads wait in a queue; one dispatcher thread hands them, one at a time, to a child process (the
machine's cores serve the pages meanwhile). The child writes its progress and result into the store,
which the pages poll. A failure of any kind becomes the entry's one-line ``error``.

Each analysis runs under limits (``Limits``): the inflated size of the trace, an address-space limit on
the child (a trace that needs more fails with "out of memory"), and a time limit: inside the child the
``Watchdog`` stops a pass that runs too long with a message naming it; should the child not answer by
the limit and a grace period, the dispatcher kills it. Since only one entry is ever in a child, a child
that dies or hangs (out of memory, killed, stuck in native code) fails that entry alone; the entries
queued behind it go to a fresh process. Entries left unfinished by a stopped server are queued again on
start.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import contextlib
import multiprocessing
import os
import resource
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stallscope.analyzer.core.errors import StallscopeError
from stallscope.dashboard.store import Store

KILL_GRACE_S = 30.0  # past the time limit, the child has this long to report before it is killed


@dataclass(frozen=True)
class Limits:
    """Per-analysis limits. ``time_s`` None: what the trace's size warrants (``watchdog.budget_s``)."""

    max_inflated_mb: float = 4096.0
    memory_mb: int = 16384
    time_s: float | None = None


def analyse_entry(root: str, trace_id: str, limits: Limits | None = None) -> str:
    """Load, analyse and store one entry of the store at ``root``; returns its final status. Never raises
    for a bad trace: the error is recorded in the entry."""
    from stallscope.analyzer.document.analysis import to_json
    from stallscope.analyzer.document.job import job_json
    from stallscope.analyzer.job.loaded import analyse_set
    from stallscope.analyzer.load.loader import load
    from stallscope.watchdog import Watchdog, budget_s

    limits = limits or Limits()
    store = Store(root)
    entry = store.get(trace_id)
    path = store.input_path(trace_id)
    say = _Throttled(store, trace_id)
    try:
        with Watchdog(str(path), budget_s(path) if limits.time_s is None else limits.time_s) as dog:
            dog.stage("loading")
            say("loading")
            traces = load(
                path, use_cache=False, progress=_Both(dog, say), max_inflated_mb=limits.max_inflated_mb
            )
            dog.stage("analysing")
            say(
                "analysing" if len(traces.models) < 2 else f"analysing {len(traces.models)} ranks and the job"
            )
            result, job = analyse_set(traces)
        doc = to_json(result)
        doc["source"]["path"] = entry.name  # never show the server's folders
        doc["job"] = job_json(job) if job else None
        for rank in doc["job"]["ranks"] if doc["job"] else ():
            rank["path"] = Path(rank["path"]).name
        say("saving")
        store.save_result(trace_id, result.model, doc)
    except StallscopeError as exc:
        store.fail(trace_id, str(exc).replace(str(path), entry.name).replace(" (--time-limit S", " ("))
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


class _Both:
    """One progress callback feeding several (the watchdog's stage and the catalog)."""

    def __init__(self, *sinks: Callable[[str], None]) -> None:
        self._sinks = sinks

    def __call__(self, message: str) -> None:
        for sink in self._sinks:
            sink(message)


def _child_setup(parent: int, memory_mb: int) -> None:
    """In the analysis process: an address-space limit, and exit when the dashboard is gone (killed
    without a chance to stop its pool) instead of lingering as an orphan."""
    limit = memory_mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="stallscope-parent-watch", daemon=True).start()


class Worker:
    """Queue of analyses, run one at a time. ``processes=False`` runs them in a thread of this process
    instead (simpler to debug; the page stays responsive but shares the interpreter, and a hang cannot
    be killed: only the watchdog stops it)."""

    def __init__(self, store: Store, processes: bool = True, limits: Limits | None = None) -> None:
        self.store = store
        self.limits = limits or Limits()
        self._processes = processes
        self._queue: collections.deque[tuple[str, cf.Future[str]]] = collections.deque()
        self._wake = threading.Condition()
        self._stopping = False
        self._pool = self._new_pool()
        self._thread = threading.Thread(target=self._dispatch, name="stallscope-analysis-queue", daemon=True)
        self._thread.start()

    def _new_pool(self) -> cf.Executor:
        if self._processes:
            return cf.ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_child_setup,
                initargs=(os.getpid(), self.limits.memory_mb),
            )
        return cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="stallscope-analysis")

    def submit(self, trace_id: str) -> cf.Future[str]:
        """Queue ``trace_id``; the future gives its final status (or the child's failure)."""
        done: cf.Future[str] = cf.Future()
        with self._wake:
            self._queue.append((trace_id, done))
            self._wake.notify()
        return done

    def _dispatch(self) -> None:
        while True:
            with self._wake:
                while not self._queue and not self._stopping:
                    self._wake.wait()
                if self._stopping:
                    return
                trace_id, done = self._queue.popleft()
            self._run_one(trace_id, done)

    def _run_one(self, trace_id: str, done: cf.Future[str]) -> None:
        try:
            future = self._pool.submit(analyse_entry, str(self.store.root), trace_id, self.limits)
        except (cf.BrokenExecutor, RuntimeError):  # a child died earlier, or we are stopping
            if self._stopping:
                done.cancel()
                return
            self._replace_pool()
            future = self._pool.submit(analyse_entry, str(self.store.root), trace_id, self.limits)
        timeout = self._time_limit(trace_id)
        try:
            status = future.result(timeout=timeout + KILL_GRACE_S if self._processes else None)
            self.store.fit(keep=(trace_id,))  # its result added to the store: older entries make room
            done.set_result(status)
        except cf.TimeoutError:
            self._replace_pool(kill=True)
            self._fail(trace_id, f"the analysis did not finish within {timeout:.0f} s and was stopped")
            done.set_exception(TimeoutError(trace_id))
        except Exception as exc:  # the child itself failed (killed, out of memory): only this entry
            self._replace_pool(kill=True)
            if not self._stopping:
                self._fail(trace_id, f"the analysis process stopped ({type(exc).__name__})")
            done.set_exception(exc)

    def _time_limit(self, trace_id: str) -> float:
        from stallscope.watchdog import budget_s

        if self.limits.time_s is not None:
            return self.limits.time_s
        try:
            return budget_s(self.store.input_path(trace_id))
        except StallscopeError:
            return budget_s("")

    def _fail(self, trace_id: str, error: str) -> None:
        with contextlib.suppress(StallscopeError):  # deleted meanwhile
            self.store.fail(trace_id, error)

    def _replace_pool(self, kill: bool = False) -> None:
        old = self._pool
        if kill:
            for process in list(getattr(old, "_processes", {}).values()):
                process.kill()
        old.shutdown(wait=False, cancel_futures=True)
        if not self._stopping:
            self._pool = self._new_pool()

    def resume(self) -> list[str]:
        """Queue every entry a previous server left pending or half analysed."""
        ids = self.store.unfinished()
        for trace_id in ids:
            self.submit(trace_id)
        return ids

    def shutdown(self) -> None:
        """Stop now: a running analysis is killed (its entry stays 'analysing' and is resumed on the next
        start); queued ones stay 'pending'."""
        with self._wake:
            self._stopping = True
            pending = list(self._queue)
            self._queue.clear()
            self._wake.notify()
        for _, done in pending:
            done.cancel()
        if self._processes:
            for process in list(getattr(self._pool, "_processes", {}).values()):
                process.kill()
        self._pool.shutdown(wait=not self._processes, cancel_futures=True)
        self._thread.join(timeout=10)
