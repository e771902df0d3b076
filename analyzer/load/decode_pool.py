"""Decode a streamed trace on two cores: worker processes read, inflate and cut the same file as this
process, and each piece is decoded and made columns by whichever process reaches it first; the parts are
merged here in file order, so the model is the one a single process builds (the same codes in the same
order).

Nothing is sent to a worker: each process cuts the file into the same pieces, and a shared counter says
which pieces are taken (pieces are taken in file order, so one number is enough). Reading and cutting are
cheap (a tenth of decoding); a process that is behind skips the pieces already taken. A worker's parts
come back through a pipe, sent by a thread of the worker so that it decodes on while this process, busy
with its own piece, has not read them yet. Used only where the process can fork (Linux), for files of
several pieces. A worker that fails to start leaves the file to this process; one that dies, or cut the
file differently (it changed while read), makes ``WorkerLost`` raise: the caller parses again alone.
A caller that knows the file before it is ready to parse it starts the workers early (``start_early``).
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import queue
import signal
import sys
import threading
import warnings
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from multiprocessing.connection import Connection, wait
from typing import Any

from stallscope.analyzer.load.build import _Part, part_of
from stallscope.analyzer.load.raw import Batch

Pieces = Iterator[memoryview | Batch]


class WorkerLost(Exception):
    """A worker took a piece and never gave its part back: parse the file again without workers."""


def default_workers() -> int:
    """Worker processes for the command line: ``STALLSCOPE_DECODE_WORKERS`` if set, else one where this
    machine has a second core and the process can fork, else none."""
    value = os.environ.get("STALLSCOPE_DECODE_WORKERS", "").strip()
    if value:
        try:
            return max(int(value), 0)
        except ValueError:
            return 0
    return 1 if can_fork() and (os.cpu_count() or 1) >= 2 else 0


def can_fork() -> bool:
    return sys.platform == "linux" and "fork" in multiprocessing.get_all_start_methods()


class _Claims:
    """The number of pieces taken so far, shared by every process. A process reaches piece ``i`` only after
    passing ``i - 1``, which it took or found taken, so the count is never below ``i`` there: piece ``i`` is
    free exactly when the count is ``i``."""

    def __init__(self, context: Any) -> None:
        self._taken = context.RawValue("q", 0)
        self._lock = context.Lock()

    def take(self, index: int) -> bool:
        if not self._lock.acquire(timeout=_LOCK_WAIT_S):  # held by a process killed inside it
            raise WorkerLost("the count of pieces taken stayed locked")
        try:
            if self._taken.value != index:
                return False
            self._taken.value = index + 1
            return True
        finally:
            self._lock.release()


_LOCK_WAIT_S = 30.0  # the lock is held for a comparison and an assignment


_DONE = "done"  # a worker's last message: it takes no more pieces


class _Slot:
    """A piece's place in file order: its part once made (here, or arrived from a worker), and its length
    (a worker's part must come from a piece of the same length, or the file changed between reads)."""

    __slots__ = ("index", "length", "part")

    def __init__(self, index: int, length: int, part: _Part | None = None) -> None:
        self.index, self.length, self.part = index, length, part


class _Early:
    """Workers started on a file before its parse began (``start_early``), and what they were told."""

    def __init__(self, key: Hashable, claims: _Claims, pool: list[_Worker]) -> None:
        self.key, self.claims, self.pool = key, claims, pool


_early: list[_Early] = []  # at most one: started, not yet taken by ``parts_in_order`` nor stopped


def start_early(key: Hashable, workers: int, make_pieces: Callable[[], Pieces]) -> None:
    """Start ``parts_in_order``'s workers now, for the parse that will pass the same ``key`` (the file and
    how it is read, which ``make_pieces`` must read the same way): they take its first pieces while this
    process prepares (the command line imports the analysis meanwhile, ~0.1 s). Workers not taken are
    killed by ``stop_early``, and at exit."""
    stop_early()
    context = multiprocessing.get_context("fork") if can_fork() and workers > 0 else None
    if context is None:
        return
    claims = _Claims(context)
    pool = _start(workers, claims, make_pieces)
    if pool:
        _early.append(_Early(key, claims, pool))


def stop_early() -> None:
    """Kill the workers ``start_early`` started that no parse took."""
    while _early:
        for worker in _early.pop().pool:
            worker.stop(finished=False)


atexit.register(stop_early)


def _take_early(key: Hashable) -> tuple[_Claims, list[_Worker]] | None:
    """The early workers started for ``key`` (None: none were; any started for another key are killed)."""
    found = next((early for early in _early if early.key == key), None)
    if found is None:
        stop_early()
        return None
    _early.remove(found)
    return found.claims, found.pool


def parts_in_order(
    pieces: Pieces, workers: int, make_pieces: Callable[[], Pieces], key: Hashable = None
) -> Iterator[_Part]:
    """``part_of`` of every piece of ``pieces``, in order; up to ``workers`` processes make some of them,
    each from its own ``make_pieces()`` (the same file read again, cut the same way; called in the
    worker), or the workers ``start_early`` started for ``key``. Raises ``WorkerLost`` if a worker dies
    holding a piece."""
    early = _take_early(key) if key is not None else None
    claims: _Claims | None
    if early is not None:
        claims, pool = early
    else:
        context = multiprocessing.get_context("fork") if can_fork() else None
        claims = _Claims(context) if context is not None and workers > 0 else None
        pool = _start(workers, claims, make_pieces) if claims is not None else []
    if claims is None or not pool:
        yield from map(part_of, pieces)
        return
    waiting: deque[_Slot] = deque()
    arrived: dict[int, tuple[int, _Part | Exception]] = {}
    finished = False
    try:
        for index, piece in enumerate(pieces):
            if isinstance(piece, memoryview) and not claims.take(index):
                waiting.append(_Slot(index, len(piece)))  # a worker's
            else:
                waiting.append(_Slot(index, -1, part_of(piece)))
            _gather(pool, arrived, block=False)
            while waiting and _done(waiting[0], arrived):
                yield _part(waiting.popleft(), arrived)
        while waiting:
            if not _done(waiting[0], arrived):
                _gather(pool, arrived, block=True)
                continue
            yield _part(waiting.popleft(), arrived)
        finished = True
    finally:
        for worker in pool:
            worker.stop(finished)


def _done(slot: _Slot, arrived: dict[int, tuple[int, _Part | Exception]]) -> bool:
    return slot.part is not None or slot.index in arrived


def _part(slot: _Slot, arrived: dict[int, tuple[int, _Part | Exception]]) -> _Part:
    """The slot's part; a worker's error is raised here, where this process would have met it."""
    if slot.part is not None:
        return slot.part
    length, made = arrived.pop(slot.index)
    if length != slot.length:
        raise WorkerLost(f"piece {slot.index}: {length} bytes in a worker, {slot.length} here")
    if isinstance(made, Exception):
        raise made
    return made


def _gather(pool: list[_Worker], arrived: dict[int, tuple[int, _Part | Exception]], block: bool) -> None:
    """Read every message the workers have sent (waiting for one at least when ``block``)."""
    live = [w for w in pool if not w.finished]
    if not live:
        if block:  # a piece taken by a worker that said it was done: it cannot come any more
            raise WorkerLost("a worker finished without a piece it took")
        return
    for conn in wait([w.conn for w in live], timeout=None if block else 0):
        worker = next(w for w in live if w.conn is conn)
        while not worker.finished and (block or worker.conn.poll()):
            block = False
            message = worker.receive()
            if message == _DONE:
                worker.finished = True
            else:
                index, length, made = message
                arrived[index] = (length, made)


def _start(workers: int, claims: _Claims, make_pieces: Callable[[], Pieces]) -> list[_Worker]:
    """Up to ``workers`` started workers: as many as start (none is an error, only slower). Python 3.12+
    warns when a process with threads forks (the command line's progress timer is one); the worker runs
    none of their code, so the warning, which ``-W error`` would raise, is silenced here."""
    pool = []
    for _ in range(workers):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                pool.append(_Worker(claims, make_pieces))
        except Exception:  # a worker is an optimisation: parse here instead
            break
    return pool


class _Worker:
    """One forked process taking pieces of its own read of the file, and sending back their parts."""

    def __init__(self, claims: _Claims, make_pieces: Callable[[], Pieces]) -> None:
        context = multiprocessing.get_context("fork")
        self.conn, theirs = context.Pipe(duplex=False)
        self.process = context.Process(target=_serve, args=(theirs, claims, make_pieces), daemon=True)
        self.process.start()
        theirs.close()
        self.finished = False

    def receive(self) -> Any:
        """The next message; ``WorkerLost`` if the worker is gone before saying it is done."""
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            raise WorkerLost("a decode worker died") from None

    def stop(self, finished: bool) -> None:
        """Wait for a worker that has finished; kill one that has not (this process is giving up)."""
        self.conn.close()
        if finished:
            self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


def _serve(conn: Connection, claims: _Claims, make_pieces: Callable[[], Pieces]) -> None:
    """The worker: take the free pieces of its own read of the file, decode them, send their parts (or
    the error met, then stop taking) until the file ends. An error of the reading itself is no message:
    the parent, reading the same file, meets it too."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops us
    outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    gone = threading.Event()

    def send() -> None:  # a thread: sending blocks until the parent reads, decoding need not wait
        while (message := outbox.get()) is not None:
            try:
                conn.send(message)
            except OSError:  # the parent has gone (or stopped reading)
                gone.set()
                return

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        for index, piece in enumerate(make_pieces()):
            if gone.is_set() or not isinstance(piece, memoryview):  # the last events: the parent's
                break
            if not claims.take(index):
                continue
            try:
                outbox.put((index, len(piece), part_of(piece)))
            except Exception as exc:  # raised again in the parent, where it meets this piece
                outbox.put((index, len(piece), exc))
                break
    except Exception:  # the reading failed (a bad file): the parent's own read fails the same way
        pass
    finally:
        outbox.put(_DONE)
        outbox.put(None)
        sender.join()
        with contextlib.suppress(OSError):
            conn.close()
