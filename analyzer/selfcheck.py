"""The analysis checks itself: contradictions between its own numbers, listed as warnings.

Run on every analysis (cheap: a few passes over gaps and segments). An empty list is the claim that the
verdict, the utilization, the gap causes, the critical path and the what-if agree with each other; every
shared real trace must come out with none (tests assert it). Each warning names what disagrees and by
how much, so a user knows which number not to trust.
"""

from __future__ import annotations

import numpy as np

from stallscope.analyzer.core.model import LaneKind
from stallscope.analyzer.evidence import Evidence
from stallscope.analyzer.passes.critical import Kind
from stallscope.analyzer.passes.gaps import Cause
from stallscope.analyzer.passes.verdict import DECISIVE_SHARE
from stallscope.analyzer.passes.whatif import PINNED_SHARE, pinned_share

_LIFETIME_SLACK_US = 50.0  # segments may overhang a thread's recorded events by clock rounding
_IDLE_SHARE = 0.05  # unknown idle is judged when the device idles at least this share of the window


def check(a: Evidence) -> tuple[str, ...]:
    """Every contradiction between the numbers of the passes' evidence ``a``."""
    out: list[str] = []
    _verdict(a, out)
    _path_against_speedups(a, out)
    _gaps(a, out)
    _path_bounds(a, out)
    _lifetimes(a, out)
    _whatif(a, out)
    return tuple(out)


def _verdict(a: Evidence, out: list[str]) -> None:
    verdict = a.verdict
    if verdict is None:
        return
    window = max(a.window.dur_us, 1e-9)
    sens = verdict.sensitivity_us
    if verdict.basis == "sensitivity":
        best = max(sens, key=lambda k: sens[k])
        if sens[best] > sens.get(verdict.bottleneck, 0.0) + 1e-6:
            out.append(
                f"bottleneck {verdict.bottleneck} but a faster {best} would save more "
                f"({sens[best] / window:.0%} against {sens.get(verdict.bottleneck, 0.0) / window:.0%})"
            )
    util = verdict.utilization
    if util is None:
        return
    if verdict.bottleneck == Kind.IDLE.value and util >= 0.5:
        out.append(f"verdict 'stalled: mostly idle' with the GPU {util:.0%} busy")
    if verdict.bottleneck in (Kind.HOST.value, Kind.LAUNCH.value, Kind.INPUT.value) and util >= 0.95:
        out.append(f"verdict {verdict.bottleneck}-bound with the GPU {util:.0%} busy")
    idle_path = verdict.path_share.get(Kind.IDLE.value, 0.0)
    if verdict.bottleneck == Kind.DEVICE.value and util < 0.3:
        if sens["device"] < DECISIVE_SHARE * window:
            out.append(f"verdict device-bound with the GPU only {util:.0%} busy")
        elif idle_path >= 0.5:
            out.append(
                f"verdict device-bound with the GPU {util:.0%} busy and {idle_path:.0%} of the path idle"
            )


#: the critical path's kinds that a what-if speed-up models (the verdict's sensitivities)
_SPED_UP = (Kind.HOST, Kind.INPUT, Kind.DEVICE, Kind.COMMUNICATION, Kind.SYNC, Kind.LAUNCH)
_PATH_SHARE = 0.30  # a kind this much of the critical path ...
_SMALL_SAVING = 0.01  # ... whose speed-up saves less than this share of the window contradicts it


def _path_against_speedups(a: Evidence, out: list[str]) -> None:
    """A kind that is a large part of the critical path but whose speed-up saves almost nothing: the path
    and the replay disagree, unless the analysis says why (device work without launch calls pins the
    replays: its note says so)."""
    cp, verdict = a.critical, a.verdict
    if cp is None or verdict is None or a.graph is None or a.whatif is None or a.main_device is None:
        return
    window = max(a.window.dur_us, 1e-9)
    if pinned_share(a.graph, a.main_device, a.window.start_us, a.window.end_us) >= PINNED_SHARE:
        return
    for kind in _SPED_UP:
        share = cp.breakdown_us.get(kind, 0.0) / window
        saves = verdict.sensitivity_us.get(kind.value, 0.0) / window
        if share >= _PATH_SHARE and saves < _SMALL_SAVING:
            out.append(
                f"{kind.value} is {share:.0%} of the critical path but speeding it up saves {saves:.1%} "
                "of the window"
            )


