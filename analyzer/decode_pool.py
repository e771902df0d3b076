"""Decode a streamed trace on two cores: worker processes decode some batches and make their columns
while this process reads, inflates and cuts the file and builds the other batches; the parts are merged in
file order, so the model is the one a single process builds (the same codes in the same order).

Each worker holds at most one piece, sent when it is idle: a pipe never has both ends writing, so neither
side can block the other. Results are read by this process's own thread (no helper threads: memory
they would allocate lands in malloc arenas the analysis cannot reuse). Used only where the process can
fork (Linux), for traces of more than one batch; a worker that fails to start or dies leaves its piece,
and the rest of the file, to this process.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
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


class _Slot:
    """A piece's place in file order: its part, or the worker making it (and a copy of its text)."""

    def __init__(self, part: _Part | None = None, worker: _Worker | None = None, text: bytes = b"") -> None:
        self.part, self.worker, self.text = part, worker, text


def parts_in_order(pieces: Iterator[memoryview | Batch], workers: int) -> Iterator[_Part]:
    """``part_of`` of every piece, in order; up to ``workers`` processes make some of them. A piece is
    valid only until the next is asked for, so one sent to a worker is copied first."""
    pool: list[_Worker] = []
    busy: dict[_Worker, _Slot] = {}
    queue: list[_Slot] = []
    try:
        for n, piece in enumerate(pieces):
            if n == 1 and isinstance(piece, memoryview):  # a second piece: the trace is worth workers
                pool = _start(workers)
            for worker, slot in list(busy.items()):  # collect what is done: the worker is free again
                if worker.ready():
                    _collect(slot, busy, pool)
            idle = [w for w in pool if w not in busy]
            slot = _Slot()
            if idle and isinstance(piece, memoryview):
                slot.text = bytes(piece)
                if idle[0].send(slot.text):
                    slot.worker = idle[0]
                    busy[idle[0]] = slot
                else:
                    pool.remove(idle[0])
            if slot.worker is None:
                slot.part = part_of(piece)
            queue.append(slot)
            while queue and (queue[0].part is not None or len(queue) > _QUEUED):
                yield _take(queue.pop(0), busy, pool)
        while queue:
            yield _take(queue.pop(0), busy, pool)
    finally:
        for worker in pool:
            worker.stop()


def _take(slot: _Slot, busy: dict[_Worker, _Slot], pool: list[_Worker]) -> _Part:
    if slot.part is None:
        _collect(slot, busy, pool)
    assert slot.part is not None
    return slot.part


def _collect(slot: _Slot, busy: dict[_Worker, _Slot], pool: list[_Worker]) -> None:
    """Wait for the slot's worker; if it died, make the part here (and use that worker no more)."""
    worker = slot.worker
    assert worker is not None
    del busy[worker]
    slot.worker = None
    part = worker.receive()
    if part is None:
        pool.remove(worker)
        worker.stop()
        part = part_of(slot.text)
    slot.part, slot.text = part, b""


def _start(workers: int) -> list[_Worker]:
    if workers < 1 or not can_fork():
        return []
    pool = []
    for _ in range(workers):
        try:
            pool.append(_Worker())
        except OSError:
            break
    return pool


class _Worker:
    """One forked process making parts of the pieces it is sent, one at a time."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("fork")
        self.conn, theirs = context.Pipe()
        self.process = context.Process(target=_serve, args=(theirs,), daemon=True)
        self.process.start()
        theirs.close()

    def send(self, text: bytes) -> bool:
        try:
            self.conn.send_bytes(text)
            return True
        except OSError:
            return False

    def ready(self) -> bool:
        try:
            return self.conn.poll()
        except OSError:
            return True  # receive() finds out

    def receive(self) -> _Part | None:
        """The part, or None if the worker is gone; an error it met is raised here (as this process
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
            self.conn.send_bytes(b"")
        self.conn.close()
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


def _serve(conn: Connection) -> None:
    """The worker's loop: a piece in, its part (or the error it met) out, until an empty message."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops us
    while True:
        try:
            text = conn.recv_bytes()
        except (EOFError, OSError):
            return
        if not text:
            return
        try:
            answer: _Part | Exception = part_of(text)
        except Exception as exc:  # raised again in the parent, as if met there
            answer = exc
        try:
            conn.send(answer)
        except OSError:  # the parent has gone (or stopped reading)
            return
