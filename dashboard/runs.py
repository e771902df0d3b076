"""A long run's history: the captures of one run (``stallscope capture``, ``profile --every``) in
wall-clock order, each with its step time, utilization, bottleneck and top findings, and a flag on each
capture that differs from the run's earlier ones. Built from the store's catalog alone (the entries'
``headline.catalog_summary``), never from the captures' analyses, so a run of hundreds of captures is
listed as fast as the traces page.

A capture is **flagged** when, against the run's earlier captures,

- its step time is more than ``threshold`` (default 20%) above the *last good* capture's;
- it has a finding whose rule no earlier capture had;
- its bottleneck is not the last good capture's.

The *last good* capture is the latest earlier capture that was not itself flagged. A regression therefore
stays flagged, capture after capture, until a capture is back within the threshold of the time before
it; a finding's rule is new only once. The run's first capture is never flagged (there is nothing to
compare it with). A flag names its last good capture and links the dashboard's comparison of the two
(``/compare?a=GOOD&b=FLAGGED``).

A run id comes from the capture's document (``source.capture.run_id``); while a capture waits for its
analysis (or when it failed) its ``run:<id>`` tag stands in. A run id is user text: only ids of the shape
``RUN_ID_RE`` are grouped and served (``check_run_id``); a capture with any other id is listed as a plain
upload.
"""

from __future__ import annotations

import calendar
import re
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from stallscope.dashboard.headline import CPU_ONLY
from stallscope.dashboard.store import Entry, Status, StoreError
from stallscope.display.text import rule_title
from stallscope.display.units import duration

#: A run id: 1 to 128 letters, digits, ``.``, ``_`` or ``-`` (what ``stallscope capture`` makes of the
#: program's name), but not ``.`` or ``..`` (a browser would read those as a folder of the URL).
RUN_ID_RE = re.compile(r"(?!\.\.?$)[A-Za-z0-9._-]{1,128}")
RUN_TAG = "run:"  # the tag ``stallscope upload --tag run:<id>`` gives a capture
DEFAULT_THRESHOLD = 0.20
_AT = "%Y-%m-%dT%H:%M:%SZ"


class RunError(StoreError):
    """Base of the run history's errors (one line, safe to show)."""


class BadRunId(RunError):
    """Text that cannot be a run id (answered 400: it is never looked up)."""

    @classmethod
    def shape(cls) -> BadRunId:
        """The error, which says what a run id is and never repeats the text (whatever a URL carried)."""
        return cls("not a run id: a run id is 1 to 128 of A-Z a-z 0-9 . _ - (and not . or ..)")


class BadThreshold(RunError):
    """A step-time threshold that is not a fraction in (0, 10]."""


class UnknownRun(RunError):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"no captures of run {run_id!r}")


def check_run_id(text: object) -> str:
    """``text`` if it has the shape of a run id (``RUN_ID_RE``), else ``BadRunId`` (which never repeats
    the text: it is whatever a URL carried)."""
    if not isinstance(text, str) or not RUN_ID_RE.fullmatch(text):
        raise BadRunId.shape()
    return text


def parse_threshold(text: str | None) -> float:
    """The step-time threshold of a URL's ``?threshold=`` (a fraction: 0.2 is 20%), the default when absent."""
    if text is None or text == "":
        return DEFAULT_THRESHOLD
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 < value <= 10.0:  # also refuses nan
        raise BadThreshold("threshold is a fraction above 0 and at most 10 (0.2: step time up 20%)")
    return value


def run_url(run_id: str) -> str:
    """The run page's path (the id is checked, and quoted all the same)."""
    return f"/runs/{urllib.parse.quote(check_run_id(run_id), safe='')}"


def diff_url(before_id: str, after_id: str) -> str:
    """The compare page of two entries (ids are the store's 32 hex digits)."""
    return f"/compare?a={urllib.parse.quote(before_id)}&b={urllib.parse.quote(after_id)}"


