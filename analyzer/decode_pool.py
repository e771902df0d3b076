"""Decode a streamed trace on two cores: worker processes decode some batches and make their columns
while this process reads, inflates and cuts the file and builds the other batches; the parts are merged in
file order, so the model is the one a single process builds (the same codes in the same order).

Each worker holds at most one job (a few pieces), sent when it is idle: a pipe never has both ends
writing, so neither side can block the other. Results are read by this process's own thread (no helper
threads: memory they would allocate lands in malloc arenas the analysis cannot reuse). Used only where
the process can fork (Linux), for files of several batches; a worker that fails to start or dies leaves
its pieces, and the rest of the file, to this process.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import warnings
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

from analyzer.build import _Part, part_of
from analyzer.raw import Batch

_QUEUED = 8  # parts made here may wait this long for a worker's earlier part before this process waits


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


class _Job:
    """Pieces sent together to one worker (copies of their text), and the parts it made of them."""

    def __init__(self, worker: _Worker) -> None:
        self.worker = worker
        self.texts: list[bytes] = []
        self.parts: list[_Part] | None = None


class _Slot:
    """A piece's place in file order: its part, or the job (and place in it) that will make it."""

    def __init__(self, part: _Part | None = None, job: _Job | None = None, at: int = 0) -> None:
        self.part, self.job, self.at = part, job, at


def parts_in_order(pieces: Iterator[memoryview | Batch], workers: int) -> Iterator[_Part]:
    """``part_of`` of every piece, in order; up to ``workers`` processes make some of them. A piece is
    valid only until the next is asked for, so one sent to a worker is copied first. An idle worker is
    given the next ``_PER_JOB`` pieces at once: while it makes them, this process makes about as many
    and does its own work (reading, inflating, cutting, merging). The workers start at once: the caller
    asks for them only for a file of several pieces."""
    pool: list[_Worker] = []
    busy: dict[_Worker, _Job] = {}
    gathering: _Job | None = None  # the pieces of an idle worker's next job, not sent yet
    queue: list[_Slot] = []
    try:
        pool = _start(workers)
        for piece in pieces:
            for worker, job in list(busy.items()):  # collect what is done: the worker is free again
                if worker.ready():
                    _collect(job, busy, pool)
            if gathering is None and isinstance(piece, memoryview):
                gathering = next((_Job(w) for w in pool if w not in busy), None)
            if gathering is not None and isinstance(piece, memoryview):
                queue.append(_Slot(job=gathering, at=len(gathering.texts)))
                gathering.texts.append(bytes(piece))
                if len(gathering.texts) == _PER_JOB:
                    _send(gathering, busy, pool)
                    gathering = None
            else:
                queue.append(_Slot(part_of(piece)))
            while queue and (queue[0].part is not None or len(queue) > _QUEUED):
                if queue[0].job is gathering and gathering is not None:
                    _send(gathering, busy, pool)
                    gathering = None
                yield _take(queue.pop(0), busy, pool)
        if gathering is not None:
            _send(gathering, busy, pool)
        while queue:
            yield _take(queue.pop(0), busy, pool)
    finally:
        for worker in pool:
            worker.stop()


_PER_JOB = 2


def _send(job: _Job, busy: dict[_Worker, _Job], pool: list[_Worker]) -> None:
    """Send the job to its worker; one that cannot take it is dropped and the job made here."""
    if job.worker.send(job.texts):
        busy[job.worker] = job
    else:
        _made_here(job, pool)


def _take(slot: _Slot, busy: dict[_Worker, _Job], pool: list[_Worker]) -> _Part:
    if slot.part is None:
        job = slot.job
        assert job is not None
        if job.parts is None:
            _collect(job, busy, pool)
        assert job.parts is not None
        slot.part, slot.job = job.parts[slot.at], None
    return slot.part


def _collect(job: _Job, busy: dict[_Worker, _Job], pool: list[_Worker]) -> None:
    """Wait for the job's parts; if its worker died, make them here (and use that worker no more)."""
    del busy[job.worker]
    parts = job.worker.receive()
    if parts is None:
        _made_here(job, pool)
    else:
        job.parts, job.texts = parts, []


def _made_here(job: _Job, pool: list[_Worker]) -> None:
    """The job's parts made by this process; its worker, gone or refusing work, is used no more."""
    pool.remove(job.worker)
    job.worker.stop()
    job.parts, job.texts = [part_of(text) for text in job.texts], []


def _start(workers: int) -> list[_Worker]:
    """Up to ``workers`` started workers: as many as start (none is an error, only slower). Python 3.12+
    warns when a process with threads forks (the command line's progress timer is one); the worker runs
    none of their code, so the warning, which ``-W error`` would raise, is silenced here."""
    if workers < 1 or not can_fork():
        return []
    pool = []
    for _ in range(workers):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                pool.append(_Worker())
        except Exception:  # a worker is an optimisation: parse here instead
            break
    return pool


class _Worker:
    """One forked process making the parts of the pieces it is sent, one job at a time."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("fork")
        self.conn, theirs = context.Pipe()
        self.process = context.Process(target=_serve, args=(theirs,), daemon=True)
        self.process.start()
        theirs.close()

    def send(self, texts: list[bytes]) -> bool:
        try:
            self.conn.send(texts)
            return True
        except OSError:
            return False

    def ready(self) -> bool:
        try:
            return self.conn.poll()
        except OSError:
            return True  # receive() finds out

    def receive(self) -> list[_Part] | None:
        """The parts, or None if the worker is gone; an error it met is raised here (as this process
        would have met it)."""
        try:
            answer: Any = self.conn.recv()
        except (EOFError, OSError):
            return None
        if isinstance(answer, BaseException):
            raise answer
        return answer  # type: ignore[no-any-return]

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send([])
        self.conn.close()
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


def _serve(conn: Connection) -> None:
    """The worker's loop: pieces in, their parts (or the error met) out, until an empty list."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops us
    while True:
        try:
            texts = conn.recv()
        except (EOFError, OSError):
            return
        if not texts:
            return
        try:
            answer: list[_Part] | Exception = [part_of(text) for text in texts]
        except Exception as exc:  # raised again in the parent, as if met there
            answer = exc
        try:
            conn.send(answer)
        except OSError:  # the parent has gone (or stopped reading)
            return
