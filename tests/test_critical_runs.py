"""The critical path's walk takes runs of like steps as arrays (down a stream's order, down a host thread's
calls). These tests pin it to the walk one step at a time: on real traces as recorded, with their times
coarsened (ties, zero-length calls, cycles, a small step budget), and on a hand-made cycle that the walk
meets inside a run of host steps."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from synth.trace import SynthTrace

from stallscope.analyzer.core.model import F64, TraceModel
from stallscope.analyzer.graph.dependency import Graph, build_graph
from stallscope.analyzer.graph.inputs import input_intervals, main_thread, untraced_intervals
from stallscope.analyzer.load.loader import load
from stallscope.analyzer.passes.critical import State, _first_state, _Marked, _marked, _Walk
from stallscope.analyzer.passes.window import find_window

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"

Walked = tuple[list[int], list[int], list[int], list[float], list[float], str]


class OneByOne(_Walk):
    """The reference: every step on its own (``device_step``, ``host_step``), no runs."""

    def __init__(self, g: Graph, start_us: float, marked: _Marked) -> None:
        super().__init__(g, start_us, marked)
        self.chain = np.zeros_like(self.chain)

    def _plain_run(self, lane: int, t: float, below: int) -> int:
        return 0


def walked(walk: _Walk, first: State, budget: int | None = None) -> Walked:
    """The walk's segments as it recorded them (back in time, before merging) and why it stopped."""
    if budget is not None:
        walk.budget = budget
    walk.run(first)
    kind, lane, event, lo, hi = walk.columns()
    return (kind.tolist(), lane.tolist(), event.tolist(), lo.tolist(), hi.tolist(), walk.stopped)


def coarsened(g: Graph, start_us: float, grid_us: float) -> Graph:
    """The graph with every time rounded down to a grid from just after the window's start: many ties."""

    def down(t: F64) -> F64:
        return start_us + 1.0 + np.floor((t - start_us) / grid_us) * grid_us

    return replace(
        g,
        call_start=down(g.call_start),
        call_end=down(g.call_end),
        call_awaited=down(g.call_awaited),
        call_dep_at=down(g.call_dep_at),
        act_start=down(g.act_start),
        act_end=down(g.act_end),
    )


def assert_walks_agree(model: TraceModel) -> int:
    """Walk the model's graph as recorded and coarsened, with the usual budget and small ones: runs and
    single steps give the same segments. Returns how many walks stopped at a cycle or the budget."""
    window = find_window(model)
    g = build_graph(model)
    inputs = _marked(input_intervals(model), untraced_intervals(model))
    lane = main_thread(model, g)
    stopped = 0
    for grid_us in (0.0, 500.0, 1e12):
        h = coarsened(g, window.start_us, grid_us) if grid_us else g
        first = _first_state(h, window.end_us, lane)
        for budget in (None, 10, 300):
            fast = walked(_Walk(h, window.start_us, inputs), first, budget)
            assert fast == walked(OneByOne(h, window.start_us, inputs), first, budget), (grid_us, budget)
            stopped += bool(fast[-1])
    return stopped


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.glob("*.pt.trace.json.gz")))
def test_runs_walk_like_single_steps_on_sample_traces(name: str) -> None:
    # GIVEN a sample trace, WHEN walked with runs and one step at a time THEN the segments are the same
    assert_walks_agree(load(SAMPLES / name).models[0])


@pytest.mark.shared
def test_runs_walk_like_single_steps_on_real_traces(shared_traces: Path) -> None:
    # GIVEN every real trace (each DLRM rank file on its own)
    files = sorted(shared_traces.rglob("*.json.gz"))
    assert files
    stopped = 0
    for path in files:
        for model in load(path).models:
            # WHEN walked with runs and one step at a time THEN the segments are the same
            stopped += assert_walks_agree(model)
    # AND the cycle and budget checks were met along the way
    assert stopped > 0


class Spy(_Walk):
    """The walk with runs, noting each run's length and how many of its states the walk took."""

    def __init__(self, g: Graph, start_us: float, marked: _Marked) -> None:
        super().__init__(g, start_us, marked)
        self.visits: list[tuple[int, int]] = []

    def _visits(
        self, state_at: Callable[[int], State], times: F64, m: int, at: float, seen: set[State]
    ) -> int:
        visit = super()._visits(state_at, times, m, at, seen)
        self.visits.append((m, visit))
        return visit


def test_a_cycle_met_inside_a_run_of_host_steps(tmp_path: Path) -> None:
    # GIVEN a thread of 7 calls, each launching a kernel: call 0, then calls 1-6 zero-length at one time;
    # call 1 waits for call 5's kernel (an edge back in time), call 3's kernel runs past the window's end
    sc = SynthTrace("cycle")
    for _ in range(7):
        sc.launch("k", 5.0)
    model = load(sc.write(tmp_path / "cycle.pt.trace.json.gz")).models[0]
    g = build_graph(model)
    assert g.calls == 7 and g.activities == 7 and g.act_call.tolist() == list(range(7))
    t = float(g.call_start[1])
    start = np.full(7, t)
    start[0] = t - 40
    no_waits: tuple[int, ...] = ()
    g = replace(
        g,
        call_start=start,
        call_end=start + np.where(np.arange(7) == 0, 5.0, 0.0),
        call_waits=(no_waits, (5,)) + (no_waits,) * 5,
        call_awaited=np.where(np.arange(7) == 1, t + 1, -np.inf),
        call_dep=np.full(7, -1),
        act_start=np.full(7, t),
        act_end=np.where(np.arange(7) == 3, t + 300, t),
        act_prev=np.full(7, -1),
        act_waits=(no_waits,) * 7,
        act_wait_gap=((),) * 7,
    )
    first = _first_state(g, t + 200, int(g.call_lane[0]))
    assert first == ("device", 3, t + 200, -1)
    # WHEN walked back: kernel 3, its launch (call 3), calls 2 and 1, call 1's wait on kernel 5, its launch
    # (call 5), then a run of host steps down from call 5 that meets call 3's start again at the same time
    spy = Spy(g, t - 50, {})
    fast = walked(spy, first)
    # THEN the run stops before the state seen already, the walk reports the cycle, and the single steps
    # give the same segments
    assert spy.visits == [(3, 2)]
    assert fast[-1].startswith("the recorded order has a cycle")
    assert fast == walked(OneByOne(g, t - 50, {}), first)