def run_of(entry: Entry) -> str | None:
    """The run an entry is a capture of: its document's ``source.capture.run_id`` once analysed, else
    its ``run:<id>`` tag; None for a plain upload, or an id not of the run id's shape."""
    if entry.status is Status.READY and entry.summary is not None:
        capture = entry.summary.get("capture")
        run_id = capture.get("run_id") if isinstance(capture, dict) else None
    else:
        run_id = next((t[len(RUN_TAG) :] for t in entry.tags if t.startswith(RUN_TAG)), None)
    return run_id if isinstance(run_id, str) and RUN_ID_RE.fullmatch(run_id) else None


def groups(entries: Iterable[Entry]) -> dict[str, list[Entry]]:
    """The entries of each run, in the order given (the store's: newest first)."""
    out: dict[str, list[Entry]] = {}
    for e in entries:
        run_id = run_of(e)
        if run_id is not None:
            out.setdefault(run_id, []).append(e)
    return out


@dataclass(frozen=True)
class Change:
    """One way a capture differs from the run before it."""

    kind: str  # "step_time", "new_finding" or "bottleneck"
    text: str  # one line, e.g. "step time 2.01 ms → 8.01 ms (+298%)"
    before: Any  # the last good capture's value (step time in µs, bottleneck); None for a new finding
    after: Any  # this capture's (step time in µs, the finding's rule, bottleneck)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "text": self.text, "before": self.before, "after": self.after}


@dataclass(frozen=True)
class Flag:
    """Why a capture is flagged, and the last good capture it is compared with."""

    changes: tuple[Change, ...]
    against_id: str
    against_index: int | None
    diff: str  # the compare page: the last good capture before, this one after

    def to_json(self) -> dict[str, Any]:
        return {
            "reasons": [c.to_json() for c in self.changes],
            "against": {"id": self.against_id, "index": self.against_index},
            "diff": self.diff,
        }


@dataclass(frozen=True)
class Capture:
    """One analysed capture, as its catalog entry describes it."""

    entry: Entry
    index: int | None  # 1 for the run's first capture
    at: str  # when it was taken, as the document says (UTC)
    when: float  # seconds since the epoch: ``at``, or the upload time when ``at`` is not a time
    trigger: str | None  # "request" or "every"
    steps: list[int] | None  # [first, last] step recorded
    step_us: float | None
    step_count: int  # the profiled steps ``step_us`` is the median of (0: the window's length)
    utilization: float | None  # null on a CPU-only capture
    cpu_only: bool
    bottleneck: str | None  # "CPU only" for a CPU-only capture
    top_findings: tuple[dict[str, Any], ...]
    rules: frozenset[str]
    flag: Flag | None = None

    @property
    def time_text(self) -> str:
        """When it was taken, ``2026-12-02 03:00:00`` (UTC); ``at`` as it is when it is not a time."""
        return self.at.replace("T", " ").removesuffix("Z") if _is_time(self.at) else self.at

    def to_json(self) -> dict[str, Any]:
        e = self.entry
        return {
            "id": e.id,
            "name": e.name,
            "url": f"/trace/{e.id}",
            "index": self.index,
            "at": self.at,
            "trigger": self.trigger,
            "steps": self.steps,
            "step_us": self.step_us,
            "step_count": self.step_count,
            "device_utilization": self.utilization,
            "cpu_only": self.cpu_only,
            "bottleneck": self.bottleneck,
            "top_findings": list(self.top_findings),
            "flag": None if self.flag is None else self.flag.to_json(),
        }


@dataclass(frozen=True)
class Run:
    """A run's captures in wall-clock order, and its entries that have no analysis (yet)."""

    run_id: str
    threshold: float
    captures: tuple[Capture, ...]
    others: tuple[Entry, ...]  # pending, being analysed, failed or corrupt; newest first

    @property
    def flagged(self) -> int:
        return sum(c.flag is not None for c in self.captures)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "url": run_url(self.run_id),
            "threshold": self.threshold,
            "flagged": self.flagged,
            "captures": [c.to_json() for c in self.captures],
            "others": [
                {
                    "id": e.id,
                    "name": e.name,
                    "url": f"/trace/{e.id}",
                    "status": e.status.value,
                    "error": e.error,
                }
                for e in self.others
            ],
        }


