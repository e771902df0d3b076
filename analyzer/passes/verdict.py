"""The bottleneck, decided by sensitivity: which kind of speed-up the what-if replays say would save most.

The critical path says where the time went; it cannot say what would help, because the path moves when one
resource speeds up (a host-bound loop whose GPU is 90% busy gains little from a faster host). So each kind
gets the saving its own speed-up would bring, from the replays:

- ``device``: every compute activity 2x faster (``device_2x``; ``compute_2x`` when the trace has
  collectives, which are their own kind);
- ``communication``: every collective kernel 2x faster (``communication_2x``);
- ``host``: the host's own work 2x faster, data loading excluded (it is the ``input`` kind);
- ``input``: data loading moved off the critical thread (``input_overlapped``);
- ``sync``: the host no longer waits in blocking calls (``no_syncs``);
- ``launch``: every launch latency (a launch call's start to its activity's unqueued start) 2x shorter.

The largest decides, when it is at least 5% of the window; ``balanced`` when host and device would each
save at least 10% of the window and within a factor of two of each other, with the GPU at least 60% busy
(both near saturation: neither alone is the fix). When no speed-up saves 5%, the critical path's dominant
kind stands, except that a path of idle waiting on a GPU busy half the time or more is ``device``.
"""

from __future__ import annotations

from dataclasses import dataclass

from stallscope.analyzer.core.numbers import duration_text
from stallscope.analyzer.passes.critical import CriticalPath, Kind

DECISIVE_SHARE = 0.05
BALANCED_SHARE = 0.10
BALANCED_RATIO = 0.5
BALANCED_UTILIZATION = 0.6
SENSITIVITY_KINDS = ("device", "host", "input", "sync", "launch", "communication")

#: the verdict line each bottleneck gets, in every view
SENTENCE: dict[str, str] = {
    Kind.DEVICE.value: "device-bound: the GPU is the critical resource",
    Kind.HOST.value: "host-bound: the host did not feed the GPU fast enough",
    Kind.INPUT.value: "input-bound: data loading held the loop back",
    Kind.SYNC.value: "sync-bound: the host kept waiting for the GPU",
    Kind.LAUNCH.value: "launch-bound: launch latency dominates",
    Kind.IDLE.value: "stalled: the critical path is mostly idle waiting",
    Kind.COMMUNICATION.value: "communication-bound: collectives (NCCL/RCCL) hold the loop back",
    Kind.UNTRACED.value: "untraced: the trace does not show what the host did for most of the window",
    "balanced": "balanced: host and device are both near saturation",
}


@dataclass(frozen=True)
class Verdict:
    bottleneck: str  # one of Kind's values or "balanced"
    sensitivity_us: dict[str, float]  # kind -> what its speed-up saves (see the module doc)
    path_share: dict[str, float]  # kind -> share of the critical path
    utilization: float | None  # of the main device (None: CPU-only)
    basis: str  # "sensitivity", "balanced" or "critical path": what decided it

    def evidence(self) -> str:
        """One line: share of the path, utilization, what each speed-up would save."""
        shares = sorted(((v, k) for k, v in self.path_share.items() if v >= 0.005), reverse=True)[:3]
        path = ", ".join(f"{k} {v:.0%}" for v, k in shares) or "empty"
        gpu = f"GPU {self.utilization:.0%} busy" if self.utilization is not None else "no GPU work"
        saves = ", ".join(
            f"{SPEED_UP[k]} {duration_text(self.sensitivity_us[k])}"
            for k in SENSITIVITY_KINDS
            if k in self.sensitivity_us and (k != "communication" or self.sensitivity_us[k] > 0)
        )
        return f"critical path {path}; {gpu}; would save: {saves}"


#: each sensitivity kind's speed-up, in words: the start of a phrase in every view (the JSON's evidence line,
#: and the views' sentence, ``stallscope.display.text.lever``)
SPEED_UP: dict[str, str] = {
    "device": "2× faster compute",  # the device's compute (collectives are "communication")
    "host": "2× faster host",
    "input": "data loading overlapped",
    "sync": "no sync waits",
    "launch": "2× shorter launch latency",
    "communication": "2× faster communication",
}


def decide(
    window_us: float, sensitivity_us: dict[str, float], critical: CriticalPath, utilization: float | None
) -> Verdict:
    """The bottleneck from the sensitivities (see the module doc); the path and utilization as evidence."""
    length = max(critical.length_us, 1e-9)
    shares = {k.value: v / length for k, v in critical.breakdown_us.items()}
    sens = {k: max(0.0, sensitivity_us.get(k, 0.0)) for k in SENSITIVITY_KINDS}
    best = max(SENSITIVITY_KINDS, key=lambda k: sens[k])  # ties: the earlier kind
    window = max(window_us, 1e-9)
    host, device = sens["host"], sens["device"]
    if (
        utilization is not None
        and utilization >= BALANCED_UTILIZATION
        and min(host, device) >= BALANCED_SHARE * window
        and min(host, device) >= BALANCED_RATIO * max(host, device)
    ):
        return Verdict("balanced", sens, shares, utilization, "balanced")
    if sens[best] >= DECISIVE_SHARE * window:
        return Verdict(best, sens, shares, utilization, "sensitivity")
    dominant = critical.bottleneck.value if critical.length_us > 0 else Kind.HOST.value
    if dominant == Kind.IDLE.value and utilization is not None and utilization >= 0.5:
        dominant = Kind.DEVICE.value
    return Verdict(dominant, sens, shares, utilization, "critical path")
