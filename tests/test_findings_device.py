"""Device findings (stallscope.analyzer.findings.device): each rule on its planted trace, silent on its clean twin
and on the committed samples, and safe on the real traces."""

from __future__ import annotations

from pathlib import Path

import pytest
from _kineto import SAMPLES
from synth import library as S
from synth.trace import SynthTrace

from stallscope.analyzer.analysis import Analysis, analyze
from stallscope.analyzer.findings import device, registry
from stallscope.analyzer.findings.base import Finding, Severity
from stallscope.analyzer.load.loader import load
from stallscope.analyzer.passes.syncs import SyncKind

#: the device rules, in the registry's order
RULES = [rule for rule in registry.RULES if rule.__module__ == device.__name__]


def analysed(sc: SynthTrace, tmp_path: Path) -> Analysis:
    return analyze(load(sc.write(tmp_path / f"{sc.name}.pt.trace.json.gz")))


def device_findings(a: Analysis) -> list[Finding]:
    return [f for rule in RULES for f in rule(a)]


def test_cuda_free_is_a_device_wide_allocator_sync(tmp_path: Path) -> None:
    # GIVEN empty_cache() (cudaFree) at train.py:30 in steps 2..5 of 5
    a = analysed(S.allocator_free_in_loop(), tmp_path)
    # THEN each is an allocator sync, avoidable as repeated, reported once by findings.py and not here
    allocator = [s for s in a.syncs if s.kind == SyncKind.ALLOCATOR]
    assert len(allocator) == 4 and all(s.avoidable and s.api == "cudaFree" for s in allocator)
    assert allocator[0].wait_us > 1000  # it waited for the kernels queued before it
    found = [f for f in a.findings if f.call_site and str(f.call_site) == "train.py:30 in train_step"]
    assert [f.rule for f in found] == ["false_sync_allocator"] and found[0].count == 4
    assert device_findings(a) == []


def test_occasional_allocator_syncs_in_the_steady_state_are_found_once(tmp_path: Path) -> None:
    # GIVEN a cache flush in 2 of 6 steps (not most of them: not avoidable)
    a = analysed(S.allocator_free_in_loop(steps=6, every=2), tmp_path)
    (f,) = device_findings(a)
    assert f.rule == "allocator_sync" and f.count == 2 and str(f.call_site) == "train.py:30 in train_step"
    assert f.time_us > 0 and 0 < f.est_saving_us <= f.time_us and "expandable_segments" in f.advice
    assert not [x for x in a.findings if x.rule == "false_sync_allocator"]


def test_allocator_warmup_in_the_first_step_is_silent(tmp_path: Path) -> None:
    a = analysed(S.allocator_warmup(), tmp_path)
    assert [s.step for s in a.syncs if s.kind == SyncKind.ALLOCATOR] == [0]
    assert device_findings(a) == []


def test_fp32_gemms_on_a_tensor_core_gpu_are_found(tmp_path: Path) -> None:
    a = analysed(S.gemm_loop(precision="fp32"), tmp_path)
    (f,) = device_findings(a)
    assert f.rule == "tensor_cores_unused" and f.count == 20 and f.call_site is None
    assert f.time_us == pytest.approx(20 * 400.0, rel=1e-6)
    assert a.whatif is not None
    assert 0 < f.est_saving_us <= 0.5 * f.time_us + 1  # half the kernels at most
    assert "allow_tf32" in f.advice and "bfloat16" in f.advice and "channels_last" in f.advice


@pytest.mark.parametrize(
    "sc",
    [S.gemm_loop(precision="bf16"), S.gemm_loop(precision="fp32", compute_major=6)],
    ids=["bf16", "sm60"],
)
def test_tensor_core_gemms_or_an_older_gpu_are_silent(sc: SynthTrace, tmp_path: Path) -> None:
    assert device_findings(analysed(sc, tmp_path)) == []


def test_memory_near_capacity(tmp_path: Path) -> None:
    a = analysed(S.memory_pressure(reserved_share=0.95), tmp_path)
    assert a.model.devices[0].peak_reserved_bytes > 0.94 * 85018279936
    (f,) = device_findings(a)
    assert f.rule == "memory_near_capacity" and f.severity == Severity.MEDIUM and f.time_us == 0
    assert "95%" in f.title and "checkpoint" in f.advice
    assert device_findings(analysed(S.memory_pressure(reserved_share=0.5), tmp_path)) == []


def test_decode_loop_reading_every_token_back(tmp_path: Path) -> None:
    # GIVEN 8 decode steps, each ending in next_token.item() and 150 us of host post-processing
    a = analysed(S.decode_loop(), tmp_path)
    (f,) = device_findings(a)
    assert f.rule == "autoregressive_readback" and f.count == 8
    assert str(f.call_site) == "generate.py:30 in decode_step"
    bubbles = sum(s.bubble_us for s in a.syncs if s.kind == SyncKind.SCALAR_READ)
    assert f.time_us == pytest.approx(bubbles) and f.est_saving_us == pytest.approx(bubbles)
    assert 8 * 150 <= bubbles <= 8 * 200
    assert "overlap" in f.advice.lower() and "SGLang" in f.advice
    # the clean twin keeps the tokens on the device and reads them once at the end
    assert device_findings(analysed(S.decode_loop(readback=False), tmp_path)) == []


def test_a_training_loop_item_is_not_a_decode_readback() -> None:
    # item_in_loop launches the backward after its .item(): not the end of a decode step
    a = analyze(load(SAMPLES / "item_in_loop.pt.trace.json.gz"))
    assert "false_sync_scalar_read" in [f.rule for f in a.findings]
    assert device_findings(a) == []


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.pt.trace.json.gz")), ids=lambda p: p.name)
def test_samples_are_silent(path: Path) -> None:
    assert device_findings(analyze(load(path))) == []


def test_real_traces(shared_traces: Path) -> None:
    found: dict[str, list[str]] = {}
    paths = [*sorted(shared_traces.glob("*.pt.trace.json.gz")), shared_traces / "param_dlrm_v100_8rank"]
    for path in paths:
        if path.exists():
            found[path.name] = [f.rule for f in device_findings(analyze(load(path)))]
    # FP32 sgemm kernels on an A100 and a V100; no allocator syncs in steps, no memory pressure, no decode loop
    assert found["hta_a100_multistream_event_sync.pt.trace.json.gz"] == ["tensor_cores_unused"]
    assert found["hta_v100_ns_resolution_rank0.pt.trace.json.gz"] == ["tensor_cores_unused"]
    assert found["tracelens_h100_bert_small_pystack.pt.trace.json.gz"] == []
    # DLRM's all-to-all and all-reduce kernels are 22% of rank 0's critical path
    assert found["param_dlrm_v100_8rank"] == ["communication_bound"]
    others = {
        k: v for k, v in found.items() if not any(w in k for w in ("multistream", "ns_resolution", "dlrm"))
    }
    assert all(v == [] for v in others.values()), others
