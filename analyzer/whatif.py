"""What-if scenarios over the replay, and which blocking calls count as avoidable for them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from analyzer.graph import Blocking, Graph
from analyzer.model import TraceModel
from analyzer.replay import Costs, Frame, Scenario, recorded_end, replay

#: (model, graph, window start, window end) -> graph call indices of the avoidable blocking calls
AvoidablePolicy = Callable[[TraceModel, Graph, float, float], frozenset[int]]


@dataclass(frozen=True)
class WhatIf:
    scenario: Scenario
    predicted_wall_us: float
    saving_us: float


@dataclass(frozen=True)
class WhatIfReport:
    recorded_wall_us: float  # the trace's own makespan (window start to the end of its work)
    replayed_wall_us: float  # the unchanged graph's replay: must match the line above
    results: tuple[WhatIf, ...]

    @property
    def replay_error(self) -> float:
        return abs(self.replayed_wall_us - self.recorded_wall_us) / max(self.recorded_wall_us, 1e-9)

    def saving(self, scenario: Scenario) -> float:
        return next((r.saving_us for r in self.results if r.scenario == scenario), 0.0)


def _loads_data(f: Frame) -> bool:
    """Whether any host gap in the replay holds data loading (else ``input_overlapped`` changes nothing)."""
    return f.tail_input > 0 or any(x > 0 for x in f.gap_input)


def scenario_costs(
    model: TraceModel, g: Graph, f: Frame, avoidable: AvoidablePolicy
) -> dict[Scenario, Costs]:
    """How each scenario changes the graph's costs (``what_if`` replays these; the dashboard replays one
    to draw its re-timed timeline)."""
    waits_in_window = frozenset(
        c for c in np.flatnonzero(g.call_blocking != Blocking.NO).tolist() if g.call_start[c] >= f.start_us
    )
    return {
        Scenario.NO_AVOIDABLE_SYNCS: Costs(no_wait=avoidable(model, g, f.start_us, f.end_us)),
        Scenario.NO_SYNCS: Costs(no_wait=waits_in_window),
        Scenario.DEVICE_2X: Costs(device_scale=0.5),
        Scenario.HOST_2X: Costs(host_scale=0.5),
        Scenario.INPUT_OVERLAPPED: Costs(input_scale=0.0 if _loads_data(f) else 1.0),
    }


def what_if(model: TraceModel, g: Graph, f: Frame, avoidable: AvoidablePolicy) -> WhatIfReport:
    """Replay the graph unchanged and under each scenario; savings are against the unchanged replay.
    Scenarios that change nothing (no avoidable syncs, no data loading) reuse the unchanged replay."""
    scenarios = scenario_costs(model, g, f, avoidable)
    base = replay(g, f, Costs()).end_us - f.start_us
    done: dict[Costs, float] = {Costs(): base}
    results = []
    for scenario, costs in scenarios.items():
        if costs not in done:
            done[costs] = replay(g, f, costs).end_us - f.start_us
        results.append(WhatIf(scenario, done[costs], base - done[costs]))
    return WhatIfReport(recorded_end(g, f) - f.start_us, base, tuple(results))
