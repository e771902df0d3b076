"""Call sites from legacy ``args["Call stack"]``, library-only stacks, and one finding per site
(GIVEN / WHEN / THEN on hand-built traces); the sites of many events at once equal those found one by one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kineto import Event, WriteTrace, document, span

from stallscope.analyzer.analysis import Analysis, analyze
from stallscope.analyzer.core import sites
from stallscope.analyzer.core.sites import CallSite, call_site, call_sites, stack_site
from stallscope.analyzer.document.analysis import to_json
from stallscope.analyzer.load.loader import load, load_file
from stallscope.analyzer.passes.syncs import SyncKind

TORCH = "/env/lib/python3.7/site-packages/torch/tensor.py(612): item"
USER_STACK = f"{TORCH};train.py(44): <module>"
SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
LIBRARY_STACK = (
    "/env/lib/python3.10/site-packages/torch/nn/functional.py(2380): linear;"
    "/env/lib/python3.10/site-packages/vllm/attention/flashinfer.py(664): forward;"
    "/env/lib/python3.10/site-packages/vllm/worker/model_runner.py(1201): execute_model"
)


def legacy_step(n: int, t0: float, stack: str | None) -> list[Event]:
    """A legacy step (``Operator`` category, as torch 1.8 wrote it): a kernel, then ``.item()`` reading
    its result back (a blocking copy and a stream sync under one op)."""
    corr = 10 * n
    op_args: dict[str, Any] = {"External id": corr}
    if stack is not None:
        op_args["Call stack"] = stack
    item = {"ph": "X", "cat": "Operator", "name": "aten::item", "pid": 1, "tid": 1, "ts": t0 + 20}
    item.update(dur=400, args=op_args)
    return [
        span("Operator", f"ProfilerStep#{n}", t0, 500, pid=1, tid=1),
        span("Runtime", "cudaLaunchKernel", t0 + 5, 5, pid=1, tid=1, correlation=corr + 1),
        item,
        span("Runtime", "cudaMemcpyAsync", t0 + 25, 300, pid=1, tid=1, correlation=corr + 2),
        span("Runtime", "cudaStreamSynchronize", t0 + 330, 5, pid=1, tid=1, correlation=corr + 3),
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "gemm",
            "pid": 0,
            "tid": 7,
            "ts": t0 + 15,
            "dur": 300,
            "args": {"device": 0, "stream": 7, "correlation": corr + 1},
        },
        {
            "ph": "X",
            "cat": "Memcpy",
            "name": "Memcpy DtoH (Device -> Pageable)",
            "pid": 0,
            "tid": 7,
            "ts": t0 + 316,
            "dur": 4,
            "args": {"device": 0, "stream": 7, "correlation": corr + 2},
        },
    ]


def analysed(write_trace: WriteTrace, stack: str | None) -> Analysis:
    events = [e for n in range(1, 5) for e in legacy_step(n, 1000.0 * n, stack)]
    return analyze(load(write_trace(document(events)), use_cache=False))


def test_stack_strings_give_the_innermost_user_frame_or_the_library_frame() -> None:
    assert stack_site(USER_STACK) == CallSite("train.py", 44, "<module>")
    # no user frame: the innermost third-party frame, before torch's, marked as library code
    site = stack_site(LIBRARY_STACK)
    # named from its package, not from the environment it was installed in
    assert site == CallSite("vllm/attention/flashinfer.py", 664, "forward", True)
    assert str(site) == "vllm/attention/flashinfer.py:664 in forward (library code, no user frame)"
    assert stack_site(TORCH) == CallSite("torch/tensor.py", 612, "item", True)
    assert stack_site("<built-in method item>") is None


def test_legacy_call_stack_names_the_sync_and_the_step_is_not_its_op(write_trace: WriteTrace) -> None:
    # GIVEN four legacy steps, each reading a value back with .item() at train.py:44
    a = analysed(write_trace, USER_STACK)
    # THEN each step has one scalar-read sync under aten::item (not under ProfilerStep#N) at train.py:44
    assert [(s.kind, s.op) for s in a.syncs] == [(SyncKind.SCALAR_READ, "aten::item")] * 4
    assert {s.call_site for s in a.syncs} == {CallSite("train.py", 44, "<module>")}
    # AND the repeats are one finding for that site, counted four times (a readback every step)
    (finding,) = [f for f in a.findings if f.rule != "low_utilization"]
    assert finding.count == 4 and finding.call_site == CallSite("train.py", 44, "<module>")
    assert "ProfilerStep" not in finding.title and "no python stack" not in finding.title
    # AND the runtime call's site is found from its op's stack
    ev = a.model.events
    memcpy = next(i for i in range(len(ev)) if a.model.name_of(i) == "cudaMemcpyAsync")
    assert call_site(a.model, memcpy) == CallSite("train.py", 44, "<module>")


def test_library_only_stack_is_named_and_marked_in_the_json(write_trace: WriteTrace, tmp_path: Path) -> None:
    a = analysed(write_trace, LIBRARY_STACK)
    sites = {s.call_site for s in a.syncs}
    assert len(sites) == 1
    (site,) = sites
    assert site is not None and site.library and (site.line, site.function) == (664, "forward")
    doc = json.loads(json.dumps(to_json(a)))
    assert {json.dumps(s["call_site"], sort_keys=True) for s in doc["syncs"]} == {
        json.dumps(
            {"file": site.file, "line": 664, "function": "forward", "library": True},
            sort_keys=True,
        )
    }


def test_without_any_stack_the_finding_is_grouped_by_op_not_by_step(write_trace: WriteTrace) -> None:
    a = analysed(write_trace, None)
    assert {s.call_site for s in a.syncs} == {None}
    (finding,) = [f for f in a.findings if f.rule != "low_utilization"]
    assert finding.count == 4
    assert "in aten::item (no python stack)" in finding.title
    assert "ProfilerStep" not in finding.title


@pytest.mark.parametrize("depth", [1, 2, 3, 512])
def test_call_sites_are_call_site_of_each_event(depth: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN traces with Python frames and a walk limited to ``depth`` events (the limit changes answers)
    monkeypatch.setattr(sites, "_MAX_DEPTH", depth)
    for name in ("launch_bound", "input_bound", "item_in_loop"):
        model = load_file(SAMPLES / f"{name}.pt.trace.json.gz", use_cache=False)
        events = np.arange(-1, len(model.events), dtype=np.int64)
        # WHEN the sites of all events are found at once THEN each is the one found alone
        expected = [call_site(model, e) for e in events.tolist()]
        assert call_sites(model, events) == expected
        assert any(site is not None for site in expected)
