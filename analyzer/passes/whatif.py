"""What-if scenarios over the replay, and which blocking calls count as avoidable for them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from stallscope.analyzer.core import intervals
from stallscope.analyzer.core.model import TraceModel
from stallscope.analyzer.graph.dependency import Blocking, Graph
from stallscope.analyzer.passes.critical import CriticalPath, Kind
from stallscope.analyzer.passes.replay import Costs, Frame, Scenario, recorded_end, replay_ends

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
    window_us: float = 0.0  # the baseline every view shows ("as recorded"): the window
    sensitivity_us: dict[str, float] = field(default_factory=dict)  # kind -> saving of its speed-up
    #: what each scenario changed in the graph's costs (the dashboard replays one to draw its timeline)
    costs: dict[Scenario, Costs] = field(default_factory=dict)

    @property
    def overrun_us(self) -> float:
        """How far device work launched inside the window ran past its end (the replays include it)."""
        return max(0.0, self.recorded_wall_us - self.window_us)

    @property
    def replay_error(self) -> float:
        return abs(self.replayed_wall_us - self.recorded_wall_us) / max(self.recorded_wall_us, 1e-9)

    def saving(self, scenario: Scenario) -> float:
        return next((r.saving_us for r in self.results if r.scenario == scenario), 0.0)


#: the share of a device's busy time without a launch call above which the replays say little (a note says so)
PINNED_SHARE = 0.2


def pinned_share(g: Graph, device: int | None, start_us: float, end_us: float) -> float:
    """Share of the device's activities in ``[start_us, end_us]`` whose launch call is not in the trace, by
    busy time or by count, whichever is larger: the replays keep them at their recorded times, whatever a
    scenario speeds up, and the work queued behind them on their streams waits for them (many short ones
    pin the rest as surely as a few long ones)."""
    if device is None or not g.activities:
        return 0.0
    mine = (g.act_device == device) & (g.act_end > start_us) & (g.act_start < end_us)
    busy = intervals.total(
        *intervals.clip(*intervals.union(g.act_start[mine], g.act_end[mine]), start_us, end_us)
    )
    pinned = mine & (g.act_call < 0)
    held = intervals.total(
        *intervals.clip(*intervals.union(g.act_start[pinned], g.act_end[pinned]), start_us, end_us)
    )
    by_count = int(np.count_nonzero(pinned)) / max(int(np.count_nonzero(mine)), 1)
    return max(held / busy if busy > 0 else 0.0, by_count)


def scenario_costs(
    model: TraceModel, g: Graph, f: Frame, avoidable: AvoidablePolicy
) -> dict[Scenario, Costs]:
    """How each scenario changes the graph's costs (``what_if`` replays these; the dashboard replays one
    to draw its re-timed timeline)."""
    waits_in_window = frozenset(
        c for c in np.flatnonzero(g.call_blocking != Blocking.NO).tolist() if g.call_start[c] >= f.start_us
    )
    scenarios = {
        Scenario.NO_AVOIDABLE_SYNCS: Costs(no_wait=avoidable(model, g, f.start_us, f.end_us)),
        Scenario.NO_SYNCS: Costs(no_wait=waits_in_window),
        Scenario.DEVICE_2X: Costs(device_scale=0.5),
        Scenario.HOST_2X: Costs(host_scale=0.5),
        Scenario.INPUT_OVERLAPPED: Costs(input_scale=0.0 if f.loads_data else 1.0),
    }
    if f.communicates:  # compute and communication apart (device_2x is both together)
        scenarios[Scenario.COMPUTE_2X] = Costs(device_scale=0.5, comm_scale=1.0)
        scenarios[Scenario.COMMUNICATION_2X] = Costs(comm_scale=0.5)
        scenarios[Scenario.COMMUNICATION_OVERLAPPED] = Costs(comm_scale=0.0)
    return scenarios


def host_only(window_us: float, path: CriticalPath, scenarios: dict[Scenario, Costs]) -> WhatIfReport:
    """The what-if of a trace with no device work (a CPU-only run): there is nothing to replay, and its
    critical path is host and data-loading time alone, so each scenario's saving follows from the path: a
    2x faster host halves the host and data-loading time on it, overlapped data loading removes its time,
    and the scenarios about syncs and the device change nothing."""
    host, loading = path.breakdown_us[Kind.HOST], path.breakdown_us[Kind.INPUT]
    savings = {
        Scenario.NO_AVOIDABLE_SYNCS: 0.0,
        Scenario.NO_SYNCS: 0.0,
        Scenario.DEVICE_2X: 0.0,
        Scenario.HOST_2X: (host + loading) / 2,
        Scenario.INPUT_OVERLAPPED: loading,
    }
    results = tuple(WhatIf(s, window_us - v, v) for s, v in savings.items())
    sensitivity = {
        "device": 0.0,
        "host": host / 2,
        "input": loading,
        "sync": 0.0,
        "launch": 0.0,
        "communication": 0.0,
    }
    return WhatIfReport(window_us, window_us, results, window_us, sensitivity, scenarios)


def what_if(g: Graph, f: Frame, scenarios: dict[Scenario, Costs]) -> WhatIfReport:
    """Replay the graph unchanged and under each scenario (``scenario_costs``); savings are against the
    unchanged replay. Scenarios that change nothing (no avoidable syncs, no data loading) reuse the
    unchanged replay; the others are replayed together, in one pass over the graph (``replay_ends``)."""
    # the host's own work 2x faster, data loading kept as it is (input is its own kind)
    own_host = Costs(host_scale=0.5, input_scale=2.0) if f.loads_data else scenarios[Scenario.HOST_2X]
    launch = Costs(launch_scale=0.5)
    distinct = list(dict.fromkeys([Costs(), *scenarios.values(), own_host, launch]))
    done = {c: end - f.start_us for c, end in zip(distinct, replay_ends(g, f, distinct), strict=True)}
    base = done[Costs()]
    window = f.end_us - f.start_us

    def saving(costs: Costs) -> float:
        return base - done[costs]

    results = []
    for scenario, costs in scenarios.items():
        cut = saving(costs)
        results.append(WhatIf(scenario, window - cut, cut))
    compute = scenarios.get(Scenario.COMPUTE_2X, scenarios[Scenario.DEVICE_2X])
    comm = scenarios.get(Scenario.COMMUNICATION_2X)
    sensitivity = {
        "device": saving(compute),  # compute: collectives are the communication kind
        "host": saving(own_host),
        "input": saving(scenarios[Scenario.INPUT_OVERLAPPED]),
        "sync": saving(scenarios[Scenario.NO_SYNCS]),
        "launch": saving(launch),
        "communication": saving(comm) if comm is not None else 0.0,
    }
    return WhatIfReport(recorded_end(g, f) - f.start_us, base, tuple(results), window, sensitivity, scenarios)
