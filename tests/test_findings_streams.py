"""Stream findings (stallscope.analyzer.findings.streams): each rule on a planted trace and its clean twin, silent on
the sample traces, and run on the real traces."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from _kineto import SAMPLES
from synth import library as sc
from synth.trace import SynthTrace

from stallscope.analyzer.analysis import Analysis, analyze, analyze_model
from stallscope.analyzer.findings import registry, streams
from stallscope.analyzer.findings.base import Finding, Severity
from stallscope.analyzer.findings.streams import (
    copy_compute_serialized,
    streams_never_overlapped,
    unsynchronized_pinned_readback,
)
from stallscope.analyzer.load.loader import load

Rule = Callable[[Analysis], list[Finding]]
#: the stream rules, in the registry's order
RULES = [rule for rule in registry.RULES if rule.__module__ == streams.__name__]
SAMPLE_TRACES = sorted(p.name for p in SAMPLES.glob("*.pt.trace.json.gz"))


def analysed(s: SynthTrace, tmp_path: Path) -> Analysis:
    return analyze(load(s.write(tmp_path / f"{s.name}.pt.trace.json.gz")))


def only(rule: Rule, a: Analysis) -> Finding:
    (found,) = rule(a)
    return found


# ----- copy_compute_serialized -------------------------------------------------------------------------


def test_copies_on_the_compute_stream_are_found_with_their_site_cost_and_saving(tmp_path: Path) -> None:
    # GIVEN 4 pinned 300 µs host-to-device copies queued on stream 7 behind 3 x 400 µs kernels a step
    a = analysed(sc.copy_on_compute_stream(), tmp_path)
    f = only(copy_compute_serialized, a)
    # THEN one finding at the copy's line; the device-bound path runs through all 1200 µs of copies
    assert f.rule == "copy_compute_serialized" and f.count == 4
    assert str(f.call_site) == "train.py:30 in train_step"
    assert f.time_us == pytest.approx(1200.0, abs=1)
    assert f.severity == Severity.HIGH  # 1200 µs of a 6 ms window
    # the replay with the copies hidden saves about their time, never more than the cost
    assert 0.9 * f.time_us <= f.est_saving_us <= f.time_us
    assert "torch.cuda.Stream()" in f.advice and "non_blocking=True" in f.advice and "pin" in f.advice


def test_copies_prefetched_on_a_side_stream_are_not_flagged(tmp_path: Path) -> None:
    a = analysed(sc.side_stream_copies(), tmp_path)
    assert copy_compute_serialized(a) == []


def test_a_small_share_of_copies_is_not_flagged(tmp_path: Path) -> None:
    # 4 x 20 µs of copies in a ~5 ms window: under 5%
    a = analysed(sc.copy_on_compute_stream(copy_us=20.0), tmp_path)
    assert copy_compute_serialized(a) == []


# ----- streams_never_overlapped ------------------------------------------------------------------------


def test_streams_serialized_by_event_waits_are_found(tmp_path: Path) -> None:
    # GIVEN side work on stream 20 that waits for stream 7, and stream 7 waiting for it in the next step
    a = analysed(sc.serialized_streams(), tmp_path)
    f = only(streams_never_overlapped, a)
    # THEN both streams are reported; the cost is the shorter stream's busy time (2 x 300 µs x 4 steps)
    assert f.rule == "streams_never_overlapped" and f.count == 2
    assert "streams 7, 20" in f.title
    assert f.time_us == pytest.approx(2400.0, abs=1) and f.severity == Severity.HIGH
    assert f.est_saving_us == 0.0
    assert str(f.call_site) == "train.py:30 in train_step"
    assert "wait_event" in f.advice and "synchronize()" in f.advice


def test_streams_that_overlap_are_not_flagged(tmp_path: Path) -> None:
    a = analysed(sc.serialized_streams(serialized=False), tmp_path)
    assert streams_never_overlapped(a) == []
    assert streams_never_overlapped(analysed(sc.side_stream_copies(), tmp_path)) == []


def test_a_single_stream_is_not_flagged(tmp_path: Path) -> None:
    assert streams_never_overlapped(analysed(sc.copy_on_compute_stream(), tmp_path)) == []


# ----- unsynchronized_pinned_readback ------------------------------------------------------------------


def test_a_pinned_readback_nobody_waits_for_is_a_correctness_risk(tmp_path: Path) -> None:
    # GIVEN out = logits.to("cpu", non_blocking=True) every step; only the last step synchronizes
    a = analysed(sc.pinned_readback_without_sync(), tmp_path)
    f = only(unsynchronized_pinned_readback, a)
    # THEN the three unsynchronized steps are reported, high severity whatever the cost
    assert f.rule == "unsynchronized_pinned_readback" and f.count == 3
    assert f.severity == Severity.HIGH and "correctness risk" in f.title
    assert f.time_us == 0.0 and f.est_saving_us == 0.0
    assert str(f.call_site) == "infer.py:25 in predict"
    assert "ev.synchronize()" in f.advice and "ev.record()" in f.advice


def test_a_pinned_readback_after_an_event_synchronize_is_not_flagged(tmp_path: Path) -> None:
    a = analysed(sc.pinned_readback_with_event_sync(), tmp_path)
    assert unsynchronized_pinned_readback(a) == []


def test_a_wait_on_another_stream_that_waited_for_the_copy_counts(tmp_path: Path) -> None:
    # GIVEN the readback on stream 7, stream 20 waiting on an event after it, and a stream 20 synchronize
    s = SynthTrace("readback_through_an_event")
    with s.py_frame("infer.py", 10, "main"):
        for _ in range(3):
            with s.step(), s.py_frame("infer.py", 25, "predict"):
                s.launch(sc.GEMM, 200.0)
                s.memcpy("DtoH", 1 << 20, 20.0, pinned=True, non_blocking=True)
                s.stream_wait_event(20, s.event_record(7))
                s.launch(sc.ADD, 10.0, stream=20)
                s.stream_synchronize(20)
    # THEN the copy is known to be done when the synchronize returns
    assert unsynchronized_pinned_readback(analysed(s, tmp_path)) == []


def test_a_sync_after_the_step_ended_does_not_count(tmp_path: Path) -> None:
    # GIVEN the readback in each step and the synchronize only at the top of the next step
    s = SynthTrace("late_sync")
    with s.py_frame("infer.py", 10, "main"):
        for i in range(3):
            with s.step(), s.py_frame("infer.py", 25, "predict"):
                if i:
                    s.stream_synchronize(7)
                s.launch(sc.GEMM, 200.0)
                s.memcpy("DtoH", 1 << 20, 20.0, pinned=True, non_blocking=True)
    assert only(unsynchronized_pinned_readback, analysed(s, tmp_path)).count == 3


def test_a_pageable_readback_is_not_this_rule(tmp_path: Path) -> None:
    # .item() copies into pageable memory and blocks: a sync, not a race
    assert unsynchronized_pinned_readback(analyze(load(SAMPLES / "item_in_loop.pt.trace.json.gz"))) == []


# ----- every rule ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SAMPLE_TRACES)
def test_every_rule_is_silent_on_the_sample_traces(name: str) -> None:
    a = analyze(load(SAMPLES / name))
    assert [f for rule in RULES for f in rule(a)] == []


def test_the_sample_traces_are_all_there() -> None:
    assert len(SAMPLE_TRACES) == 9


@pytest.mark.shared
def test_every_rule_runs_on_the_real_traces(shared_traces: Path) -> None:
    # every file, each rank of the multi-rank DLRM folder included
    paths = [*sorted(shared_traces.glob("*.pt.trace.json.gz")), shared_traces / "param_dlrm_v100_8rank"]
    found: dict[str, list[Finding]] = {}
    for path in paths:
        traces = load(path)
        for rank, model in zip(traces.ranks, traces.models, strict=True):
            a = analyze_model(model)
            found[f"{path.name}#{rank}"] = [f for rule in RULES for f in rule(a)]
    every = [f for fs in found.values() for f in fs]
    # no host<->device copy from pinned memory is serialized with compute, no pinned readback is unwaited
    # (the BERT trace's pinned copy is followed by a cudaStreamSynchronize)
    assert {f.rule for f in every} <= {"streams_never_overlapped"}
    # the streams found never overlapping are small, low-severity shares of their windows
    assert all(f.severity == Severity.LOW for f in every)
    assert [f.count for f in found["hta_a100_multistream_event_sync.pt.trace.json.gz#0"]] == [3]
