"""Top tables (stallscope.analyzer.passes.tops): ops by self time and kernels by device time, on a hand-built trace."""

from __future__ import annotations

import numpy as np
import pytest
from _kineto import WriteTrace, document, kernel, span

from stallscope.analyzer.analysis import analyze
from stallscope.analyzer.document.analysis import to_json
from stallscope.analyzer.load.loader import load
from stallscope.analyzer.passes.tops import top_tables
from stallscope.render.summary import render


def trace() -> list[dict[str, object]]:
    """Two 1 ms steps: aten::linear (400 µs) holding aten::mm (300 µs) each step, one aten::relu (50 µs)
    outside the steps; kernels: an FP32 sgemm and a tensor-core one, twice each."""
    ev: list[dict[str, object]] = []
    for i in range(2):
        t = i * 1_000.0
        ev.append(span("user_annotation", f"ProfilerStep#{i + 1}", t, 1_000, External_id=50 + i))
        ev.append(span("cpu_op", "aten::linear", t + 10, 400, External_id=10 + i))
        ev.append(span("cpu_op", "aten::mm", t + 20, 300, External_id=20 + i))
        ev.append(kernel("volta_sgemm_128x64_nn", t + 30, 100, 30 + i))
        ev.append(kernel("ampere_fp16_s16816gemm_fp16_128x128", t + 200, 40, 40 + i))
    ev.append(span("cpu_op", "aten::relu", 1_990, 5))
    return ev


def test_ops_by_self_time_and_kernels_by_device_time(write_trace: WriteTrace) -> None:
    a = analyze(load(write_trace(document(trace()))))
    t = top_tables(a.model, a.window.start_us, a.window.end_us)
    ops = {r.name: r for r in t.ops}
    # THEN aten::linear's self time is its 400 µs less the 300 µs of aten::mm nested in it, per call
    assert (ops["aten::linear"].count, ops["aten::linear"].total_us, ops["aten::linear"].self_us) == (
        2,
        800,
        200,
    )
    assert (ops["aten::mm"].self_us, ops["aten::mm"].in_steps, ops["aten::mm"].per_step_us) == (600, 2, 300)
    assert [r.name for r in t.ops][:2] == ["aten::mm", "aten::linear"]  # by self time
    k = {r.name: r for r in t.kernels}
    assert k["volta_sgemm_128x64_nn"].total_us == 200 and k["volta_sgemm_128x64_nn"].mean_us == 100
    assert k["volta_sgemm_128x64_nn"].tensor_cores is False
    assert k["ampere_fp16_s16816gemm_fp16_128x128"].tensor_cores is True
    # AND the JSON carries both tables; --top-ops N prints N of each
    doc = to_json(a)
    assert doc["tops"]["ops"][0]["name"] == "aten::mm" and doc["tops"]["ops"][0]["self_us"] == pytest.approx(
        600
    )
    text = render(a, top_ops=1)
    assert "top ops" in text and "aten::mm" in text and "aten::linear" not in text
    assert "volta_sgemm_128x64_nn" in text and "top kernels" in text
    assert "top ops" not in render(a)  # a GPU run shows them only when asked


def test_an_op_under_a_python_frame_under_an_op_counts_as_nested(write_trace: WriteTrace) -> None:
    # GIVEN `.item()` recorded with Python stacks: aten::item > <built-in method item> > _local_scalar_dense
    ev = [
        span("user_annotation", "ProfilerStep#1", 0, 1_000),
        span("python_function", "train.py(42): train_step", 5, 990),
        span("cpu_op", "aten::item", 10, 900),
        span("python_function", "<built-in method item of Tensor object>", 11, 890),
        span("cpu_op", "aten::_local_scalar_dense", 12, 880),
    ]
    t = top_tables(analyze(load(write_trace(document(ev)))).model, 0, 1_000)
    ops = {r.name: r for r in t.ops}
    # THEN the scalar read holds the time, and aten::item's self time is only what lies outside it
    assert ops["aten::_local_scalar_dense"].self_us == 880
    assert ops["aten::item"].self_us == pytest.approx(20)
    assert [r.name for r in t.ops] == ["aten::_local_scalar_dense", "aten::item"]


def test_grouping_by_name_matches_a_dictionary() -> None:
    from stallscope.analyzer.passes.tops import _group

    rng = np.random.default_rng(3)
    for low in (0, -3):  # name codes as the loader makes them, and (never from the loader) negative ones
        names = rng.integers(low, 40, 500)
        total, own = rng.random(500), rng.random(500)
        flag = rng.random(500) < 0.5
        expected: dict[int, list[float]] = {}
        for n, t, o, f in zip(names.tolist(), total.tolist(), own.tolist(), flag.tolist(), strict=True):
            row = expected.setdefault(n, [0, 0.0, 0.0, 0])
            row[0] += 1
            row[1] += t
            row[2] += o
            row[3] += f
        rows = _group(names, total, own, flag)
        assert [r[0] for r in rows] == sorted(expected)
        for code, count, tot, slf, flagged in rows:
            want = expected[code]
            assert (count, flagged) == (want[0], want[3])
            assert tot == pytest.approx(want[1]) and slf == pytest.approx(want[2])
