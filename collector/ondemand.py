"""Captures of a running program on request: ``stallscope profile --on-demand`` (and ``--every``) on the
program's side, ``stallscope capture PID`` on the asking side.

**The program's side.** With ``--on-demand`` the session counts and times steps as it does outside a
window, and no profiler runs. ``Control`` makes the run's folder and, inside it, a control folder
(``.control``, mode 0700: only the same user can ask), and registers the program in the user's registry
(``registry_dir()``, mode 0700: ``<pid>.json``) so that ``stallscope capture PID`` finds it. A daemon
thread looks into the control folder every ``POLL_S`` and answers at once (the program's steps, its
state); a capture it accepts is handed to the program's thread, which starts the window at a step
boundary (``stallscope.collector.session``): the step path itself only reads one attribute. When the
window's trace is written, the bundle is published (``capture-<K>``, or ``capture-<K>/rank<N>`` in a job)
and the program goes back to waiting.

**The asking side** (``capture``): finds the program (or, for a ``torchrun`` job, every rank on this
machine: the launcher's PID, or any rank's), asks each for its steps, picks the first step of the window
(the same one for all ranks: far enough ahead of the fastest rank that the request reaches it first),
sends the request and waits for the bundles. A request that cannot be served (the program is inside a
window, has exited, makes no step) gets one line. ``Every`` is the same asking side, run by the program
itself on a timer (by the job's local rank 0 for all ranks of a job on this machine).

The protocol is files: ``request-<id>.json`` written by the asker; ``answer-<id>.json`` (accepted or why
not, and the program's steps) and ``done-<id>.json`` (the bundle, or why there is none) written by the
program; each written whole (a temporary file renamed into place).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from stallscope.analyzer.core.errors import StallscopeError, UsageError
from stallscope.analyzer.core.numbers import parse_uint
from stallscope.collector.bundle import alive

if TYPE_CHECKING:
    from stallscope.collector.options import Capture

POLL_S = 0.05  # the control thread looks for requests this often
ANSWER_S = 10.0  # a program that does not answer a request in this long is stuck (or not ours)
LEAD_S = 0.5  # a job's window starts this long (in steps, at the fastest rank's rate) after the asking
CONTROL = ".control"
STATUS = "status.json"
_RUN_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


class CaptureError(StallscopeError):
    """A capture that cannot be served: one line, for the asker."""


def registry_dir() -> Path:
    """The user's registry of programs waiting for captures: ``$XDG_RUNTIME_DIR/stallscope`` (a per-user
    folder the system clears at logout), else ``~/.cache/stallscope/ondemand``."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "stallscope"
    return Path.home() / ".cache" / "stallscope" / "ondemand"


