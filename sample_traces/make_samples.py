"""Regenerate the committed sample traces and their expected answers, deterministically.

    python sample_traces/make_samples.py

writes, next to this file, one ``<name>.pt.trace.json.gz`` per ready-made trace of ``tests/synth/library.py``,
``expected.json`` (the simulated ground truth, keyed by file name) and ``EXPECTED.md`` (the same, for people).
Running it twice produces byte-identical files.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# the builder lives beside the tests (tests/synth), not in the installed package: this script runs from
# the repository root, where tests/ is not on the path as it is under pytest
sys.path.insert(0, str(HERE.parent / "tests"))

from synth import library as sc  # noqa: E402

Build = Callable[[sc.WhatIfKnobs], sc.SynthTrace]

#: file name -> (builder taking the what-if knobs, the parameters it was built with, one-line description)
Sample = tuple[Build, dict[str, Any], str]


def _sample(make: Callable[..., sc.SynthTrace], params: dict[str, Any], about: str) -> Sample:
    """The parameters are recorded exactly as they are passed: one source for both."""
    return (lambda w: make(**params, whatif=w)), params, about


SAMPLES: dict[str, Sample] = {
    "worked_example_serial.pt.trace.json.gz": _sample(
        sc.worked_example,
        {"prep_ms": 2, "gpu_ms": 6, "batches": 3, "pipelined": False},
        "DESIGN.md worked example, serial: prep 2 ms, 6 ms of kernels, torch.cuda.synchronize() every batch.",
    ),
    "worked_example_pipelined.pt.trace.json.gz": _sample(
        sc.worked_example,
        {"prep_ms": 2, "gpu_ms": 6, "batches": 3, "pipelined": True},
        "DESIGN.md worked example, pipelined: no sync in the loop, one final synchronize.",
    ),
    "worked_example_hostbound.pt.trace.json.gz": _sample(
        sc.worked_example,
        {"prep_ms": 8, "gpu_ms": 6, "batches": 3, "pipelined": True},
        "DESIGN.md worked example with P=8 ms > G=6 ms, pipelined: host-bound.",
    ),
    "launch_bound.pt.trace.json.gz": _sample(
        sc.launch_bound_loop,
        {"steps": 4, "kernels_per_step": 40, "kernel_us": 3, "op_self_us": 25},
        "160 tiny 3 µs kernels, ~32 µs of host time per launch: low utilization, host-bound.",
    ),
    "item_in_loop.pt.trace.json.gz": _sample(
        sc.item_in_loop,
        {"steps": 4, "fwd_us": 400, "bwd_us": 800, "log_us": 200},
        "loss.item() every step inside train.py(42): train_step (repeated scalar_read sync).",
    ),
    "pageable_copy_loop.pt.trace.json.gz": _sample(
        sc.pageable_copy_loop,
        {"steps": 4, "copy_us": 250, "kernel_us": 500},
        "x.to('cuda', non_blocking=True) from pageable memory every step: a sync in disguise.",
    ),
    "input_bound.pt.trace.json.gz": _sample(
        sc.input_bound_loop,
        {"steps": 4, "load_us": 3000, "copy_us": 100, "kernel_us": 300},
        "3 ms of single-process data loading per step for 1 ms of device work: input-bound.",
    ),
    "multistream_overlap.pt.trace.json.gz": _sample(
        sc.multistream_overlap,
        {"steps": 4, "copy_us": 400, "kernel_us": 300},
        "Compute on stream 7, prefetch copies on stream 20, cudaStreamWaitEvent; final cudaEventSynchronize.",
    ),
    "clean_pipeline.pt.trace.json.gz": _sample(
        sc.clean_pipeline,
        {"steps": 5, "kernels": 5, "kernel_us": 300, "op_self_us": 40},
        "Well pipelined, no sync in the loop, one final synchronize: zero avoidable syncs, device-bound.",
    ),
}


def expected_for(build: Build, params: dict[str, Any], about: str) -> dict[str, Any]:
    """Ground truth of one sample: the baseline simulation plus each what-if re-simulation."""
    trace = build(sc.WhatIfKnobs())
    truth = sc.ground_truth(trace)
    truth = {"about": about, "params": params, **truth, "whatif": sc.whatif_table(build)}
    if trace.name.startswith("worked_example"):
        p, g, n = params["prep_ms"] * 1000, params["gpu_ms"] * 1000, params["batches"]
        ideal = sc.PipelineFigures.of(p, g, n)
        truth["pipeline_ideal"] = {
            "host_prep_us": p,
            "device_us": g,
            "batches": n,
            "serial_us": ideal.serial_us,
            "pipelined_us": ideal.pipelined_us,
            "bottleneck": ideal.bottleneck,
            "expected_wall_us": ideal.pipelined_us if params["pipelined"] else ideal.serial_us,
        }
    return truth


def markdown(expected: dict[str, dict[str, Any]]) -> str:
    """EXPECTED.md: the same numbers as expected.json, one section per trace."""
    out = [MD_HEAD]
    for name, t in expected.items():
        w, d, cp = t["window"], t["device"], t["critical_path"]
        out.append(
            f"## `{name}`\n\n{t['about']}  \n"
            f"Scenario `{t['scenario']}`, parameters `{json.dumps(t['params'])}`.\n"
        )
        out.append(
            f"- window (steps): {w['start_us']} .. {w['end_us']} = **{w['dur_us']} µs**; "
            f"steps: **{len(t['steps'])}**"
        )
        out.append(
            f"- device busy **{d['busy_us']} µs**, idle **{d['idle_us']} µs**, utilization {d['utilization']}"
        )
        bd = ", ".join(f"{k} {v}" for k, v in cp["breakdown_us"].items() if v)
        out.append(f"- critical path **{cp['length_us']} µs**: {bd}; bottleneck **{cp['bottleneck']}**")
        out.append(
            f"- syncs: **{t['sync_count']}** ({t['avoidable_sync_count']} avoidable), "
            f"host sync wait {t['host_sync_wait_us']} µs"
        )
        for s in t["syncs"]:
            site = s["call_site"]
            where = f"{site['file']}:{site['line']} {site['function']}" if site else "-"
            why = ", ".join(s["reason"]) or "not avoidable"
            out.append(
                f"  - #{s['index']} `{s['kind']}` via `{s['api']}` (op `{s['op']}`) at {s['start_us']}: "
                f"wait {s['wait_us']} µs, bubble {s['bubble_us']} µs; {why}; call site {where}"
            )
        causes: dict[str, list[float]] = {}
        for g in t["gaps"]:
            causes.setdefault(g["cause"], []).append(g["dur_us"])
        gaps = "; ".join(f"{c}: {len(v)} gaps, {round(sum(v), 3)} µs" for c, v in causes.items()) or "none"
        out.append(f"- gaps (>= 20 µs): {gaps}")
        p = t["pipeline"]
        out.append(
            f"- pipeline from the trace: P {p['host_prep_us']} µs, G {p['device_us']} µs, "
            f"n {p['batches']} -> "
            f"serial {p['serial_us']} µs, pipelined {p['pipelined_us']} µs, {p['bottleneck']}-bound"
        )
        if "pipeline_ideal" in t:
            i = t["pipeline_ideal"]
            err = (w["dur_us"] - i["expected_wall_us"]) / i["expected_wall_us"] * 100
            out.append(
                f"- DESIGN.md model: P {i['host_prep_us']}, G {i['device_us']}, n {i['batches']} -> serial "
                f"{i['serial_us']} µs, pipelined {i['pipelined_us']} µs ({i['bottleneck']}-bound); "
                "the simulated "
                f"window differs from the model's {i['expected_wall_us']} µs by {err:+.2f}%"
            )
        wi = ", ".join(f"{x['scenario']} {x['predicted_wall_us']} (-{x['saving_us']})" for x in t["whatif"])
        out.append(f"- what-if wall µs (saving): {wi}\n")
    return "\n".join(out)


MD_HEAD = """# Sample traces and the answers the analyzer must give

