"""Before/after comparison of two analyses: what ``stallscope diff A B`` shows and ``check --baseline`` gates.

A diff compares two analysis documents (``stallscope.analyzer.document.analysis.to_json``, schema ``stallscope.analysis/3``, or ``/2``, ``/1``),
never the traces: a trace analysed now and an ``analyze --json`` file saved last week compare the same
way, and every figure is one the analysis itself published. ``side_of`` reads (and checks) a document;
``compare`` pairs two sides into a ``Diff``; ``gate`` judges a regression for CI; ``diff_json`` is the
``stallscope.diff/1`` document.

Pairing rules:

- **steps** are paired by index (the first profiled step of each side, the second...); when the counts
  differ only the first ``min`` are paired and a note says so. Medians and means are over each side's
  own steps.
- **wall** is the window. When both sides have steps but not as many, their windows cover different
  amounts of work: the wall is shown but not gated, the per-step median is.
- **device** figures (utilization, busy, idle, host time blocked in syncs, the what-if scenarios that
  re-time device work or syncs) do not exist on a CPU-only side (no kernel, copy or memset): they are
  ``None`` there, and so is their change, never 0 or 100%. A CPU-only side counts its would-be syncs
  instead (as ``check`` does).
- **ops / kernels** are matched by name; **syncs** by call site (``file:line in function``, else the op,
  else the runtime call) and kind; **findings** by rule and call site. The step spans among the ops
  (``ProfilerStep#N``: each run numbers its own) are one row, ``ProfilerStep#*``. A row present on one
  side only is ``new`` or ``gone``; when a side's top table was cut at its top rows (a saved analysis
  lists 20), a name missing there is ``entered`` / ``left`` (below that side's list), not ``new`` /
  ``gone``.
- **whole runs**: when both analyses carry ``run_steps`` (every step of the run timed by the collector,
  the first left out), the profiled steps' median change is set against the runs' step-to-step spread
  (the larger p90 − median of the two runs): within it the change is noise; beyond it while the runs'
  medians differ by less, the windows caught atypical steps (``RunNoise``, ``Reading``). A short
  window on a busy machine can move by more than a change being measured; every step of the run
  cannot, as easily. The reading is also a note.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from stallscope.analyzer.core.errors import TraceError
from stallscope.analyzer.core.numbers import duration_text

SCHEMA = "stallscope.diff/1"
ANALYSIS_SCHEMA = "stallscope.analysis/3"
#: schemas a diff reads: /1 differs from /2 only in the critical path's segments, which a diff does not read
ANALYSIS_SCHEMAS = ("stallscope.analysis/1", "stallscope.analysis/2", ANALYSIS_SCHEMA)
ROWS = 10  # changed ops, kernels, syncs and findings kept per table (most changed first)
MAX_PAIRS = 500  # step pairs kept in the document

Doc = dict[str, Any]


class Status(str, Enum):
    """How a matched row (op, kernel, sync site, finding) changed."""

    CHANGED = "changed"  # on both sides, with a different figure
    SAME = "same"  # on both sides, the same figure
    NEW = "new"  # only after
    GONE = "gone"  # only before
    ENTERED = "entered"  # after; before it was below that side's cut top table (its figure unknown)
    LEFT = "left"  # before; after it fell below that side's cut top table


@dataclass(frozen=True)
class Delta:
    """One figure before and after; ``None`` where it does not exist on that side (a CPU-only side's
    device idle), and then no change either."""

    before: float | None
    after: float | None

    @property
    def change(self) -> float | None:
        if self.before is None or self.after is None:
            return None
        return self.after - self.before

    @property
    def rel(self) -> float | None:
        """The change as a fraction of ``before`` (None when ``before`` is 0 or absent)."""
        change = self.change
        return None if change is None or not self.before else change / self.before


@dataclass(frozen=True)
class Tally:
    """A named row of one side: how often, and how much time (self time of an op, device time of a
    kernel, wait + idle charged for a sync site, cost of a finding)."""

    count: int
    time_us: float
    detail: str = ""  # sync kind / finding title


@dataclass(frozen=True)
class Side:
    """What a diff reads from one analysis document."""

    label: str  # the path the user gave
    wall_us: float
    cpu_only: bool
    bottleneck: str | None
    evidence: str
    utilization: float | None  # None on a CPU-only side
    device_busy_us: float | None
    device_idle_us: float | None
    host_sync_wait_us: float | None  # None on a CPU-only side: nothing to wait for
    sync_count: int
    avoidable_sync_count: int
    would_sync_count: int | None  # CPU-only: the calls that would block on a GPU (None on a GPU side)
    steps: tuple[tuple[str, float], ...]  # (name, wall µs) in order
    ops: Mapping[str, Tally] | None  # None: the document has no top tables (an older stallscope)
    kernels: Mapping[str, Tally] | None
    tops_cut: bool  # the top tables list only the top rows (a saved document): absent is not zero
    syncs: Mapping[tuple[str, str], Tally]  # (site, kind) -> count, wait + idle charged
    whatif: Mapping[str, tuple[float, float]]  # scenario -> (predicted wall, saving)
    findings: Mapping[tuple[str, str], Tally]  # (rule, site) -> count, cost, title
    # the verdict's numbers behind ``evidence`` (empty for an older document): views word them
    path_share: Mapping[str, float]
    sensitivity_us: Mapping[str, float]
    run: RunSide | None = None  # every step of the run (the analysis' ``run_steps``), when it has them


@dataclass(frozen=True)
class RunSide:
    """The whole run's steady-state step times (the analysis' ``run_steps``: the sidecar's
    ``step_timing``, every step of the run but the first), in µs."""

    steps: int
    median_us: float
    p90_us: float
    profiled_median_us: float | None  # the profiled steps' median, as that analysis measured it


@dataclass(frozen=True)
class VerdictSide:
    bottleneck: str | None  # None on a CPU-only side (no device to be bound by)
    evidence: str
    cpu_only: bool
    utilization: float | None = None  # the numbers behind ``evidence``, for views to put in words
    path_share: Mapping[str, float] | None = None
    sensitivity_us: Mapping[str, float] | None = None


@dataclass(frozen=True)
class RowDelta:
    """A matched row and how it changed: ``count`` and ``time_us`` before/after."""

    name: str
    detail: str
    status: Status
    count: Delta
    time_us: Delta


@dataclass(frozen=True)
class StepPair:
    index: int
    before: str
    after: str
    dur_us: Delta


@dataclass(frozen=True)
class StepsDiff:
    count: Delta
    median_us: Delta
    mean_us: Delta
    pairs: tuple[StepPair, ...]  # by index, at most MAX_PAIRS
    paired: int  # how many steps were paired (min of the counts)
    note: str  # how they were paired, when it needs saying


@dataclass(frozen=True)
class WhatIfDelta:
    scenario: str
    predicted_wall_us: Delta
    saving_us: Delta


class Reading(str, Enum):
    """What the whole runs' step times say of the windows' change (``RunNoise.reading``)."""

    NOISE = "noise"  # the windows differ by less than the runs' step-to-step spread
    WINDOWS_ATYPICAL = "windows_atypical"  # the windows differ by more, the whole runs by less
    WINDOWS_DISAGREE = "windows_disagree"  # both beyond the spread, in opposite directions
    CONFIRMED = "confirmed"  # both beyond the spread, the same way: the change is real
    RUN_ONLY = "run_only"  # no profiled steps to compare: only the runs' change


@dataclass(frozen=True)
class RunNoise:
    """The windows' change set against every step of both runs. ``spread_us`` is the runs'
    step-to-step spread: the larger of the two runs' p90 − median step time (a handful of profiled
    steps can land anywhere in it, on a busy machine by much more than a change being measured)."""

    median_us: Delta  # the whole runs' steady-state median step
    p90_us: Delta
    steps: Delta  # steps timed in each run
    spread_us: float
    window_change_us: float | None  # the profiled steps' median, after − before (None: no steps)
    window_within_spread: bool | None
    run_within_spread: bool
    reading: Reading
    note: str


@dataclass(frozen=True)
class Diff:
    before: str
    after: str
    wall_us: Delta
    wall_comparable: bool  # False when both sides have steps, but not as many
    verdict: tuple[VerdictSide, VerdictSide]
    steps: StepsDiff
    device_utilization: Delta
    device_busy_us: Delta
    device_idle_us: Delta
    host_sync_wait_us: Delta
    sync_count: Delta
    avoidable_sync_count: Delta
    would_sync_count: Delta
    ops: tuple[RowDelta, ...]
    kernels: tuple[RowDelta, ...]
    syncs: tuple[RowDelta, ...]
    findings: tuple[RowDelta, ...]
    whatif: tuple[WhatIfDelta, ...]
    notes: tuple[str, ...]
    run_steps: RunNoise | None = None  # None unless both analyses timed every step of their run


# ----- reading one side ------------------------------------------------------------------------


def site_text(site: object) -> str:
    """``file:line in function`` of a call-site object of the analysis JSON, or ''."""
    if not isinstance(site, dict):
        return ""
    where = f"{site.get('file', '?')}:{site.get('line', '?')} in {site.get('function', '?')}"
    return f"{where} (library code)" if site.get("library") else where


def side_of(doc: object, label: str, *, tops_cut: bool = True) -> Side:
    """The figures a diff reads from an analysis document ``doc``; ``label`` names it in messages.
    ``tops_cut``: the document's top tables hold only their top rows (as ``analyze --json`` writes them).
    A document that is not a complete ``stallscope.analysis/3`` (or ``/2``, ``/1``) is a ``TraceError`` naming ``label``."""
    if not isinstance(doc, dict):
        raise TraceError(label, "not a stallscope analysis (a JSON object with a 'schema' key)")
    schema = doc.get("schema")
    if schema not in ANALYSIS_SCHEMAS:
        raise TraceError(
            label, f"schema {str(schema)[:60]!r}: only {', '.join(ANALYSIS_SCHEMAS)} can be compared"
        )
    try:
        return _side(doc, label, tops_cut)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        what = f"'{exc.args[0]}' missing" if isinstance(exc, KeyError) else str(exc)[:120]
        raise TraceError(label, f"not a complete stallscope analysis ({what})") from None


def _num(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} is not a number")
    return float(value)


def _side(doc: Doc, label: str, tops_cut: bool) -> Side:
    s = doc["summary"]
    cpu = not doc["devices"]
    verdict = doc.get("verdict") or {}
    tops = doc.get("tops")
    return Side(
        label=label,
        wall_us=_num(doc["window"]["dur_us"], "window.dur_us"),
        cpu_only=cpu,
        bottleneck=None if cpu else (str(s["bottleneck"]) if s.get("bottleneck") else None),
        evidence="" if cpu else str(verdict.get("evidence") or ""),
        utilization=None if cpu else _num(s["device_utilization"], "summary.device_utilization"),
        device_busy_us=None if cpu else _num(s["device_busy_us"], "summary.device_busy_us"),
        device_idle_us=None if cpu else _num(s["device_idle_us"], "summary.device_idle_us"),
        host_sync_wait_us=None if cpu else _num(s["host_sync_wait_us"], "summary.host_sync_wait_us"),
        sync_count=int(s.get("sync_count") or 0),
        avoidable_sync_count=int(s.get("avoidable_sync_count") or 0),
        would_sync_count=_would_syncs(doc["findings"]) if cpu else None,
        steps=tuple((str(st["name"]), _num(st["dur_us"], "steps[].dur_us")) for st in doc["steps"]),
        ops=_tally(tops["ops"], "self_us") if isinstance(tops, dict) else None,
        kernels=_tally(tops["kernels"], "total_us") if isinstance(tops, dict) else None,
        tops_cut=tops_cut,
        syncs=_sync_sites(doc["syncs"]),
        whatif={
            str(w["scenario"]): (_num(w["predicted_wall_us"], "whatif"), _num(w["saving_us"], "whatif"))
            for w in doc["whatif"]
            if not cpu or w["scenario"] in _HOST_SCENARIOS
        },
        findings=_findings(doc["findings"]),
        path_share=_shares(None if cpu else verdict.get("path_share")),
        sensitivity_us=_shares(None if cpu else verdict.get("sensitivity_us")),
        run=_run_side(doc.get("run_steps")),
    )


def _run_side(run: object) -> RunSide | None:
    """The document's ``run_steps`` (None when absent, null or without a usable host distribution: an
    analysis of a trace that did not come from ``stallscope profile``, or an older document)."""
    if not isinstance(run, dict) or not isinstance(run.get("host_ms"), dict):
        return None
    host = run["host_ms"]
    try:
        median, p90 = _num(host.get("median_ms"), "median_ms"), _num(host.get("p90_ms"), "p90_ms")
        steps = int(_num(run.get("steps"), "steps"))
    except ValueError:
        return None
    if not (0.0 <= median <= p90 < 1e12):
        return None
    profiled = run.get("profiled_median_ms")
    usable = isinstance(profiled, int | float) and not isinstance(profiled, bool) and profiled >= 0
    profiled_us = float(profiled) * 1000.0 if usable and isinstance(profiled, int | float) else None
    return RunSide(steps, median * 1000.0, p90 * 1000.0, profiled_us)


#: the what-if scenarios that mean something without a device (the others re-time device work or syncs)
_HOST_SCENARIOS = frozenset({"host_2x", "input_overlapped"})
_STEP_NAME = re.compile(r"ProfilerStep#\d+")


def _tally(rows: Iterable[Doc], key: str) -> dict[str, Tally]:
    """Top-table rows by name; the step spans (``ProfilerStep#N``, numbered differently in each run) as
    one row ``ProfilerStep#*``: their self time is the host time inside steps outside every op."""
    out: dict[str, Tally] = {}
    for r in rows:
        name = _STEP_NAME.sub("ProfilerStep#*", str(r["name"]))
        prev = out.get(name, Tally(0, 0.0))
        out[name] = Tally(prev.count + int(r["count"]), prev.time_us + _num(r[key], f"tops {key}"))
    return out


def _sync_sites(syncs: Iterable[Doc]) -> dict[tuple[str, str], Tally]:
    """Syncs grouped by call site and kind: count, host wait + device idle charged (their cost)."""
    out: dict[tuple[str, str], Tally] = {}
    for s in syncs:
        where = site_text(s.get("call_site")) or str(s.get("op") or s.get("api") or "?")
        kind = str(s["kind"])
        wait, bubble = _num(s["wait_us"], "syncs[].wait_us"), _num(s["bubble_us"], "syncs[].bubble_us")
        prev = out.get((where, kind), Tally(0, 0.0, kind))
        out[(where, kind)] = Tally(prev.count + 1, prev.time_us + wait + bubble, kind)
    return out


def _would_syncs(findings: Iterable[Doc]) -> int:
    """A CPU-only run's would-be syncs (as ``check`` counts them): the ``would_sync_*`` findings' calls."""
    return sum(int(f.get("count") or 0) for f in findings if str(f["rule"]).startswith("would_sync"))


def _findings(findings: Iterable[Doc]) -> dict[tuple[str, str], Tally]:
    out: dict[tuple[str, str], Tally] = {}
    for f in findings:
        key = (str(f["rule"]), site_text(f.get("call_site")))
        cost = _num(f.get("time_us") or 0.0, "findings[].time_us")
        out.setdefault(key, Tally(int(f.get("count") or 0), cost, str(f.get("title") or f["rule"])))
    return out


# ----- comparing -------------------------------------------------------------------------------


def compare(a: Side, b: Side, rows: int = ROWS) -> Diff:
    """``b`` (after) against ``a`` (before): every figure side by side, the ``rows`` most changed ops,
    kernels, sync sites and findings."""
    steps = _steps(a, b)
    comparable = not (a.steps and b.steps and len(a.steps) != len(b.steps))
    run = _run_noise(a, b, steps)
    notes = _notes(a, b, steps, comparable) + ((run.note,) if run is not None else ())

    def device(get: Callable[[Side], float | None]) -> Delta:
        return Delta(get(a), get(b))

    return Diff(
        before=a.label,
        after=b.label,
        wall_us=Delta(a.wall_us, b.wall_us),
        wall_comparable=comparable,
        verdict=(_verdict(a), _verdict(b)),
        steps=steps,
        device_utilization=device(lambda s: s.utilization),
        device_busy_us=device(lambda s: s.device_busy_us),
        device_idle_us=device(lambda s: s.device_idle_us),
        host_sync_wait_us=Delta(a.host_sync_wait_us, b.host_sync_wait_us),
        sync_count=Delta(a.sync_count, b.sync_count),
        avoidable_sync_count=Delta(a.avoidable_sync_count, b.avoidable_sync_count),
        would_sync_count=Delta(a.would_sync_count, b.would_sync_count),
        ops=_rows(a.ops, b.ops, a.tops_cut, b.tops_cut, rows),
        kernels=_rows(a.kernels, b.kernels, a.tops_cut, b.tops_cut, rows),
        syncs=_rows(a.syncs, b.syncs, False, False, rows, lambda key: key[0]),
        findings=_rows(a.findings, b.findings, False, False, rows, lambda key: key[1] or key[0]),
        whatif=tuple(
            WhatIfDelta(
                name,
                Delta(*(_pick(s.whatif, name, 0) for s in (a, b))),
                Delta(*(_pick(s.whatif, name, 1) for s in (a, b))),
            )
            for name in dict.fromkeys([*a.whatif, *b.whatif])
        ),
        notes=notes,
        run_steps=run,
    )


def _run_noise(a: Side, b: Side, steps: StepsDiff) -> RunNoise | None:
    """The windows' per-step change against the whole runs' (None unless both sides timed their run)."""
    if a.run is None or b.run is None:
        return None
    ra, rb = a.run, b.run
    spread = max(ra.p90_us - ra.median_us, rb.p90_us - rb.median_us)
    median = Delta(ra.median_us, rb.median_us)
    run_change = rb.median_us - ra.median_us
    run_within = abs(run_change) <= spread
    window = steps.median_us.change if steps.paired else None
    window_within = None if window is None else abs(window) <= spread
    runs = f"the whole runs' median step {_ms(ra.median_us)} -> {_ms(rb.median_us)} ({_signed(run_change)}"
    runs += f", {median.rel:+.0%})" if median.rel is not None else ")"
    band = f"the runs' step-to-step spread (p90 - median, up to {_ms(spread)})"
    if window is None:
        reading = Reading.RUN_ONLY
        within = "within" if run_within else "beyond"
        note = f"{runs}, {within} {band}"
    elif window_within:
        reading = Reading.NOISE
        note = (
            f"the profiled steps differ by {_signed(window)} per step, within {band}: the change in "
            f"time is noise (rows new or gone on one side are not); {runs}"
        )
    elif run_within:
        reading = Reading.WINDOWS_ATYPICAL
        note = (
            f"the profiled steps differ by {_signed(window)} per step, beyond {band}, but {runs} is "
            "within it: the windows caught atypical steps (a busy machine); trust the whole runs"
        )
    elif (window > 0) != (run_change > 0):
        reading = Reading.WINDOWS_DISAGREE
        note = (
            f"the profiled steps differ by {_signed(window)} per step but {runs}: the windows and "
            "the runs disagree; trust the whole runs"
        )
    else:
        reading = Reading.CONFIRMED
        note = f"the whole runs confirm the profiled steps' change: {runs}, beyond {band}"
    return RunNoise(
        median,
        Delta(ra.p90_us, rb.p90_us),
        Delta(ra.steps, rb.steps),
        spread,
        window,
        window_within,
        run_within,
        reading,
        note,
    )


def _ms(us: float) -> str:
    return duration_text(us)


def _signed(us: float) -> str:
    return ("+" if us >= 0 else "-") + duration_text(abs(us))


def _notes(a: Side, b: Side, steps: StepsDiff, comparable: bool) -> tuple[str, ...]:
    """What a reader must know to read the figures: step pairing, CPU-only sides, missing top tables."""
    notes = [steps.note] if steps.note else []
    if not comparable:
        notes.append(
            f"the windows cover {len(a.steps)} and {len(b.steps)} steps: compare the per-step times, "
            "not the wall"
        )
    cpu = [which for side, which in ((a, "before"), (b, "after")) if side.cpu_only]
    if cpu:
        runs = "both runs are CPU-only" if len(cpu) == 2 else f"{cpu[0]} is a CPU-only run"
        notes.append(f"{runs}: no device, sync-wait or device what-if figures (shown as absent, not 0)")
    for side, which in ((a, "before"), (b, "after")):
        if side.ops is None:
            notes.append(
                f"{which} has no top tables (an analysis from an older stallscope): ops not compared"
            )
    return tuple(notes)


def _pick(whatif: Mapping[str, tuple[float, float]], name: str, i: int) -> float | None:
    got = whatif.get(name)
    return None if got is None else got[i]


def _shares(value: object) -> dict[str, float]:
    """A verdict's ``{kind: number}`` map (``path_share``, ``sensitivity_us``); {} when absent."""
    if not isinstance(value, dict):
        return {}
    return {str(k): _num(v, "verdict") for k, v in value.items()}


def _verdict(s: Side) -> VerdictSide:
    return VerdictSide(
        s.bottleneck,
        s.evidence,
        s.cpu_only,
        s.utilization,
        dict(s.path_share) if s.sensitivity_us else None,
        dict(s.sensitivity_us) if s.sensitivity_us else None,
    )


def _steps(a: Side, b: Side) -> StepsDiff:
    def stats(s: Side) -> tuple[float | None, float | None]:
        durs = [d for _n, d in s.steps]
        return (statistics.median(durs), statistics.fmean(durs)) if durs else (None, None)

    (med_a, mean_a), (med_b, mean_b) = stats(a), stats(b)
    na, nb = len(a.steps), len(b.steps)
    paired = min(na, nb)
    pairs = tuple(
        StepPair(i, a.steps[i][0], b.steps[i][0], Delta(a.steps[i][1], b.steps[i][1]))
        for i in range(min(paired, MAX_PAIRS))
    )
    if not na and not nb:
        note = "neither side has profiled steps (windows are first to last event): no per-step comparison"
    elif not na or not nb:
        which = "before" if not na else "after"
        note = f"{which} has no profiled steps (window = whole trace): no per-step comparison"
    elif na != nb:
        note = (
            f"before has {na} steps, after {nb}: the first {paired} paired by index; "
            "medians and means are over each side's own steps"
        )
    else:
        note = ""
    return StepsDiff(Delta(na, nb), Delta(med_a, med_b), Delta(mean_a, mean_b), pairs, paired, note)


def _rows(
    a: Mapping[Any, Tally] | None,
    b: Mapping[Any, Tally] | None,
    a_cut: bool,
    b_cut: bool,
    limit: int,
    name: Callable[[Any], str] = str,
) -> tuple[RowDelta, ...]:
    """Rows matched by key, most changed time first (a row absent from a whole side counts as 0 there;
    absent from a cut top table, as unknown). ``name`` makes a key readable."""
    if a is None or b is None:
        return ()
    out = []
    for key in dict.fromkeys([*a, *b]):
        x, y = a.get(key), b.get(key)
        if x is None:
            status = Status.ENTERED if a_cut else Status.NEW
        elif y is None:
            status = Status.LEFT if b_cut else Status.GONE
        else:
            same = x.count == y.count and x.time_us == y.time_us
            status = Status.SAME if same else Status.CHANGED
        out.append(
            RowDelta(
                name(key),
                (x or y or Tally(0, 0.0)).detail,
                status,
                Delta(*(_count(t, cut) for t, cut in ((x, a_cut), (y, b_cut)))),
                Delta(*(_time(t, cut) for t, cut in ((x, a_cut), (y, b_cut)))),
            )
        )
    moved = [r for r in out if r.status is not Status.SAME]
    moved.sort(key=lambda r: (-abs((r.time_us.after or 0.0) - (r.time_us.before or 0.0)), r.name))
    return tuple(moved[:limit])


def _count(t: Tally | None, cut: bool) -> int | None:
    return t.count if t is not None else (None if cut else 0)


def _time(t: Tally | None, cut: bool) -> float | None:
    return t.time_us if t is not None else (None if cut else 0.0)


# ----- the CI gate -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Gate:
    """One regression check of ``check --baseline``: ``value`` is (baseline, new)."""

    metric: str  # "wall" or "step median"
    value: Delta
    applied: bool
    regressed: bool
    note: str  # why it was not applied


def gate(d: Diff, max_regression_pct: float) -> tuple[Gate, ...]:
    """The wall (window) and the per-step median of after against before: a metric regressed when it
    grew by more than ``max_regression_pct`` percent of before. The wall is not gated when both sides
    have steps but not as many (their windows hold different work); the step median needs steps on
    both sides. Either is skipped, with the reason, when before is 0."""

    def judge(metric: str, value: Delta, why_not: str) -> Gate:
        if not why_not and not value.before:
            why_not = "the baseline's is 0"
        rel = value.rel
        if why_not or rel is None:
            return Gate(metric, value, False, False, why_not or "absent on a side")
        return Gate(metric, value, True, rel * 100.0 > max_regression_pct, "")

    s = d.steps
    na, nb = int(s.count.before or 0), int(s.count.after or 0)
    wall_why = "" if d.wall_comparable else f"the windows hold {na} and {nb} steps"
    step_why = "" if na and nb else ("the baseline" if not na else "the new run") + " has no profiled steps"
    return (judge("wall", d.wall_us, wall_why), judge("step median", s.median_us, step_why))


# ----- JSON ------------------------------------------------------------------------------------


def _delta(x: Delta) -> Doc:
    return {"before": x.before, "after": x.after, "change": x.change, "rel": x.rel}


def _row(r: RowDelta) -> Doc:
    return {
        "name": r.name,
        "detail": r.detail,
        "status": r.status.value,
        "count": _delta(r.count),
        "time_us": _delta(r.time_us),
    }


def diff_json(d: Diff) -> Doc:
    """The ``stallscope.diff/1`` document (docs/output.md): every key always present."""
    before, after = d.verdict
    s = d.steps
    return {
        "schema": SCHEMA,
        "before": d.before,
        "after": d.after,
        "wall_us": _delta(d.wall_us),
        "wall_comparable": d.wall_comparable,
        "verdict": {
            "before": asdict(before),
            "after": asdict(after),
            "changed": before.bottleneck != after.bottleneck or before.cpu_only != after.cpu_only,
        },
        "steps": {
            "count": _delta(s.count),
            "median_us": _delta(s.median_us),
            "mean_us": _delta(s.mean_us),
            "paired": s.paired,
            "note": s.note,
            "pairs": [
                {"index": p.index, "before": p.before, "after": p.after, "dur_us": _delta(p.dur_us)}
                for p in s.pairs
            ],
        },
        "device_utilization": _delta(d.device_utilization),
        "device_busy_us": _delta(d.device_busy_us),
        "device_idle_us": _delta(d.device_idle_us),
        "host_sync_wait_us": _delta(d.host_sync_wait_us),
        "sync_count": _delta(d.sync_count),
        "avoidable_sync_count": _delta(d.avoidable_sync_count),
        "would_sync_count": _delta(d.would_sync_count),
        "ops": [_row(r) for r in d.ops],
        "kernels": [_row(r) for r in d.kernels],
        "syncs": [_row(r) for r in d.syncs],
        "findings": [_row(r) for r in d.findings],
        "whatif": [
            {
                "scenario": w.scenario,
                "predicted_wall_us": _delta(w.predicted_wall_us),
                "saving_us": _delta(w.saving_us),
            }
            for w in d.whatif
        ],
        "notes": list(d.notes),
        "run_steps": _run_noise_json(d.run_steps),
    }


def _run_noise_json(r: RunNoise | None) -> Doc | None:
    if r is None:
        return None
    return {
        "median_us": _delta(r.median_us),
        "p90_us": _delta(r.p90_us),
        "steps": _delta(r.steps),
        "spread_us": r.spread_us,
        "window_change_us": r.window_change_us,
        "window_within_spread": r.window_within_spread,
        "run_within_spread": r.run_within_spread,
        "reading": r.reading.value,
        "note": r.note,
    }