def history(entries: Iterable[Entry], run_id: str, threshold: float = DEFAULT_THRESHOLD) -> Run:
    """The run ``run_id`` among ``entries`` (``UnknownRun`` when none is one of its captures), each
    analysed capture flagged or not (see the module's doc)."""
    check_run_id(run_id)
    mine = groups(entries).get(run_id)
    if not mine:
        raise UnknownRun(run_id)
    return build(run_id, mine, threshold)


def build(run_id: str, entries: list[Entry], threshold: float = DEFAULT_THRESHOLD) -> Run:
    """The history of one run's ``entries`` (``groups``' list for it)."""
    ready = [e for e in entries if e.status is Status.READY and e.summary is not None]
    ordered = sorted((_capture(e) for e in ready), key=lambda c: (c.when, c.index or 0, c.entry.uploaded_at))
    captures: list[Capture] = []
    seen: set[str] = set()
    good: Capture | None = None
    for c in ordered:
        flag = None if good is None else _flag(c, good, seen, threshold)
        seen |= c.rules
        captures.append(replace(c, flag=flag))
        if flag is None:
            good = c
    others = tuple(e for e in entries if not (e.status is Status.READY and e.summary is not None))
    return Run(run_id, threshold, tuple(captures), others)


def _capture(e: Entry) -> Capture:
    s = e.summary or {}
    found = s.get("capture")
    cap: dict[str, Any] = found if isinstance(found, dict) else {}
    at = str(cap.get("at") or "")
    try:
        when = float(calendar.timegm(time.strptime(at, _AT)))
    except (ValueError, OverflowError):
        when = e.uploaded_at
    index = cap.get("index")
    steps = cap.get("steps")
    top = tuple(f for f in s.get("top_findings") or () if isinstance(f, dict))
    rules = s.get("finding_rules")
    if not isinstance(rules, list):  # not catalogued with its rules: the top findings' are all it has
        rules = [f.get("rule") for f in top]
    cpu = bool(s.get("cpu_only"))
    return Capture(
        entry=e,
        index=index if isinstance(index, int) else None,
        at=at,
        when=when,
        trigger=cap.get("trigger"),
        steps=steps if isinstance(steps, list) else None,
        step_us=_number(s.get("step_us")),
        step_count=int(s.get("step_count") or 0),
        utilization=None if cpu else _number(s.get("device_utilization")),
        cpu_only=cpu,
        bottleneck=CPU_ONLY if cpu else (str(s["bottleneck"]) if s.get("bottleneck") else None),
        top_findings=top,
        rules=frozenset(str(r) for r in rules if r),
    )


def _is_time(at: str) -> bool:
    try:
        time.strptime(at, _AT)
    except ValueError:
        return False
    return True


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _flag(c: Capture, good: Capture, seen: set[str], threshold: float) -> Flag | None:
    """How ``c`` differs from the last good capture ``good`` and from every earlier capture's rules."""
    changes: list[Change] = []
    if c.step_us is not None and good.step_us and c.step_us > good.step_us * (1.0 + threshold):
        rise = c.step_us / good.step_us - 1.0
        text = f"step time {duration(good.step_us)} → {duration(c.step_us)} (+{rise:.0%})"
        changes.append(Change("step_time", text, good.step_us, c.step_us))
    for rule in sorted(c.rules - seen):
        changes.append(Change("new_finding", f"new finding: {rule_title(rule)} ({rule})", None, rule))
    if c.bottleneck and good.bottleneck and c.bottleneck != good.bottleneck:
        changes.append(
            Change(
                "bottleneck", f"bottleneck {good.bottleneck} → {c.bottleneck}", good.bottleneck, c.bottleneck
            )
        )
    if not changes:
        return None
    return Flag(tuple(changes), good.entry.id, good.index, diff_url(good.entry.id, c.entry.id))
