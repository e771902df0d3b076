"""Typed ``Analysis`` objects for the views that need more than the stored JSON (the timeline explorer
and the what-if re-timing need the dependency graph and the critical path arrays).

They are rebuilt by the analyzer from the stored trace model (Parquet, memory-mapped) and the bundle's
sidecar, on first use, and the last few are kept. The analysis is deterministic, so the rebuilt object
agrees with the stored JSON; the views still render only what the analyzer computed. ``warm`` starts the
rebuild in the background when a trace's overview is opened, so the timeline is ready when asked for.
Another rank of a job is built the same way on demand, from its own uploaded file, and kept under its
(trace, rank) key with the others.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path

from stallscope.analyzer.analysis import Analysis, analyze_model
from stallscope.analyzer.load.sidecar import Sidecar, read_sidecar
from stallscope.analyzer.passes.replay import Costs, Replay, Scenario, replay
from stallscope.dashboard.store import Store

_KEPT = 3

#: which analysis: a trace id and a rank of its job (None: the rank the upload analysed in full)
Key = tuple[str, int | None]


class LiveAnalyses:
    """The typed analyses of the last few (trace, rank) pairs asked for. The rank analysed in full at
    upload (``rank`` None) is rebuilt from the stored model and the bundle's sidecar; any other rank of a
    job from that rank's own uploaded file alone (as the job analysed it: without the sidecar)."""

    def __init__(self, store: Store, max_inflated_mb: float | None = None) -> None:
        self.store = store
        self.max_inflated_mb = max_inflated_mb  # another rank's file, as for an upload (None: the default)
        self._done: OrderedDict[Key, Analysis] = OrderedDict()
        self._building: dict[Key, threading.Lock] = {}
        self._failed: dict[Key, str] = {}
        self._lock = threading.Lock()

    def get(self, trace_id: str, rank: int | None = None) -> Analysis:
        """The analysis of a ready entry, or of one rank of its job (store errors propagate: unknown, not
        ready, corrupt, no such rank)."""
        key = (trace_id, rank)
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                return self._done[key]
            building = self._building.setdefault(key, threading.Lock())
        with building:  # one rebuild per trace however many callbacks ask at once
            with self._lock:
                if key in self._done:
                    return self._done[key]
            try:
                result = self._build(trace_id, rank)
            except BaseException:
                with self._lock:
                    self._building.pop(key, None)
                raise
            with self._lock:
                self._building.pop(key, None)
                self._done[key] = result
                while len(self._done) > _KEPT:
                    self._done.popitem(last=False)
        return result

    def _build(self, trace_id: str, rank: int | None) -> Analysis:
        if rank is None:
            return analyze_model(self.store.model(trace_id), sidecar=self._sidecar(trace_id))
        return analyze_model(self.store.rank_model(trace_id, rank, self.max_inflated_mb))

    def failure(self, trace_id: str, rank: int | None = None) -> str | None:
        """Why the last background rebuild of this trace (rank) failed (None: it did not fail)."""
        with self._lock:
            return self._failed.get((trace_id, rank))

    def ready(self, trace_id: str, wait_s: float = 0.0, rank: int | None = None) -> bool:
        """Whether ``get`` answers without rebuilding, after waiting up to ``wait_s`` for a rebuild that
        is under way (small traces rebuild in well under a second: no need to show a progress panel)."""
        key = (trace_id, rank)
        with self._lock:
            if key in self._done:
                return True
            building = self._building.get(key)
        if building is not None and building.acquire(timeout=wait_s):
            building.release()
        with self._lock:
            return key in self._done

    def warm(self, trace_id: str, rank: int | None = None) -> None:
        """Rebuild in a background thread; a failure is left for the view that asks (``get`` raises it)."""
        key = (trace_id, rank)
        with self._lock:
            if key in self._done or key in self._building:
                return
            self._failed.pop(key, None)
            self._building[key] = started = threading.Lock()
            started.acquire()  # held until the thread has taken over, so that ``ready`` waits for it

        def build() -> None:
            started.release()
            try:
                self.get(trace_id, rank)
            except Exception as exc:  # kept for the page that waits for it
                with self._lock:
                    self._failed[key] = str(exc) or type(exc).__name__

        name = f"stallscope-warm-{trace_id[:8]}" + ("" if rank is None else f"-rank{rank}")
        threading.Thread(target=build, name=name, daemon=True).start()

    def _sidecar(self, trace_id: str) -> Sidecar | None:
        path: Path = self.store.input_path(trace_id)
        if not path.is_dir():
            return None
        sidecar, _problem = read_sidecar(path)
        return sidecar


def retimed(a: Analysis, scenario: Scenario) -> Replay:
    """The analyzer's replay of ``a``'s graph under ``scenario``: new start/end of every call and device
    activity (the what-if page draws it). The frame and each scenario's costs are the ones ``analyze_model``
    made for the predicted times, so the drawing ends where the predicted time says."""
    g, frame = a.graph, a.frame
    if g is None or frame is None or a.whatif is None:
        raise ValueError("this analysis has no dependency graph")
    if scenario == Scenario.AS_RECORDED:
        return replay(g, frame, Costs())
    return replay(g, frame, a.whatif.costs[scenario])
