"""The what-if replay one scenario at a time, step by step, as ``stallscope.analyzer.passes.replay`` did before it replayed
several scenarios in one pass, re-timed chains of calls together and took a short path for plain
activities. The tests hold the replay to it bit for bit."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stallscope.analyzer.core.model import F64
from stallscope.analyzer.graph.dependency import Blocking, Graph
from stallscope.analyzer.passes.replay import Costs, Frame


@dataclass(frozen=True)
class Times:
    call_start: F64
    call_end: F64
    act_start: F64
    act_end: F64
    end_us: float


def reference_replay(g: Graph, f: Frame, costs: Costs) -> Times:
    """Every call start, blocking call end and activity of ``g`` in recorded time order, one at a time,
    with ``f``'s columns (the frame's own agenda is not used)."""
    blocks = g.call_blocking != Blocking.NO
    blocking = np.flatnonzero(blocks)
    keys = np.concatenate([g.call_start, g.call_end[blocks], g.act_start])
    kind = np.concatenate(
        [np.zeros(g.calls, np.int8), np.ones(len(blocking), np.int8), np.full(g.activities, 2, np.int8)]
    )
    rank = np.array([0, 2, 1], dtype=np.int8)[kind]  # at one instant: call starts, activities, blocking ends
    index = np.concatenate([np.arange(g.calls), blocking, np.arange(g.activities)])
    order = np.lexsort((rank, keys))
    L = f.lists
    prev, gap, own, ret, blocking_of = L["prev"], L["gap"], L["own"], L["ret"], L["blocking"]
    lanes, c_start, dep, dep_gap = L["lanes"], L["c_start"], L["dep"], L["dep_gap"]
    a_call, a_prev, a_lat, a_gap, a_hold = L["a_call"], L["a_prev"], L["a_lat"], L["a_gap"], L["a_hold"]
    a_start, a_end, a_dur, from_return = L["a_start"], L["a_end"], L["a_dur"], L["from_return"]
    hs, ds, ins, ls = costs.host_scale, costs.device_scale, costs.input_scale, costs.launch_scale
    cs = ds if costs.comm_scale is None else costs.comm_scale  # collectives' scale
    call_in, act_in, gap_input, offsets = f.call_in, f.act_in, f.gap_input, f.act_wait_offset
    nan = float("nan")
    new_cs, new_ce = [nan] * g.calls, [nan] * g.calls
    new_as, new_ae = [0.0] * g.activities, [nan] * g.activities

    def end_of(i: int) -> float:
        value = new_ce[i]
        if value == value:
            return value
        mine = own[i] * hs if call_in[i] else own[i]
        done: float = max(
            (new_ae[a] if new_ae[a] == new_ae[a] else a_end[a] for a in g.call_waits[i]), default=-1e300
        )
        value = float(max(new_cs[i] + mine, done + ret[i]))
        new_ce[i] = value
        return value

    for k, i in zip(kind[order].tolist(), index[order].tolist(), strict=True):
        if k == 0:
            inside = call_in[i]
            p = prev[i]
            if p >= 0:
                base = new_ce[p]
                if base != base:
                    base = end_of(p)
            else:
                base = g.thread_anchor.get(lanes[i], c_start[i] - gap[i])
            gi = gap[i]
            if inside:
                dark = f.gap_untraced[i]  # time the trace does not show: no speed-up shortens it
                gi = (
                    (gi - gap_input[i] - dark) * hs + gap_input[i] * hs * ins + dark
                    if dark
                    else (gi - gap_input[i]) * hs + gap_input[i] * hs * ins
                )
            s = base + gi
            d = dep[i]
            if d >= 0:
                done = new_ce[d]
                if done != done:
                    done = end_of(d)
                after = done + (dep_gap[i] * hs if inside else dep_gap[i])
                if p < 0 or after > s:
                    s = after
            new_cs[i] = s
            if not blocking_of[i] or i in costs.no_wait:
                new_ce[i] = s + (own[i] * hs if inside else own[i])
        elif k == 1:
            end_of(i)
        else:
            inside = act_in[i]
            c = a_call[i]
            if c < 0:
                s = a_start[i]
            else:
                hold = a_hold[i]
                lat = (a_lat[i] - hold) * ls + hold if inside else a_lat[i]
                s = (end_of(c) if from_return[i] else new_cs[c]) + lat
                if s != s:
                    s = a_start[i]
            p = a_prev[i]
            if p >= 0:
                after = new_ae[p] + a_gap[i]
                if after > s:
                    s = after
            for a, off in offsets[i]:
                after = new_ae[a] + off
                if after > s:
                    s = after
            new_as[i] = s
            new_ae[i] = s + (a_dur[i] * (cs if g.act_comm[i] else ds) if inside else a_dur[i])
    ce = np.array(new_ce)
    for i in np.flatnonzero(np.isnan(ce)).tolist():
        ce[i] = end_of(i)
    host = f.end_us
    if f.tail_call >= 0:
        dark = f.tail_untraced
        tail = (f.tail_gap - f.tail_input - dark) * hs + f.tail_input * hs * ins + dark
        host = float(ce[f.tail_call]) + tail
        if f.tail_dep >= 0:
            host = max(host, float(ce[f.tail_dep]) + f.tail_dep_gap * hs)
    device = float(np.max(np.asarray(new_ae)[f.window_acts])) if len(f.window_acts) else host
    return Times(np.array(new_cs), ce, np.array(new_as), np.array(new_ae), float(max(host, device)))


def same_bits(a: F64 | list[float], b: F64 | list[float]) -> bool:
    """Equal bit for bit (NaN included, 0.0 and -0.0 told apart)."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return x.shape == y.shape and bool(np.array_equal(x.view(np.int64), y.view(np.int64)))
