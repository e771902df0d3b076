"""The what-if replay of several scenarios in one pass (``replay_many``, ``replay_ends``, ``replay``)
against the replay of one scenario at a time, step by step (``_replay_reference``): the same times bit
for bit, on the sample traces (with the frame's numbers in lists and in C arrays, chains re-timed one call
at a time and by numpy), with random costs, and on the real traces."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from _kineto import SAMPLES
from _replay_reference import reference_replay, same_bits
from hypothesis import given, settings
from hypothesis import strategies as st

from stallscope.analyzer.analysis import Analysis, analyze_model
from stallscope.analyzer.graph.dependency import Blocking, Graph
from stallscope.analyzer.graph.inputs import input_intervals, main_thread
from stallscope.analyzer.load.loader import load
from stallscope.analyzer.passes import replay as rp
from stallscope.analyzer.passes.replay import Costs, Frame, make_frame, replay, replay_ends, replay_many
from stallscope.analyzer.passes.whatif import scenario_costs

SAMPLE_NAMES = sorted(p.name for p in SAMPLES.glob("*.pt.trace.json.gz"))


@cache
def sample(name: str) -> Analysis:
    return analyze_model(load(SAMPLES / name).models[0])


def frame_of(a: Analysis) -> tuple[Graph, Frame]:
    g = a.graph
    assert g is not None
    return g, make_frame(
        g, a.window.start_us, a.window.end_us, main_thread(a.model, g), input_intervals(a.model)
    )


def blocking_calls(g: Graph) -> list[int]:
    return np.flatnonzero(g.call_blocking != Blocking.NO).tolist()


def scenarios(a: Analysis, g: Graph, f: Frame) -> list[Costs]:
    """The what-if's scenarios, the unchanged graph first, and two that change every cost at once."""
    avoidable = frozenset(c for s in a.syncs if s.avoidable for c in s.calls)
    waits = blocking_calls(g)
    return [
        Costs(),
        *scenario_costs(a.model, g, f, lambda *_: avoidable).values(),
        Costs(launch_scale=0.5),
        Costs(host_scale=0.5, input_scale=2.0),
        Costs(
            device_scale=0.3, host_scale=0.7, input_scale=0.0, launch_scale=0.2, no_wait=frozenset(waits[::2])
        ),
        Costs(device_scale=1.7, host_scale=1.3, launch_scale=3.0, no_wait=frozenset(waits[1::2])),
    ]


def assert_same_as_reference(g: Graph, f: Frame, costs: list[Costs]) -> None:
    """``replay_many``, ``replay_ends`` and ``replay`` each give the reference's times, bit for bit."""
    together = replay_many(g, f, costs)
    ends = replay_ends(g, f, costs)
    assert len(together) == len(ends) == len(costs)
    for c, r, end in zip(costs, together, ends, strict=True):
        want = reference_replay(g, f, c)
        assert r.costs == c
        for column in ("call_start", "call_end", "act_start", "act_end"):
            assert same_bits(getattr(r, column), getattr(want, column)), (column, c)
        assert same_bits([r.end_us, end], [want.end_us, want.end_us]), c
    alone = replay(g, f, costs[-1])
    assert same_bits([*alone.call_end, alone.end_us], [*together[-1].call_end, together[-1].end_us])


