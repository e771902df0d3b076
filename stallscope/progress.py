"""Progress on stderr for work that takes more than a moment: silent for quick files, stage lines after."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


class Progress:
    """Call with a stage message as work advances. Nothing is shown unless the work is still running after
    ``delay`` seconds; from then on every stage is shown with the elapsed time."""

    def __init__(self, stream: TextIO | None = None, delay: float = 1.0, enabled: bool = True) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._start = time.monotonic()
        self._stage = ""
        self._last = 0.0
        self._interval = 0.5  # at most two lines a second once shown
        self._shown = False
        self._enabled = enabled
        self._lock = threading.Lock()
        self._timer = threading.Timer(delay, self._late)
        self._timer.daemon = True
        if enabled:
            self._timer.start()

    def __call__(self, message: str) -> None:
        with self._lock:
            self._stage = message
            if self._shown and time.monotonic() - self._last >= self._interval:
                self._write(message)

    def _late(self) -> None:
        with self._lock:
            if self._stage and self._enabled:
                self._shown = True
                self._write(self._stage)

    def _write(self, message: str) -> None:
        self._last = time.monotonic()
        self._stream.write(f"stallscope: {message}... ({self._last - self._start:.1f} s)\n")
        self._stream.flush()

    def done(self) -> None:
        self._timer.cancel()
        with self._lock:
            if self._shown:
                self._stream.write(f"stallscope: done in {time.monotonic() - self._start:.1f} s\n")
                self._stream.flush()
            self._enabled = False
            self._shown = False