Generated by `python sample_traces/make_samples.py` from `tests/synth/` (a discrete-event model);
every number below is computed by the simulation; `expected.json` holds the same numbers keyed by file name.
Regenerating is deterministic (byte-identical files).

Conventions. Times are µs on the trace clock (`ts` as written; the first step starts at 1700000000000).
The window is first to last `ProfilerStep#N`. Busy = union of kernel/memcpy/memset intervals in the window.
A sync's `wait_us` is the summed duration of its blocking runtime calls (for `.item()`: the blocking
`cudaMemcpyAsync` plus the `cudaStreamSynchronize`); `api` is the call that blocked longest. `bubble_us` is
the idle of the gaps (>= 20 µs) after the sync returned, before the next sync, capped at `wait_us`. P (pipeline) =
median per-step (step duration - sync wait in the step); G = median per-step union of device time launched in
that step. Critical path: walk back from the window end; `launch` = runtime call start to the kernel start
it bound (launch latency 5 µs), `sync` = awaited device end to the blocking call's return (2 µs), `device` =
activity time, `host`/`input` = host thread time outside/inside DataLoader spans. What-if numbers come from
re-simulating the same script with the change (`no_avoidable_syncs`/`no_syncs`: those calls stop waiting;
`device_2x`/`host_2x`: device/host durations halved, launch latency and sync return kept; `input_overlapped`:
data loading takes no time on the main thread); `predicted_wall_us` = window start to the later of the last
step end and the end of device work launched in steps. Analyzer results should match within 1% (the analyzer
replays the graph it rebuilds; small µs-level differences in how it re-times calls are expected).

Costs used everywhere: host launch call 5 µs, launch latency 5 µs, sync own cost 3 µs, sync return 2 µs,
cudaEventRecord/cudaStreamWaitEvent 2 µs, op enter/exit 1 µs each.
"""


def main() -> int:
    expected: dict[str, dict[str, Any]] = {}
    for name, (build, params, about) in SAMPLES.items():
        build(sc.WhatIfKnobs()).write(HERE / name)
        expected[name] = expected_for(build, params, about)
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    (HERE / "EXPECTED.md").write_text(markdown(expected))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