@pytest.mark.parametrize("name", SAMPLE_NAMES)
@pytest.mark.parametrize("long_chain", [1, 1 << 40])
def test_one_pass_gives_each_scenario_its_own_replay(
    name: str, long_chain: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a sample's graph, chains summed by numpy or a loop
    monkeypatch.setattr(rp, "_LONG_CHAIN", long_chain)
    a = sample(name)
    g, f = frame_of(a)
    assert np.isin(f.agenda_kind, [rp.CALL, rp.END, rp.ACT, rp.PLAIN_ACT]).all()
    # WHEN the what-if's scenarios and two mixed ones are replayed in one pass
    # THEN each scenario's times are the ones of its replay alone, step by step
    assert_same_as_reference(g, f, scenarios(a, g, f))


def test_a_chain_re_times_every_call_of_the_thread() -> None:
    # GIVEN a sample whose host threads run long chains of calls
    g, f = frame_of(sample("launch_bound.pt.trace.json.gz"))
    chained = sum(stop - head - 1 for head, stop in f.chains.items())
    steps = int(np.isin(f.agenda_kind, [rp.CALL]).sum())
    # THEN the agenda keeps a step for every call outside the chains, and the chains cover the rest
    assert chained > 100 and chained + steps == g.calls
    # AND the unchanged replay reproduces every call's recorded times
    r = replay(g, f, Costs())
    np.testing.assert_allclose(r.call_start, g.call_start, rtol=0, atol=1e-6)
    np.testing.assert_allclose(r.call_end, g.call_end, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ["launch_bound.pt.trace.json.gz", "pageable_copy_loop.pt.trace.json.gz"])
@pytest.mark.parametrize("read", ["launch", "handoff"])
def test_a_call_read_before_its_own_step_is_found_not_re_timed_yet(name: str, read: str) -> None:
    # GIVEN a sample's graph where every 5th activity names a call recorded after it as its launch (as
    # clock skew can), or every 4th call waits for a later call of its thread
    a = sample(name)
    g = a.graph
    assert g is not None
    if read == "launch":
        launch = g.act_call.copy()
        for i in range(0, g.activities, 5):
            later = np.flatnonzero(g.call_start > g.act_start[i])
            launch[i] = later[0] if len(later) else -1
        skewed, early = replace(g, act_call=launch), launch[::5][launch[::5] >= 0]
    else:
        dep = g.call_dep.copy()
        waiting = np.arange(0, g.calls - 3, 4)
        dep[waiting] = waiting + 3
        skewed, early = replace(g, call_dep=dep), waiting + 3
    f = make_frame(
        skewed, a.window.start_us, a.window.end_us, main_thread(a.model, g), input_intervals(a.model)
    )
    # THEN those calls keep their own step (a chain would re-time them before the read)
    assert not any(head < c < stop for head, stop in f.chains.items() for c in early.tolist())
    # AND every scenario replayed in one pass is its replay alone, step by step
    assert_same_as_reference(skewed, f, scenarios(a, skewed, f))


scales = st.floats(0.0, 3.0, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(SAMPLE_NAMES), group=st.integers(1, 3), data=st.data())
def test_random_costs_replayed_together_match_one_at_a_time(
    name: str, group: int, data: st.DataObject
) -> None:
    # GIVEN a sample's graph and random costs: scales, and blocking calls that no longer wait
    a = sample(name)
    g, f = frame_of(a)
    no_wait = st.sets(st.sampled_from(blocking_calls(g))) if blocking_calls(g) else st.just(set())
    costs = data.draw(
        st.lists(
            st.builds(
                Costs,
                device_scale=scales,
                host_scale=scales,
                input_scale=st.sampled_from([0.0, 0.5, 1.0, 2.0]),
                launch_scale=scales,
                no_wait=no_wait.map(frozenset),
            ),
            min_size=1,
            max_size=4,
        )
    )
    # WHEN replayed together, and in passes of ``group`` scenarios
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rp, "_group", lambda _g, _n: group)
        ends = replay_ends(g, frame_of(a)[1], costs)
    # THEN each is the replay of those costs alone, step by step
    assert_same_as_reference(g, f, costs)
    assert same_bits(ends, [reference_replay(g, f, c).end_us for c in costs])


def real_traces(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.json.gz")) + sorted(folder.rglob("*.json"))


@pytest.mark.shared
def test_real_traces_replayed_together_match_one_at_a_time(shared_traces: Path) -> None:
    # GIVEN every real trace with a dependency graph (one rank each)
    checked = 0
    for path in real_traces(shared_traces):
        a = analyze_model(load(path).models[0])
        if a.graph is None or a.main_device is None:
            continue
        g, f = frame_of(a)
        # WHEN its what-if scenarios are replayed in one pass THEN each matches its replay alone
        assert_same_as_reference(g, f, scenarios(a, g, f))
        checked += 1
    assert checked >= 10


def test_scenarios_share_a_pass_while_the_graph_is_small() -> None:
    # GIVEN a sample's graph, and the budget of nodes times scenarios held in one pass
    g, _ = frame_of(sample(SAMPLE_NAMES[0]))
    nodes = g.calls + g.activities
    # THEN six scenarios take one pass on a small graph, and two at a time once six would pass the budget
    assert rp._group(g, 6) == 6 and rp._group(g, 1) == 2
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rp, "_NODE_RUNS", nodes * 3)
        assert rp._group(g, 6) == 3
        mp.setattr(rp, "_NODE_RUNS", nodes)
        assert rp._group(g, 6) == 2