def _gaps(a: Evidence, out: list[str]) -> None:
    g, gaps = a.graph, a.gaps
    bound = float(np.max(g.act_bound)) if g is not None and g.activities else 0.0
    too_long = [x for x in gaps if x.cause == Cause.LAUNCH and x.dur_us > bound + 1e-6]
    if too_long:
        worst = max(too_long, key=lambda x: x.dur_us)
        out.append(
            f"{len(too_long)} gap(s) called launch latency are longer than a plausible launch delay "
            f"({bound:.0f} us), the longest {worst.dur_us:.0f} us"
        )
    idle = sum(x.dur_us for x in gaps if x.device == a.main_device)
    unknown = sum(x.dur_us for x in gaps if x.device == a.main_device and x.cause == Cause.UNKNOWN)
    if idle >= _IDLE_SHARE * a.window.dur_us and unknown > idle / 3:
        out.append(
            f"{unknown / idle:.0%} of the device's idle time has no known cause ({unknown:.0f} of {idle:.0f} us)"
        )
    thin = [x for x in gaps if x.cause == Cause.SYNC and x.charged_us < 0.5 * x.dur_us - 1e-6]
    if thin:
        worst = max(thin, key=lambda x: x.dur_us - x.charged_us)
        out.append(
            f"{len(thin)} gap(s) called sync are mostly not explained by the sync charged "
            f"(worst: {worst.charged_us:.0f} of {worst.dur_us:.0f} us)"
        )


def _path_bounds(a: Evidence, out: list[str]) -> None:
    """No launch segment of the critical path is longer than a plausible launch latency (the bound the
    gaps use), and the walk reached the window's start."""
    cp, g = a.critical, a.graph
    if cp is None:
        return
    if cp.stopped:
        out.append(f"the critical path walk stopped early: {cp.stopped}")
    if g is None or not g.activities:
        return
    bound = float(np.max(g.act_bound))
    launch = cp.kind == list(Kind).index(Kind.LAUNCH)
    longest = float(np.max(cp.end_us[launch] - cp.start_us[launch])) if launch.any() else 0.0
    if longest > bound + 1e-6:
        out.append(
            f"a launch segment of the critical path lasts {longest:.0f} us, longer than a plausible "
            f"launch delay ({bound:.0f} us)"
        )


def _lifetimes(a: Evidence, out: list[str]) -> None:
    """Host segments of the critical path lie within their thread's recorded lifetime."""
    cp, model = a.critical, a.model
    if cp is None or not len(cp.kind):
        return
    ev = model.events
    host_lanes = [lane.id for lane in model.lanes if lane.kind == LaneKind.HOST]
    first = np.full(len(model.lanes), np.inf)  # per lane: its first start, its last end (host lanes only)
    last = np.full(len(model.lanes), -np.inf)
    host = np.zeros(len(model.lanes), dtype=np.bool_)
    host[host_lanes] = True
    lanes = ev.lane
    for lane in host_lanes:
        on = np.flatnonzero(lanes == lane)
        if len(on):
            first[lane], last[lane] = float(ev.ts[on[0]]), float(ev.end[on].max())
    host_kind = np.array([k in (Kind.HOST, Kind.INPUT, Kind.SYNC) for k in Kind], dtype=np.bool_)
    at = np.where((cp.lane >= 0) & (cp.lane < len(model.lanes)), cp.lane, 0)  # each segment's lane
    judged = host_kind[cp.kind] & host[at] & (cp.lane == at)
    outside = (cp.start_us < first[at] - _LIFETIME_SLACK_US) | (cp.end_us > last[at] + _LIFETIME_SLACK_US)
    bad = int(np.count_nonzero(judged & outside))
    if bad:
        out.append(f"{bad} host segment(s) of the critical path lie outside their thread's lifetime")


def _whatif(a: Evidence, out: list[str]) -> None:
    w = a.whatif
    if w is None:
        return
    window = max(a.window.dur_us, 1e-9)
    if w.replay_error > 0.01:
        out.append(f"the unchanged replay is {w.replay_error:.1%} off the recorded makespan")
    for r in w.results:
        if r.saving_us > window + 1e-6 or r.saving_us < -0.01 * window:
            out.append(f"what-if {r.scenario.value} saves {r.saving_us:.0f} us of a {window:.0f} us window")
