"""Words the views share: inline code spans in advice, human titles of rule ids, the verdict's evidence
in plain words, and why the pipeline model can exceed the recorded time.

Advice texts mark code with Markdown backticks (``torch.compile``). HTML views render those spans as
``<code>`` (``code_spans`` splits a text; the views escape every part), the terminal keeps the backticks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from stallscope.analyzer.passes.verdict import SPEED_UP
from stallscope.display.units import duration

_CODE = re.compile(r"`([^`\n]+)`")
_US = re.compile(r"(?<=\d) us\b")


def prose_units(text: str) -> str:
    """Analyzer prose (finding titles) spells microseconds "us"; views spell them "µs" like every number."""
    return _US.sub(" µs", text)


def code_spans(text: str) -> list[tuple[bool, str]]:
    """``text`` cut into (is_code, part) pairs at Markdown code spans; an unpaired backtick stays text."""
    text = prose_units(text)
    out: list[tuple[bool, str]] = []
    at = 0
    for m in _CODE.finditer(text):
        if m.start() > at:
            out.append((False, text[at : m.start()]))
        out.append((True, m.group(1)))
        at = m.end()
    if at < len(text) or not out:
        out.append((False, text[at:]))
    return out


def plain(text: str) -> str:
    """``text`` without the code spans' backticks (for places that cannot show code, e.g. a tooltip)."""
    return "".join(part for _code, part in code_spans(text))


# Rule ids are keys (JSON, tests, docs/findings.md anchors); people read these titles.
_RULE_TITLES = {
    "false_sync_scalar_read": "Reading a value back in the loop",
    "false_sync_to_host": "Copying a tensor to the host in the loop",
    "false_sync_blanket": "Device-wide synchronize in the loop",
    "false_sync_pageable_copy": "Non-blocking copy from pageable memory",
    "false_sync_data_dependent": "Shape that depends on the data",
    "false_sync_stream": "Stream synchronize in the loop",
    "false_sync_event": "Event synchronize in the loop",
    "false_sync_allocator": "Allocator sync",
    "false_sync_other": "Avoidable sync",
    "redundant_sync": "Sync with nothing queued",
    "input_bound": "Data loading holds the loop back",
    "launch_bound": "Many tiny kernels (launch-bound)",
    "low_utilization": "Low device utilization",
    "would_sync_decode": "Decode loop would read every token back on a GPU",
    "would_sync_output_readback": "Result read back once per step (needed)",
    "would_sync_distribution_checks": "torch.distributions argument checks would sync on a GPU",
    "would_sync_in_optimizer": "The optimizer's own reads would sync on a GPU",
    "would_sync_in_library": "A library call would sync on a GPU",
    "copy_compute_serialized": "Copies and compute take turns",
    "streams_never_overlapped": "Streams that only take turns",
    "unsynchronized_pinned_readback": "Reading a non-blocking copy before it lands",
    "allocator_sync": "cudaFree in the steady state",
    "tensor_cores_unused": "FP32 GEMMs without tensor cores",
    "memory_near_capacity": "Memory near capacity",
    "autoregressive_readback": "Decode loop reads every token back",
    "straggler": "Straggler rank",
    "communication_bound": "Collectives on the critical path",
}


def rule_title(rule: str) -> str:
    """A rule id's human title; an id this version does not know reads as its words."""
    if rule in _RULE_TITLES:
        return _RULE_TITLES[rule]
    if rule.startswith("would_sync_"):
        return f"Would sync on a GPU ({rule.removeprefix('would_sync_').replace('_', ' ')})"
    words = rule.replace("_", " ").strip()
    return words[:1].upper() + words[1:] if words else "Finding"


# What each sensitivity (the verdict's what-if per kind) means, as the start of a phrase: the verdict's own
# words, so the views and the JSON's evidence line say the same
_LEVERS = SPEED_UP


def lever(kind: str) -> str:
    return _LEVERS.get(kind, f"faster {kind.replace('_', ' ')}")


def sensitivity_sentence(sensitivity_us: Mapping[str, float]) -> str:
    """The verdict's sensitivities in words, largest first: "a 2× faster host would save 4.18 ms, data
    loading overlapped 1.45 ms, …" (the JSON's ``verdict.sensitivity_us``; a speed-up that saves
    nothing is left out)."""
    items = sorted(((k, v) for k, v in sensitivity_us.items() if v > 0), key=lambda kv: -kv[1])
    if not items:
        return ""
    first, rest = items[0], items[1:]
    parts = [f"{lever(first[0])} would save {duration(max(first[1], 0.0))}"]
    parts += [f"{lever(k)} {duration(max(v, 0.0))}" for k, v in rest]
    return ", ".join(parts)


def path_sentence(path_share: Mapping[str, float]) -> str:
    """The critical path's largest shares: "host 66%, device 22%, input 10%" (those of 0.5% or more)."""
    shares = sorted(((v, k) for k, v in path_share.items() if v >= 0.005), reverse=True)[:3]
    return ", ".join(f"{k} {v:.0%}" for v, k in shares)


def evidence_sentence(verdict: Mapping[str, object], utilization: float | None) -> str:
    """The verdict's evidence in words, from the JSON's ``verdict`` (its ``evidence`` text is not shown)."""
    shares = verdict.get("path_share")
    sens = verdict.get("sensitivity_us")
    parts = []
    if isinstance(shares, Mapping) and shares:
        parts.append(f"the critical path is {path_sentence(shares)}")
    if utilization is not None:
        parts.append(f"the GPU was busy {utilization:.0%} of the time")
    if isinstance(sens, Mapping) and sens:
        parts.append(sensitivity_sentence(sens))
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + "." if text else ""


def pipeline_note(pipeline: Mapping[str, float], recorded_us: float) -> str:
    """Why the model's pipelined time may exceed the recorded one (``stallscope.analyzer.passes.pipeline``):
    it is an idealised two-stage model of medians, not a replay."""
    base = (
        "The pipeline model is idealised: P is the median step's host time not blocked in syncs, G the "
        "median step's device busy time, and within a step the two stages are taken to run one after "
        "the other; only across steps do they overlap."
    )
    if float(pipeline.get("pipelined_us", 0.0)) > recorded_us > 0:
        return (
            f"{base} The recorded run already overlaps them inside each step (the host launches work "
            f"asynchronously while the device computes), so it took {duration(recorded_us)}, less than "
            f"the model's {duration(float(pipeline['pipelined_us']))}: read the model for which stage is "
            "slower, not for a time to expect."
        )
    return base