def _private_dir(path: Path) -> Path:
    """``path`` made (mode 0700) or checked: a folder of this user's that no one else may write."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid():
        raise UsageError(f"{path}: belongs to another user; stallscope will not use it")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` whole (readers never see half of it), readable by this user only."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(doc, default=str))
    os.replace(tmp, path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (``/proc/<pid>/stat`` field 22), to tell a reused PID apart;
    None when it is gone (or on a system without /proc)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def parent_of(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return parse_uint(fields[1]) if len(fields) > 1 else None


def new_run_id(name: str, job: str | None = None) -> str:
    """``<program>-<YYYYmmdd-HHMMSS>-<6 hex>``: unique, and safe in a URL and a file name. The ranks of a
    job (``job``: what they share, the launcher's PID among it) get one id: ``<program>-job-<10 hex>``."""
    safe = "".join(c if c in _RUN_ID_CHARS else "_" for c in name)[:60] or "run"
    if job is not None:
        return f"{safe}-job-{hashlib.sha256(job.encode()).hexdigest()[:10]}"
    return f"{safe}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


# -- the program's side ---------------------------------------------------------------------------------


@dataclass
class Request:
    """An accepted capture (``Control.pending``)."""

    id: str
    steps: int
    first_step: int | None  # the window's first recorded step; None: as soon as it can
    dest: Path  # the bundle's folder
    index: int
    run_id: str
    trigger: str  # "request" | "every"


class Demand(Protocol):
    """What the session asks of an on-demand run (``stallscope.collector.recording.OnDemandWriter``)."""

    def due(self, steps: int) -> Request | None: ...  # the step path's check

    def begin(self, request: Request) -> Path: ...  # the capture's trace path

    def started(self, request: Request, first_step: int) -> None: ...  # its first recorded step is set

    def publish(self, request: Request, capture: Capture) -> None: ...  # its window is written

    def fail(self, request: Request, why: str) -> None: ...  # it cannot be served

    def refuse(self, why: str) -> None: ...  # no further capture can be served


@dataclass
class Control:
    """The program's end of the protocol (see the module docstring). ``steps`` is kept current by the
    session at each step boundary; ``due()`` is the step path's one check."""

    run_dir: Path
    run_id: str
    argv: list[str]
    rank: int | None = None
    world: int | None = None
    local_rank: int | None = None
    job: str | None = None  # ranks of one job share it
    upload: str | None = None  # the run's dashboard (``--upload``): ``capture`` uploads there too
    window: int = 5  # steps a capture records when the request does not say (``--steps``)
    lead: int = 0  # steps the session runs between accepting a request and recording (probe, warm-up)
    control_dir: Path | None = None  # default: ``run_dir/.control``; a job's ranks share run_dir
    refuse: str | None = None  # set when no capture can be served any more (the program's own profiler)
    steps: int = 0
    state: str = "waiting"  # waiting | armed | starting | recording | exited
    first_step: int | None = None  # the capture being recorded: its first recorded step
    pending: Request | None = None
    captures: list[dict[str, Any]] = field(default_factory=list)
    _thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _rates: list[tuple[float, int]] = field(default_factory=list)
    _entry: Path | None = None
    _watched: bool = False  # someone waits on a request: keep status.json current

    @property
    def control(self) -> Path:
        return self.control_dir or self.run_dir / CONTROL

    def start(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        _private_dir(self.control)
        registry = _private_dir(registry_dir())
        pid = os.getpid()
        entry = {
            "pid": pid,
            "start": process_start(pid),
            "ppid": os.getppid(),
            "run_dir": str(self.run_dir.absolute()),
            "control": str(self.control.absolute()),
            "run_id": self.run_id,
            "argv": self.argv,
            "rank": self.rank,
            "world": self.world,
            "local_rank": self.local_rank,
            "job": self.job,
            "upload": self.upload,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        self._entry = registry / f"{pid}.json"
        _write_json(self._entry, entry)
        if self.rank in (None, 0):
            _write_json(self.run_dir / "run.json", entry)
        self._status()
        self._thread = threading.Thread(target=self._serve, name="stallscope-control", daemon=True)
        self._thread.start()

    # the step path ------------------------------------------------------------------------------------
    def due(self, steps: int) -> Request | None:
        """At each step boundary: the accepted request, if any (the session decides when it starts)."""
        self.steps = steps
        return self.pending

    # the session's reports ----------------------------------------------------------------------------
    def claim(self, request: Request) -> bool:
        """The session starts ``request``'s window: from now on it can no longer be withdrawn. False
        when it was withdrawn meanwhile."""
        with self._lock:
            if self.pending is not request:
                return False
            self.state = "starting"
            return True

    def recording(self, request: Request, first: int) -> None:
        with self._lock:
            self.state = "recording"
            self.first_step = first
        self._status()

    def finished(self, request: Request, done: dict[str, Any]) -> None:
        """The window of ``request`` is over: its bundle (or why there is none) is ``done``."""
        with self._lock:
            if self.pending is request:
                self.pending = None
                self.state = "waiting"
                self.first_step = None
                self._watched = False
            if done.get("bundle"):
                self.captures.append({"index": request.index, **done})
        _write_json(self.control / f"done-{request.id}.json", {"id": request.id, **done})
        self._status()

    def close(self, exit_code: int) -> None:
        """The program ends: no more requests; one still waiting for its window is told why."""
        self._stop.set()
        with self._lock:
            self.state = "exited"
            request, self.pending = self.pending, None
        if request is not None:
            with contextlib.suppress(OSError):
                _write_json(
                    self.control / f"done-{request.id}.json",
                    {
                        "id": request.id,
                        "bundle": None,
                        "error": f"the program exited (code {exit_code}) before the window",
                    },
                )
        with contextlib.suppress(OSError):
            self._status(exit_code=exit_code)
        if self._entry is not None:
            with contextlib.suppress(OSError):
                self._entry.unlink()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)

    # the control thread -------------------------------------------------------------------------------
    def _serve(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                self._tick()
            except OSError:  # a full disk, a folder removed under us: try again next tick
                continue

    def _tick(self) -> None:
        now = time.monotonic()
        self._rates.append((now, self.steps))
        while len(self._rates) > 2 and now - self._rates[0][0] > 2.0:
            self._rates.pop(0)
        for path in sorted(self.control.glob("request-*.json")):
            doc = _read_json(path)
            path.unlink(missing_ok=True)
            if doc is not None:
                self._answer(doc)
        if self._watched:
            self._status()

    def rate(self) -> float:
        """Steps per second over the last two seconds (0 when not stepping)."""
        if len(self._rates) < 2:
            return 0.0
        (t0, s0), (t1, s1) = self._rates[0], self._rates[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else 0.0

    def _answer(self, doc: dict[str, Any]) -> None:
        rid = str(doc.get("id", ""))
        if not rid or not all(c in _RUN_ID_CHARS for c in rid) or len(rid) > 64:
            return
        op = doc.get("op")
        reply: dict[str, Any] = {"id": rid, "ok": True}
        if op == "capture":
            why = self._accept(rid, doc)
            reply = {"id": rid, "ok": why is None, "why": why}
        elif op == "cancel":
            with self._lock:
                if self.pending is not None and self.pending.id == rid and self.state == "armed":
                    self.pending, self.state, self._watched = None, "waiting", False
            return
        elif op != "status":
            reply = {"id": rid, "ok": False, "why": f"unknown request {op!r}"}
        reply.update(steps=self.steps, rate=self.rate(), state=self.state, lead=self.lead, window=self.window)
        _write_json(self.control / f"answer-{rid}.json", reply)

    def _accept(self, rid: str, doc: dict[str, Any]) -> str | None:
        steps, index = doc.get("steps"), doc.get("index")
        first, dest, run_id = doc.get("first_step"), doc.get("dest"), doc.get("run_id")
        if not (isinstance(steps, int) and steps >= 1 and isinstance(index, int) and index >= 1):
            return "malformed request"
        if first is not None and not (isinstance(first, int) and first >= 1):
            return "malformed request"
        if not isinstance(dest, str) or not isinstance(run_id, str) or not run_id:
            return "malformed request"
        with self._lock:
            if self.state == "exited":
                return "the program has exited"
            if self.refuse is not None:
                return self.refuse
            if self.pending is not None:
                return f"busy: capture {self.pending.index} is {self.state} (steps from {self.pending.first_step or 'the next'})"
            trigger = "every" if doc.get("trigger") == "every" else "request"
            self.pending = Request(rid, steps, first, Path(dest), index, run_id, trigger)
            self.state = "armed"
            self._watched = True
        return None

    def _status(self, **extra: Any) -> None:
        doc = {
            "pid": os.getpid(),
            "steps": self.steps,
            "state": self.state,
            "rate": self.rate(),
            "captures": len(self.captures),
            "first_step": self.first_step,
            **extra,
        }
        _write_json(self.control / STATUS, doc)


# -- the asking side ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Program:
    """A program registered for captures (its registry entry)."""

    pid: int
    run_dir: Path
    run_id: str
    rank: int | None
    job: str | None
    upload: str | None
    ppid: int | None
    control: Path


def registered(registry: Path | None = None) -> list[Program]:
    """The live programs of this user that wait for captures (stale entries are removed)."""
    folder = registry or registry_dir()
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        doc = _read_json(path)
        pid = parse_uint(path.stem)
        if doc is None or pid is None:
            continue
        if not alive(pid) or (doc.get("start") and process_start(pid) != doc.get("start")):
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        with contextlib.suppress(OSError):
            if path.stat().st_uid != os.getuid():
                continue
        rank = doc.get("rank")
        found.append(
            Program(
                pid,
                Path(str(doc.get("run_dir", ""))),
                str(doc.get("run_id", "")),
                rank if isinstance(rank, int) else None,
                doc.get("job") if isinstance(doc.get("job"), str) else None,
                doc.get("upload") if isinstance(doc.get("upload"), str) else None,
                doc.get("ppid") if isinstance(doc.get("ppid"), int) else None,
                Path(str(doc.get("control") or Path(str(doc.get("run_dir", ""))) / CONTROL)),
            )
        )
    return found


def find_targets(pid: int, registry: Path | None = None) -> list[Program]:
    """The programs ``stallscope capture PID`` asks: the program ``pid`` and the other ranks of its job
    on this machine, or, for a launcher's PID (``torchrun``), the ranks it started. Lowest rank first."""
    programs = registered(registry)
    own = [p for p in programs if p.pid == pid]
    if own:
        job = own[0].job
        group = [p for p in programs if job is not None and p.job == job] or own
    else:
        group = [p for p in programs if _descends(p, pid)]
        jobs = {p.job for p in group}
        if len(jobs) > 1:
            group = [p for p in group if p.job == sorted(j or "" for j in jobs)[0]]
    if not group:
        if not alive(pid):
            raise CaptureError(f"no process {pid}: it has exited (or never ran)")
        raise CaptureError(
            f"process {pid} is not waiting for captures: start it with `stallscope profile --on-demand "
            "script.py ...` (as this user)"
        )
    return sorted(group, key=lambda p: (p.rank if p.rank is not None else -1, p.pid))


def _descends(p: Program, ancestor: int) -> bool:
    pid: int | None = p.ppid
    for _ in range(4):  # torchrun -> (agent) -> worker: a few levels at most
        if pid is None or pid <= 1:
            return False
        if pid == ancestor:
            return True
        pid = parent_of(pid)
    return False


def next_index(root: Path) -> int:
    """The next capture's number in the run folder ``root`` (``capture-<K>``)."""
    taken = [parse_uint(p.name[len("capture-") :]) for p in root.glob("capture-*")] if root.is_dir() else []
    return max([n for n in taken if n is not None], default=0) + 1


@dataclass
class Outcome:
    """A capture's result: ``bundle`` (a bundle, or a job folder of ``rank<N>`` bundles) and, per program,
    what it recorded."""

    bundle: Path
    index: int
    run_id: str
    steps: list[list[int] | None]
    notes: list[str]
    upload: str | None


def _send(p: Program, doc: dict[str, Any]) -> str:
    """Write request ``doc`` into ``p``'s control folder; its id."""
    rid = secrets.token_hex(8)
    _write_json(p.control / f"request-{rid}.json", {**doc, "id": rid})
    return rid


def ask(program: Program, doc: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Send one request to ``program`` and return its answer (``CaptureError`` when none comes)."""
    rid = _send(program, doc)
    try:
        return _wait_for(program, f"answer-{rid}.json", timeout)
    finally:  # unanswered: withdrawn (answered: the program removed it already)
        with contextlib.suppress(OSError):
            (program.control / f"request-{rid}.json").unlink()


def capture(
    programs: list[Program],
    steps: int | None,
    *,
    trigger: str = "request",
    timeout: float = 120.0,
    progress: Callable[[str], None] | None = None,
) -> Outcome:
    """Ask ``programs`` (one program, or the ranks of one job) to record ``steps`` whole steps (None: the
    run's own ``--steps``), wait for
    their bundles and return where they are (a job's ranks record the same steps: the window starts past
    the steps each program runs before it, its ``lead``, and past the fastest rank's steps in ``LEAD_S``).
    ``timeout``: how long
    the programs may make no step before the capture is given up."""
    say = progress or (lambda _m: None)
    head = programs[0]
    job = len(programs) > 1
    statuses = [ask(p, {"op": "status"}, ANSWER_S) for p in programs]
    for p, s in zip(programs, statuses, strict=True):
        if s.get("state") not in ("waiting", None):
            raise CaptureError(
                f"process {p.pid} is busy: a capture is {s.get('state')} (try again when it ends)"
            )
    if steps is None:
        steps = max(int(s.get("window") or 5) for s in statuses)
    first: int | None = None
    if job:
        current = max(int(s.get("steps") or 0) for s in statuses)
        rate = max(float(s.get("rate") or 0.0) for s in statuses)
        lead = max(int(s.get("lead") or 0) for s in statuses)
        first = current + math.ceil(rate * LEAD_S) + lead + 2
    index = next_index(head.run_dir)
    root = head.run_dir / f"capture-{index}"
    request = {
        "op": "capture",
        "steps": steps,
        "first_step": first,
        "index": index,
        "run_id": head.run_id,
        "trigger": trigger,
    }
    accepted: list[tuple[Program, str]] = []
    try:
        for p in programs:
            dest = root / f"rank{p.rank}" if job else root
            rid = _send(p, {**request, "dest": str(dest)})
            reply = _wait_for(p, f"answer-{rid}.json", ANSWER_S)
            if not reply.get("ok"):
                raise CaptureError(f"process {p.pid}: {reply.get('why') or 'refused'}")
            accepted.append((p, rid))
        what = f"steps {first}-{first + steps - 1}" if first else f"the next {steps} step(s)"
        say(f"capture {index}: asked {len(programs)} process(es) to record {what}")
        dones = [_wait_done(p, rid, timeout, say) for p, rid in accepted]
    except BaseException:
        for p, rid in accepted:  # withdraw what is not recording yet
            _cancel(p, rid)
        raise
    errors = [
        f"process {p.pid}: {d['error']}"
        for (p, _), d in zip(accepted, dones, strict=True)
        if not d.get("bundle")
    ]
    if errors and not any(d.get("bundle") for d in dones):
        raise CaptureError("; ".join(errors))
    recorded = [d.get("steps") for d in dones]
    notes = list(errors)
    if job and len({json.dumps(r) for r in recorded if r}) > 1:
        notes.append(
            "the ranks recorded different steps: "
            + ", ".join(f"rank {p.rank}: {r}" for p, r in zip(programs, recorded, strict=True))
        )
    for d in dones:
        notes.extend(str(n) for n in d.get("notes") or [])
    return Outcome(root, index, head.run_id, recorded, notes, head.upload)


def _cancel(p: Program, rid: str) -> None:
    """Withdraw request ``rid`` (a program already recording it goes on)."""
    with contextlib.suppress(OSError):
        _write_json(p.control / f"request-c{rid}.json", {"op": "cancel", "id": rid})


def _wait_for(p: Program, name: str, timeout: float) -> dict[str, Any]:
    path = p.control / name
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = _read_json(path)
        if doc is not None:
            path.unlink(missing_ok=True)
            return doc
        if not alive(p.pid):
            raise CaptureError(f"process {p.pid} has exited")
        time.sleep(POLL_S / 2)
    raise CaptureError(f"process {p.pid} did not answer in {timeout:.0f} s (is it stopped or stuck?)")


def _wait_done(p: Program, rid: str, timeout: float, say: Callable[[str], None]) -> dict[str, Any]:
    """Wait for the bundle of request ``rid``; give up when the program makes no step for ``timeout``."""
    done = p.control / f"done-{rid}.json"
    last_steps, last_change = -1, time.monotonic()
    said = ""
    while True:
        doc = _read_json(done)
        if doc is not None:
            done.unlink(missing_ok=True)
            return doc
        status = _read_json(p.control / STATUS) or {}
        steps = int(status.get("steps") or 0)
        if steps != last_steps:
            last_steps, last_change = steps, time.monotonic()
        line = f"process {p.pid}: {status.get('state', '?')}, step {steps}"
        if line != said and status.get("state") == "recording":
            say(f"process {p.pid}: recording from step {status.get('first_step')}")
            said = line
        if not alive(p.pid):
            doc = _read_json(done)  # written just before it ended
            if doc is not None:
                done.unlink(missing_ok=True)
                return doc
            raise CaptureError(f"process {p.pid} exited before the capture was written")
        if time.monotonic() - last_change > timeout:
            _cancel(p, rid)
            what = "made no step" if steps == 0 else f"made no step since step {steps}"
            raise CaptureError(
                f"process {p.pid} {what} in {timeout:.0f} s: it never steps (no optimizer.step(), backward "
                "pass, root-module call or stallscope.step()) or is stuck; the request is withdrawn"
            )
        time.sleep(POLL_S)


# -- captures by the program itself ----------------------------------------------------------------------


def parse_every(text: str) -> float:
    """``--every``: ``90s``, ``30m``, ``2h``, or a bare number of seconds; at least 1 s."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    t = text.strip().lower()
    scale = units.get(t[-1:])
    number = t[:-1] if scale is not None else t
    try:
        value = float(number) * (scale or 1.0)
    except ValueError:
        raise UsageError(f"--every {text}: give a duration like 90s, 30m or 2h") from None
    if not math.isfinite(value) or value < 1.0:
        raise UsageError(f"--every {text}: give a duration of at least 1 s (like 90s, 30m or 2h)")
    return value


class Every:
    """``--every``: capture the run (all its ranks on this machine) every ``period_s``, from a thread of
    the program; ``on_capture`` gets each ``Outcome`` (the upload), ``say`` one line per capture."""

    def __init__(
        self,
        own: Control,
        period_s: float,
        steps: int,
        on_capture: Callable[[Outcome], None] | None,
        say: Callable[[str], None],
    ) -> None:
        self.own, self.period_s, self.steps = own, period_s, steps
        self.on_capture, self.say = on_capture, say
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="stallscope-every", daemon=True)

    def start(self) -> None:
        if self.own.local_rank in (None, 0):  # one asker per job on this machine
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                programs = find_targets(os.getpid())
                outcome = capture(programs, self.steps, trigger="every", timeout=max(self.period_s, 60.0))
            except StallscopeError as exc:
                if not self._stop.is_set():
                    self.say(f"periodic capture skipped: {exc}")
                continue
            except OSError as exc:
                self.say(f"periodic capture skipped: {exc}")
                continue
            if len(programs) > 1:  # each rank said where its part went: the job's capture is one folder
                self.say(f"capture {outcome.index} of the job's {len(programs)} ranks: {outcome.bundle}")
            if self.on_capture is not None:
                with contextlib.suppress(Exception):
                    self.on_capture(outcome)
