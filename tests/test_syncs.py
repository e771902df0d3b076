"""Syncs: grouping per user-level operation, kind, call site, avoidability (DESIGN.md §4)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _kineto import SAMPLES

from stallscope.analyzer.analysis import Analysis, analyze
from stallscope.analyzer.load.loader import load
from stallscope.analyzer.passes.gaps import Cause
from stallscope.analyzer.passes.syncs import Reason, SyncKind


def analysed(path: Path, rank: int | None = None) -> Analysis:
    return analyze(load(path), rank)


def test_item_in_a_loop_is_one_repeated_scalar_read_per_step_and_the_final_sync_is_not_false() -> None:
    # GIVEN .item() in train.py(42): train_step every step, then one torch.cuda.synchronize() at the end
    a = analysed(SAMPLES / "item_in_loop.pt.trace.json.gz")
    # THEN each .item() (blocking copy + stream sync) is one scalar_read sync at that line, avoidable
    *items, final = a.syncs
    assert len(items) == 4 == len(a.steps)
    assert {(s.kind, s.op, s.api) for s in items} == {(SyncKind.SCALAR_READ, "aten::item", "cudaMemcpyAsync")}
    assert all(len(s.calls) == 2 for s in items)  # cudaMemcpyAsync + cudaStreamSynchronize grouped
    assert {str(s.call_site) for s in items} == {"train.py:42 in train_step"}
    assert all(s.avoidable and s.reasons == (Reason.REPEATED,) for s in items)
    assert [s.bubble_us for s in items] == pytest.approx([364.0] * 4)
    # AND the final synchronize is blanket but not a false sync
    assert final.kind == SyncKind.BLANKET and not final.avoidable and final.reasons == ()
    assert (a.summary.sync_count, a.summary.avoidable_sync_count) == (5, 4)


def test_pageable_copies_are_syncs_even_when_the_stream_was_idle() -> None:
    a = analysed(SAMPLES / "pageable_copy_loop.pt.trace.json.gz")
    copies = [s for s in a.syncs if s.kind == SyncKind.PAGEABLE_COPY]
    assert len(copies) == 4 and copies[0].wait_us < 10 < copies[1].wait_us  # step 1: nothing to wait for
    assert all(set(s.reasons) == {Reason.PAGEABLE_COPY, Reason.REPEATED} for s in copies)
    assert {s.op for s in copies} == {"aten::to"}


def test_clean_pipeline_has_no_false_sync_and_the_serial_worked_example_has_three() -> None:
    clean = analysed(SAMPLES / "clean_pipeline.pt.trace.json.gz")
    assert clean.summary.avoidable_sync_count == 0 and clean.summary.sync_count == 1
    serial = analysed(SAMPLES / "worked_example_serial.pt.trace.json.gz")
    assert [(s.kind, set(s.reasons)) for s in serial.syncs] == [
        (SyncKind.BLANKET, {Reason.BLANKET, Reason.REPEATED})
    ] * 3
    # the gaps after them are charged to them: their bubbles add up to the sync-caused idle
    bubbles = sum(s.bubble_us for s in serial.syncs)
    assert bubbles == pytest.approx(sum(g.charged_us for g in serial.gaps))
    assert bubbles == pytest.approx(serial.idle_by_cause[Cause.SYNC]) and bubbles > 4000


def test_item_chain_in_the_hta_trace_is_one_scalar_read_and_device_sync_is_blanket(
    shared_traces: Path,
) -> None:
    a = analysed(shared_traces / "hta_a100_item_event_sync.pt.trace.json.gz")
    kinds = [(s.kind, s.api, s.op) for s in a.syncs]
    assert kinds == [
        (SyncKind.SCALAR_READ, "cudaMemcpyAsync", "aten::is_nonzero"),
        (SyncKind.EVENT, "cudaEventSynchronize", None),
        (SyncKind.BLANKET, "cudaDeviceSynchronize", None),
    ]
    assert len(a.syncs[0].calls) == 2  # the DtoH pageable copy and the stream sync: one operation


def test_item_in_the_bert_trace_gets_the_user_call_site(shared_traces: Path) -> None:
    a = analysed(shared_traces / "tracelens_h100_bert_small_pystack.pt.trace.json.gz")
    (item,) = a.syncs
    assert item.kind == SyncKind.SCALAR_READ
    assert item.call_site is not None
    # transformers/ and torch/ frames are library code: the innermost user frame is the harness
    assert (item.call_site.file, item.call_site.line, item.call_site.function) == (
        "moca/library/model_hub/huggingface/model/adapters/text_base_model.py",
        28,
        "run_on_input",
    )


def test_dlrm_syncs_are_reported_per_rank(shared_traces: Path) -> None:
    a = analysed(shared_traces / "param_dlrm_v100_8rank")
    assert sorted(a.per_rank) == list(range(8))
    counts = {r: s.sync_count for r, s in a.per_rank.items()}
    assert all(isinstance(n, int) and n > 0 for n in counts.values())
    assert counts[0] == a.summary.sync_count == len(a.syncs)


def _bundle_with_sidecar(tmp_path: Path, sidecar: object) -> Path:
    import json
    import shutil

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    shutil.copy(SAMPLES / "item_in_loop.pt.trace.json.gz", bundle / "trace.pt.trace.json.gz")
    (bundle / "sidecar.json").write_text(json.dumps(sidecar))
    return bundle


def test_the_collectors_exact_line_wins_over_the_python_frame(tmp_path: Path) -> None:
    # GIVEN a bundle whose sidecar recorded `loss.item()` at train.py:47 (inside train_step, defined at
    # line 42) on the trace's thread, a few µs before each aten::item
    model = load(SAMPLES / "item_in_loop.pt.trace.json.gz").models[0]
    items = [i for i in range(model.event_count) if model.name_of(i) == "aten::item"]
    thread = model.lanes[int(model.events.lane[items[0]])].tid
    times = [float(model.events.ts[i]) - 3.0 for i in items]
    sidecar = {
        "schema": "stallscope.sidecar/1",
        "run": {"torch": "2.13.0"},
        "sync_sites": [
            {"file": "train.py", "line": 47, "function": "train_step", "op": "Tensor.item", "thread": thread,
             "count": len(times), "first_us": times[0], "times_us": times},
        ],
    }  # fmt: skip
    # WHEN the bundle is analysed
    a = analysed(_bundle_with_sidecar(tmp_path, sidecar))
    # THEN the .item() syncs (and their finding) carry the exact line; the final synchronize, which the
    # sidecar did not record, keeps its frame's line
    *item_syncs, final = a.syncs
    assert {str(s.call_site) for s in item_syncs} == {"train.py:47 in train_step"}
    assert str(final.call_site) == "train.py:42 in train_step"
    assert str(a.findings[0].call_site) == "train.py:47 in train_step"


@pytest.mark.parametrize(
    ("library", "call", "named", "says"),
    [
        ("torch.optim.lbfgs", "torch.optim.lbfgs.LBFGS.step", "torch.optim.LBFGS.step", "max_iter"),
        ("torch.distributions.distribution", "torch.distributions.normal.Normal.__init__",
         "torch.distributions.Normal", "`Normal(..., validate_args=False)`"),
        ("scipy.optimize._minimize", "scipy.optimize._minimize.minimize", "scipy.optimize._minimize.minimize",
         "(scipy)"),
    ],
)  # fmt: skip
def test_a_sync_inside_a_library_call_names_it_and_gets_its_advice(
    tmp_path: Path, library: str, call: str, named: str, says: str
) -> None:
    # GIVEN the .item() loop's bundle whose sidecar recorded each read inside a library call of line 47
    model = load(SAMPLES / "item_in_loop.pt.trace.json.gz").models[0]
    items = [i for i in range(model.event_count) if model.name_of(i) == "aten::item"]
    thread = model.lanes[int(model.events.lane[items[0]])].tid
    times = [float(model.events.ts[i]) - 3.0 for i in items]
    sidecar = {
        "schema": "stallscope.sidecar/1",
        "sync_sites": [
            {"file": "train.py", "line": 47, "function": "train_step", "op": "Tensor.item", "thread": thread,
             "count": len(times), "first_us": times[0], "times_us": times, "library": library,
             "library_call": call},
        ],
    }  # fmt: skip
    a = analysed(_bundle_with_sidecar(tmp_path, sidecar))
    # THEN the GPU finding stays at the user's line, names the library call, and advises on that call
    (f,) = [f for f in a.findings if f.rule == "false_sync_scalar_read"]
    assert str(f.call_site) == "train.py:47 in train_step"
    assert f"inside `{named}`" in f.title and says in f.advice
    assert "loss.detach()" not in f.advice


@pytest.mark.parametrize("sidecar", [{"schema": "something/9"}, "not an object", {"schema": "stallscope.sidecar/1",
                                     "sync_sites": [{"file": "x.py"}]}])  # fmt: skip
def test_an_unusable_sidecar_is_ignored_with_a_note(tmp_path: Path, sidecar: object) -> None:
    a = analysed(_bundle_with_sidecar(tmp_path, sidecar))
    assert any("sidecar.json: ignored" in n for n in a.notes)
    assert {str(s.call_site) for s in a.syncs} == {"train.py:42 in train_step"}  # frames still work
