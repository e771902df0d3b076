"""Background analysis of uploaded traces, off the web server's process.

Uploads wait in a queue and are analysed in child processes (the web process serves the pages meanwhile).
The child writes its progress and result into the store, which the pages poll. A failure of any kind
becomes the entry's one-line ``error``.

Each analysis runs under limits (``Limits``): the inflated size of the trace, an address-space limit on
the child (a trace that needs more fails with "out of memory"), and a time limit: inside the child the
``Watchdog`` stops a pass that runs too long with a message naming it; should the child not answer by
the limit and a grace period, it is killed. Since only one entry is ever in a child, a child that dies
or hangs (out of memory, killed, stuck in native code) fails that entry alone; the entries queued behind
it go to a fresh process. Entries left unfinished by a stopped server are queued again on start.

Two ways to run them:

- ``Worker``: ``workers`` analyses side by side on this machine, each slot a dispatcher thread with its
  own child process (``--analysis-workers N``);
- ``ClusterWorker``: on an existing Dask cluster (``--scheduler ADDRESS``). A task gets the store's folder
  and the entry's id (``analyse_in_child``) and runs the analysis in a child process of the Dask worker,
  under the same limits; the Dask workers must therefore see the store's folder at the same path, and
  since the catalog is SQLite in WAL mode (which works across processes of one host only, not over a
  network filesystem) they must run on the dashboard's machine.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import contextlib
import dataclasses
import json
import multiprocessing
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stallscope.analyzer.core.errors import StallscopeError, UsageError
from stallscope.dashboard.store import Status, Store

KILL_GRACE_S = 30.0  # past the time limit, the child has this long to report before it is killed
CONNECT_TIMEOUT_S = 10.0  # to reach a Dask scheduler at start


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


def time_limit(store: Store, trace_id: str, limits: Limits) -> float:
    """Seconds the analysis of ``trace_id`` may take: ``limits.time_s``, else what its size warrants."""
    from stallscope.watchdog import budget_s

    if limits.time_s is not None:
        return limits.time_s
    try:
        return budget_s(store.input_path(trace_id))
    except StallscopeError:
        return budget_s("")


def _fail(store: Store, trace_id: str, error: str) -> None:
    with contextlib.suppress(StallscopeError):  # deleted meanwhile
        store.fail(trace_id, error)


def _fail_unsettled(store: Store, trace_id: str, error: str) -> None:
    """Fail the entry unless its analysis recorded an outcome (ready, or its own error) before it ended."""
    with contextlib.suppress(StallscopeError):
        if store.get(trace_id).status in (Status.PENDING, Status.ANALYSING):
            store.fail(trace_id, error)


_CHILD = "import sys; from stallscope.dashboard.worker import child_main; sys.exit(child_main(sys.argv[1:]))"


def analyse_in_child(root: str, trace_id: str, limits: Limits | None = None) -> str:
    """``analyse_entry`` in a new child process of this one, under ``limits`` (its address space, the
    watchdog, and a kill past the time limit and ``KILL_GRACE_S``); returns the entry's final status.
    This is the task a Dask worker runs (``ClusterWorker``): the child's death or hang fails the entry,
    never the Dask worker. The store at ``root`` must be visible here at the same path."""
    limits = limits or Limits()
    if not (Path(root) / "catalog.sqlite").is_file():  # never make an empty store where there is none
        raise StallscopeError(  # (its folder is not named: the message is shown on the entry's page)
            f"the dashboard's store is not visible on {socket.gethostname()}: the cluster's workers must"
            " run on the dashboard's machine"
        )
    store = Store(root)
    timeout = time_limit(store, trace_id, limits)
    command = [sys.executable, "-c", _CHILD, root, trace_id, json.dumps(dataclasses.asdict(limits))]
    try:  # the child's stderr goes to the Dask worker's log
        child = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            timeout=timeout + KILL_GRACE_S,
            check=False,
        )
    except subprocess.TimeoutExpired:  # run() has killed it
        _fail(store, trace_id, f"the analysis did not finish within {timeout:.0f} s and was stopped")
    else:
        if child.returncode != 0:
            why = _ended(child.returncode)
            _fail_unsettled(store, trace_id, f"the analysis process stopped ({why})")
    return store.get(trace_id).status.value


def _ended(code: int) -> str:
    """How a process that returned ``code`` ended, in words."""
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def child_main(argv: list[str]) -> int:
    """The child process of ``analyse_in_child``: ``ROOT TRACE_ID LIMITS_JSON``."""
    root, trace_id, limits_json = argv
    limits = Limits(**json.loads(limits_json))
    _child_setup(os.getppid(), limits.memory_mb)
    analyse_entry(root, trace_id, limits)
    return 0


class AnalysisQueue(ABC):
    """Where uploads are analysed. ``submit`` queues one (the future gives its final status, or the
    failure of what ran it); ``resume`` queues what a previous server left unfinished; ``shutdown``
    stops, leaving unfinished entries to be resumed on the next start."""

    def __init__(self, store: Store, limits: Limits | None) -> None:
        self.store = store
        self.limits = limits or Limits()

    @abstractmethod
    def submit(self, trace_id: str) -> cf.Future[str]: ...

    @abstractmethod
    def shutdown(self) -> None: ...

    def resume(self) -> list[str]:
        """Queue every entry a previous server left pending or half analysed."""
        ids = self.store.unfinished()
        for trace_id in ids:
            self.submit(trace_id)
        return ids


class Worker(AnalysisQueue):
    """Queue of analyses, ``workers`` at a time, each in a child process of its own: one dispatcher
    thread per slot hands the next queued entry to its slot's process, so a child that dies or hangs
    stops only its slot's entry (the slot gets a fresh process) while the others go on.
    ``processes=False`` runs them in threads of this process instead (simpler to debug; the page stays
    responsive but shares the interpreter, and a hang cannot be killed: only the watchdog stops it)."""

    def __init__(
        self, store: Store, processes: bool = True, limits: Limits | None = None, workers: int = 1
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be 1 or more, not {workers}")
        super().__init__(store, limits)
        self._processes = processes
        self._queue: collections.deque[tuple[str, cf.Future[str]]] = collections.deque()
        self._wake = threading.Condition()
        self._stopping = False
        self._pools = [self._new_pool() for _ in range(workers)]
        self._threads = [
            threading.Thread(
                target=self._dispatch, args=(slot,), name=f"stallscope-analysis-queue-{slot}", daemon=True
            )
            for slot in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def child_pids(self) -> list[int]:
        """The analysis processes now running (each slot's, once started)."""
        return [pid for pool in list(self._pools) for pid in list(getattr(pool, "_processes", None) or {})]

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

    def _dispatch(self, slot: int) -> None:
        while True:
            with self._wake:
                while not self._queue and not self._stopping:
                    self._wake.wait()
                if self._stopping:
                    return
                trace_id, done = self._queue.popleft()
            try:
                self._run_one(slot, trace_id, done)
            except Exception as exc:  # no process could be started: this entry fails, the slot goes on
                if not self._stopping:
                    _fail(self.store, trace_id, f"the analysis could not start ({_one_line(exc)})"[:300])
                if not done.done():
                    done.set_exception(exc)

    def _run_one(self, slot: int, trace_id: str, done: cf.Future[str]) -> None:
        try:
            future = self._pools[slot].submit(analyse_entry, str(self.store.root), trace_id, self.limits)
        except (cf.BrokenExecutor, RuntimeError):  # a child died earlier, or we are stopping
            if self._stopping:
                done.cancel()
                return
            self._replace_pool(slot)
            future = self._pools[slot].submit(analyse_entry, str(self.store.root), trace_id, self.limits)
        timeout = time_limit(self.store, trace_id, self.limits)
        try:
            status = future.result(timeout=timeout + KILL_GRACE_S if self._processes else None)
            self.store.fit(keep=(trace_id,))  # its result added to the store: older entries make room
            done.set_result(status)
        except cf.TimeoutError:
            self._replace_pool(slot, kill=True)
            _fail(self.store, trace_id, f"the analysis did not finish within {timeout:.0f} s and was stopped")
            done.set_exception(TimeoutError(trace_id))
        except Exception as exc:  # the child itself failed (killed, out of memory): only this entry
            self._replace_pool(slot, kill=True)
            if not self._stopping:
                _fail(self.store, trace_id, f"the analysis process stopped ({type(exc).__name__})")
            done.set_exception(exc)

    def _replace_pool(self, slot: int, kill: bool = False) -> None:
        old = self._pools[slot]
        if kill:
            for process in list((getattr(old, "_processes", None) or {}).values()):
                process.kill()
        old.shutdown(wait=False, cancel_futures=True)
        if not self._stopping:
            self._pools[slot] = self._new_pool()

    def shutdown(self) -> None:
        """Stop now: running analyses are killed (their entries stay 'analysing' and are resumed on the
        next start); queued ones stay 'pending'."""
        with self._wake:
            self._stopping = True
            pending = list(self._queue)
            self._queue.clear()
            self._wake.notify_all()
        for _, done in pending:
            done.cancel()
        stopped = self._stop_pools(list(self._pools))
        for thread in self._threads:
            thread.join(timeout=10)
        # a slot that replaced its pool meanwhile (its child had just died) may have started another
        self._stop_pools([pool for pool in self._pools if pool not in stopped])

    def _stop_pools(self, pools: list[cf.Executor]) -> list[cf.Executor]:
        if self._processes:
            for pool in pools:
                for process in list((getattr(pool, "_processes", None) or {}).values()):
                    process.kill()
        for pool in pools:
            pool.shutdown(wait=not self._processes, cancel_futures=True)
        return pools


def _task_error(task: Any) -> BaseException:
    """What a failed Dask task raised (or why that cannot be told)."""
    try:
        error = task.exception()
    except Exception as exc:
        return exc
    return error if isinstance(error, BaseException) else RuntimeError(f"the task ended {task.status}")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _check_address(address: str) -> None:
    """``UsageError`` unless ``address`` names a TCP (or TLS) host and port that resolves (checked before
    any connection: a client made for a malformed address lingers and stalls the interpreter's exit)."""
    import warnings

    from distributed.comm.addressing import normalize_address, parse_address, resolve_address

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a removed protocol warns: an error here
            scheme, _ = parse_address(normalize_address(address))
            if scheme not in ("tcp", "tls"):
                raise ValueError(f"a scheduler is reached by tcp:// or tls://, not {scheme}://")
            resolve_address(address)
    except (OSError, ValueError, TypeError, Warning) as exc:
        raise UsageError(f"--scheduler {address}: not a scheduler's address ({_one_line(exc)})") from None


class ClusterWorker(AnalysisQueue):
    """Analyses on an existing Dask cluster (the scheduler at ``address``, as ``analyze --scheduler``):
    each upload is one task (``analyse_in_child``: the store's folder and the entry's id), and the cluster
    decides how many run at once. A task that fails, or whose Dask worker is lost for good, fails its own
    entry only. ``UsageError`` when the scheduler cannot be reached within ``connect_timeout_s``."""

    def __init__(
        self,
        store: Store,
        address: str,
        limits: Limits | None = None,
        connect_timeout_s: float | None = None,
    ) -> None:
        from dask.distributed import Client

        super().__init__(store, limits)
        self._root = str(store.root.resolve())  # the tasks run elsewhere: never a relative path
        timeout = CONNECT_TIMEOUT_S if connect_timeout_s is None else connect_timeout_s
        _check_address(address)
        try:
            self._client: Any = Client(  # type: ignore[no-untyped-call]
                address, timeout=timeout, set_as_default=False
            )
        except (OSError, TimeoutError, ValueError, TypeError) as exc:
            raise UsageError(f"--scheduler {address}: cannot connect ({_one_line(exc)})") from None
        self.address = address
        self._lock = threading.Lock()
        self._running: dict[str, Any] = {}  # Dask futures by key, until done
        self._stopping = False

    def submit(self, trace_id: str) -> cf.Future[str]:
        done: cf.Future[str] = cf.Future()
        with self._lock:
            if self._stopping:
                done.cancel()
                return done
            key = f"stallscope-analysis-{trace_id}-{uuid.uuid4().hex[:8]}"
            task = self._client.submit(
                analyse_in_child, self._root, trace_id, self.limits, key=key, pure=False, retries=0
            )
            self._running[key] = task
        task.add_done_callback(lambda t: self._finished(trace_id, t, done))
        return done

    def _finished(self, trace_id: str, task: Any, done: cf.Future[str]) -> None:
        with self._lock:
            self._running.pop(task.key, None)
            stopping = self._stopping
        if task.status == "finished":
            try:
                status = str(task.result())
            except Exception as exc:  # the result could not be fetched (the worker holding it left)
                self._failed(trace_id, exc, done, stopping)
                return
            self.store.fit(keep=(trace_id,))
            done.set_result(status)
        elif task.status == "cancelled":
            if not stopping:
                _fail_unsettled(self.store, trace_id, "the analysis was cancelled on the cluster")
            done.cancel()
        else:
            self._failed(trace_id, _task_error(task), done, stopping)

    def _failed(self, trace_id: str, exc: BaseException, done: cf.Future[str], stopping: bool) -> None:
        if not stopping:
            text = " ".join(str(exc).split())
            _fail_unsettled(
                self.store,
                trace_id,
                f"the analysis failed on the cluster ({type(exc).__name__}{': ' + text if text else ''})"[
                    :300
                ],
            )
        done.set_exception(exc)

    def shutdown(self) -> None:
        """Stop: tasks not yet finished are released (an analysis already running on the cluster may
        still complete and store its result); entries left unfinished are resumed on the next start."""
        with self._lock:
            self._stopping = True
            tasks = list(self._running.values())
        with contextlib.suppress(Exception):
            if tasks:
                self._client.cancel(tasks)
        with contextlib.suppress(Exception):
            self._client.close(timeout=10)
