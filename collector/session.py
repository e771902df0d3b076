"""The profiling session: ``torch.profiler`` over a workload, steps found without code changes.

How the window is chosen (``ProfileOptions``):

- **never the imports**: nothing is recorded until the program's first torch call
  (``stallscope.collector.window.FirstOpTrigger``).
- **steps** (the default): a global optimizer step hook and ``stallscope.step()`` mark steps. From the
  first torch call to the first step, everything is recorded (the fallback window, kept only if no step
  ever comes; the event budget ends it early: ``_on_event_budget``). At the first step that recording is
  dropped; with ``--skip`` of 1 or more the next step is recorded alone (the probe: its event count
  sets how many steps fit in ``max_events``, ``stallscope.collector.window.budget_steps``; with ``--skip 0`` the
  dropped recording's count does), then a scheduled profiler takes over,
  ``schedule(skip_first=skip, wait=0, warmup=warmup, active=steps, repeat=1)`` (the probe step counted
  among the skipped), counted from the end of the first iteration: the first (slowest) iteration is
  never in the window.
- **never across profilers inside a record_function**: the optimizer hook runs inside torch's
  ``Optimizer.step#...`` annotation; a profiler started there after another one saw the annotation begin
  makes torch write its end into freed memory (a crash later). So a step found by the hook is counted at
  once (step timing), and the profiler's transition runs when ``optimizer.step`` returns (a wrapper on
  the optimizer instance, installed by the first hook call, which also sees steps taken through an LR
  scheduler). The first step is already running then: its transition happens at the end of the second.
  If the wrapper is bypassed (a program that kept the old ``opt.step``), transitions run in the hook,
  and the fallback's stop and the scheduled profiler's start fall on two different steps.
- **who marks steps**: ``stallscope.step()`` (wins over the others), else the optimizer: once the program
  makes one (``stallscope.collector.program.OptimizerWatch``), forwards and backward passes are no steps
  (evaluation and rollouts belong to the training iteration they run in). Without an optimizer, backward
  passes (a manual-SGD loop: ``stallscope.collector.program.BackwardSteps``), else the root module's
  forward calls, or its ``generate`` calls when it generates (``stallscope.collector.program.ForwardSteps``).
  A source that comes later in the run wins over one that counted steps before it (an optimizer made
  before the session, a first backward after inference-like forwards): the steps counted so far, and any
  window they opened, are dropped, and counting starts again (``_restart_steps``).
- **one numbering**: steps are numbered as the run counts them: the trace's ``ProfilerStep#N`` is the
  run's N-th step (``_sync_step_num`` before each profiler step), stderr and the sidecar's
  ``profiled_steps`` say the same numbers. A window the run ends inside is said so (``_short_window``).
- **the program's own profiler**: when it starts one, the session stops its own and never starts another
  (``stallscope.collector.program.OwnProfilerWatch``): torch allows one profiler at a time.
- **duration** (``--duration S``): everything from the first torch call until S seconds after the start (steps still labelled), then
  the profiler stops at the next step or when a SIGALRM timer fires in the main thread, or earlier when
  the event budget is reached (``_on_event_budget``).

- **origin tracking** (CPU-only runs, ``stallscope.collector.origin``): on from the start to the first step and, in
  a scheduled window, for the one step before it (the sync sites learn which reads are would-be syncs);
  off inside the window and after it, where its per-call cost would slow the steps being measured.

The optional collaborators (``stallscope.collector.sites.SyncSiteRecorder`` for exact sync call sites during the
window, ``stallscope.collector.steptiming.StepTimer`` for every step of the run) are used when importable.

torch is imported only when a session starts: ``active()`` and ``step()`` are free without one.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
import time
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from stallscope.analyzer.core.errors import StallscopeError
from stallscope.collector.ondemand import Demand, Request
from stallscope.collector.options import Capture as Capture
from stallscope.collector.options import ProfileOptions as ProfileOptions
from stallscope.collector.origin import DataLoaderWatch, OriginTracker
from stallscope.collector.program import OURS, BackwardSteps, ForwardSteps, OptimizerWatch, OwnProfilerWatch
from stallscope.collector.window import (
    BYTES_PER_EVENT,
    EVENTS_PER_CALL,
    EVENTS_PER_CALL_CUDA,
    FirstOpTrigger,
    Heartbeat,
    budget_steps,
    quiet_profiler,
    recorded_events,
    release,
    renumber,
    write_trace,
)

TORCH_MISSING = (
    "torch is not installed; the collector needs it: `pip install torch` "
    "(for a CUDA build see https://pytorch.org/get-started/locally/)"
)
_RECORDING = ("RECORD", "RECORD_AND_SAVE")
WHOLE_RUN_NOTE = "no steps: profiled the whole run from its first torch call (imports are not profiled)"


_active: Session | None = None
_lock = threading.Lock()


def active() -> Session | None:
    """The running session, if any (one per process)."""
    return _active


def require_torch() -> Any:
    """``import torch``, or a ``StallscopeError`` that says how to install it."""
    try:
        import torch
    except ImportError:
        raise StallscopeError(TORCH_MISSING) from None
    return torch


def _optional(module: str, name: str) -> Any:
    """A collaborator class from another collector module, or None while it does not exist."""
    try:
        mod = __import__(module, fromlist=[name])
    except ImportError:
        return None
    return getattr(mod, name, None)


class Session:
    """One profiling run. ``start()``, then ``step()`` per iteration (also called by the optimizer hook),
    then ``stop()`` -> ``Capture``. The trace is exported to ``trace_path`` (gzip Kineto JSON) as soon as
    the window closes, so memory is freed early and an interrupted run still leaves its trace."""

    def __init__(self, options: ProfileOptions, trace_path: Path, demand: Demand | None = None) -> None:
        options.check()
        if demand is not None and options.duration is not None:
            raise StallscopeError("--on-demand records whole steps: it does not take --duration")
        self.options = options
        self.trace_path = trace_path
        # on demand (``stallscope.collector.ondemand``): no window until a request; each one is a bundle
        self._demand = demand
        self._request: Request | None = None  # the capture under way
        self._notes_from = 0  # the capture's notes are self.notes[_notes_from:]
        self._window_at: int | None = None  # the window's first recorded step, when the request names it
        self.cuda = False
        self.notes: list[str] = []
        self._torch: Any = None
        self._prof: Any = None  # the profiler currently running
        self._scheduled = False  # _prof is the scheduled one (after the first step)
        self._hook: Any = None
        self._pre_hook: Any = None
        self._explicit = False  # stallscope.step() was called: the optimizer hook stands down
        self._optimizer_id: int | None = None  # only the first optimizer that steps counts
        self._steps = 0
        self._exported = False
        self._stopped = False
        self._timer: Any = None
        self._recorder: Any = None
        self._sync_sites: list[dict[str, Any]] = []
        self._deadline: float | None = None
        self._old_alarm: Any = None
        self._in_step = False
        self._alarm_fired = False
        self._window_done = False  # the scheduled window was exported; stop the profiler at the next step
        self._pending = False  # an optimizer step was counted; its profiler transition is still to do
        self._optimizer_depth = 0  # inside a wrapped optimizer step (and so inside its record_function)
        self._wrapped: tuple[Any, Any, Any] | None = None  # (optimizer, its own step or None, our step)
        self._awaiting_start = False  # the fallback was dropped; the scheduled profiler starts next step
        self._trigger: FirstOpTrigger | None = None  # opens the window at the first torch call
        self._origin: OriginTracker | None = None  # CPU-only runs: marks tensors a GPU run would hold
        self._tracked_steps: frozenset[int] = frozenset()  # scheduled window: the steps origin is tracked in
        self._thread = threading.get_ident()  # the thread that started the session (modes are per thread)
        self._loaders = DataLoaderWatch()
        self._forward = ForwardSteps(self._on_forward_step)
        self._forward_source = False  # steps come from root-module calls
        self._backward = BackwardSteps(self._on_backward_step)
        self._backward_source = False  # steps come from backward passes (no optimizer)
        self._made = OptimizerWatch(self._on_optimizer_made)
        self._window_first = 0  # the first recorded step of the scheduled window (the run's numbering)
        self._window_last = 0  # its last recorded step, once the window is written
        self._dropped: dict[str, int] = {}  # steps a source counted before another took over, by source
        self._tail_step = 0  # the run ended inside the window: the ProfilerStep open then, renamed
        self._watch = OwnProfilerWatch(self._step_aside)
        self._aside = False  # the program started its own profiler: ours stopped for good
        self._first_step_events = 0  # events recorded up to the first step (the budget's measure)
        self._budget_hit = False  # a window without steps reached the event budget: it ends
        self._budget_note: str | None = None
        self._fallback_cut = False  # the budget ended the recording before the first step
        self._window_opened = 0.0  # time.monotonic() at the first torch call
        self._probing = False  # _prof records one skipped step to measure the events of a step
        self._probed_steps = 0
        self._step_events = 0  # events of the probed step (the budget's measure when there is one)
        self._active_steps = options.steps  # steps the scheduled window records (the budget may cut it)
        self._heartbeat: Heartbeat | None = None
        self._counter: FirstOpTrigger | None = None  # counts calls: the probe, or an over-budget window
        self._window_counted = False  # one step was measured over the budget: the window is counted too
        self._partial_step = 0  # the budget ended the recording inside this step (0: not cut)
        self._probe_cut = False  # the budget ended the probe inside its step
        self._first_recorded = 0  # the scheduled window's first recorded step
        self._per_call = 0.0  # the most events per counted torch call a recording measured
        self._spent: list[FirstOpTrigger] = []  # counters done with, still on the mode stack
        self._trace_events = 0  # events of the written trace
        self._write_stopped = False  # a signal stopped the trace's writing: the partial file was removed
        # told (one line) when the window closes while the program goes on; the CLI prints it
        self.on_window_closed: Callable[[str], None] | None = None
        # told what takes long (torch collecting and writing the trace) and budget notes; the CLI prints it
        self.on_progress: Callable[[str], None] | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        global _active
        torch = require_torch()
        with _lock:
            if _active is not None:
                raise StallscopeError("a stallscope profiling session is already running in this process")
            _active = self
        try:
            self._begin(torch)
        except BaseException:
            self.stop()
            raise

    def _begin(self, torch: Any) -> None:
        self._torch = torch
        self._thread = threading.get_ident()
        self.cuda = bool(torch.cuda.is_available())
        if not self.cuda:
            self.notes.append("no CUDA device available: profiling the CPU only")
        timer_cls = _optional("stallscope.collector.steptiming", "StepTimer")
        self._timer = timer_cls() if timer_cls is not None else None
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self._hook = register_optimizer_step_post_hook(self._on_optimizer_step)
        self._pre_hook = register_optimizer_step_pre_hook(self._on_optimizer_start)
        self._loaders.install()
        self._watch.install()
        self._made.install()
        if self.options.auto_steps:
            self._forward.install()
            self._backward.install()
        if not self.cuda:  # where each tensor would live: the ground for would-be syncs
            self._origin = OriginTracker()
            self._origin.install()
        if self._demand is not None:  # no window until a capture is asked for; steps are the windows'
            self._scheduled = True
            return
        self._trigger = FirstOpTrigger(
            self._open_window, self._on_event_budget, self._call_limit(), self._max_growth()
        )
        self._trigger.install()
        if self.options.duration is not None:
            self._deadline = time.monotonic() + self.options.duration
            self._arm_alarm(self.options.duration)

    def _open_window(self) -> None:
        """The program's first torch call (imports are over): start recording. Duration mode: one
        profiler, steps labelled; else the fallback (no labels), dropped at the first step."""
        if self._stopped or self._scheduled or self._prof is not None or self._alarm_fired or self._aside:
            return
        always = self._torch.profiler.ProfilerAction.RECORD
        self._prof = self._profiler(schedule=(lambda _n: always) if self.options.duration else None)
        if self.options.duration:
            renumber(self._prof, self._steps + 1)
        self._prof.start()
        self._window_opened = time.monotonic()
        self._enter_recorder()

    def _on_event_budget(self) -> None:
        """A window without steps (the fallback, which is the whole run if no step comes, or
        ``--duration``) has seen torch calls worth about ``--max-events`` events: end it now, or when the
        step or optimizer step under way returns (as the duration alarm does)."""
        if self._stopped or self._scheduled or self._prof is None or self._aside:
            return
        self._budget_hit = True
        if not self._in_step:  # inside an optimizer step too: a profiler stopped there is never restarted
            self._stop_profiler()  # before the step's record_function ends (the next starts at a step)

    def _call_limit(self) -> int:
        """The torch calls (seen from Python) worth about ``--max-events`` events; 0 without a budget.
        A call is worth the default estimate, or more where a recording measured more (calls torch makes
        itself, a backward pass's ops, are not seen: their events count on the calls that are)."""
        per_call = max(float(EVENTS_PER_CALL_CUDA if self.cuda else EVENTS_PER_CALL), self._per_call)
        return max(1, int(self.options.max_events / per_call)) if self.options.max_events else 0

    def _max_growth(self) -> int:
        """Resident memory a recording may add before it counts as over the budget (its events' memory)."""
        return self.options.max_events * BYTES_PER_EVENT

    def _learn_rate(self, events: int, calls: int) -> None:
        """A finished recording made ``events`` events over ``calls`` counted calls."""
        if events > 0 and calls > 0:
            self._per_call = max(self._per_call, events / calls)

    def _count_calls(self, on_limit: Callable[[], None]) -> None:
        """Count this thread's torch calls until ``on_limit`` (the probe step, or a window whose measured
        step was over the budget). Only on a stack without the program's modes: a mode pushed under
        the program's own would be popped by the program's exit (``_retrack`` lifts it off to change
        origin tracking under it)."""
        self._stop_counting()
        if not self.options.max_events or threading.get_ident() != self._thread:
            return
        depth = self._torch._C._len_torch_function_stack()
        ours = 1 if self._origin is not None and self._origin.installed else 0  # then it is the one mode
        if depth > ours:
            return
        counter = FirstOpTrigger(lambda: None, on_limit, self._call_limit(), self._max_growth())
        counter.start_counting()
        counter.install()
        self._counter = counter

    def _stop_counting(self) -> None:
        """Stop counting; the mode comes off now, or (from inside its own handler, or under a mode of the
        program's) at a later step boundary: ``_drop_spent``."""
        counter, self._counter = self._counter, None
        if counter is not None:
            counter.limit = 0
            self._spent.append(counter)
        self._drop_spent()

    def _drop_spent(self) -> None:
        self._spent = [c for c in self._spent if not c.remove()]

    def _on_probe_budget(self) -> None:
        """The probe step alone reached the budget: stop recording it now (its events are the measure: one
        step is over the budget), the step goes on unrecorded."""
        if self._probing and self._prof is not None and not self._in_step:
            self._end_probe()
            self._probing = self._probe_cut = True  # the step's end still starts the scheduled window

    def _on_window_budget(self) -> None:
        """The scheduled window reached the budget inside a step: stop recording now (the window ends
        with a partial step, said in the notes)."""
        if self._stopped or self._prof is None or not self._scheduled or self._in_step:
            return
        if self._prof.current_action.name not in _RECORDING:
            return
        self._partial_step = self._steps + 1
        self._window_done = True
        self._stop_profiler()

    def _partial_note(self, events: int) -> str:
        n = self._partial_step
        return (
            f"--max-events {self.options.max_events:,}: the budget was reached inside step {n}: recording "
            f"stopped there ({events:,} events), so the last step (ProfilerStep#{n}) is partial; raise "
            "--max-events for whole steps"
        )

    def _budget_window_note(self, prof: Any) -> str:
        covered = time.monotonic() - self._window_opened
        limit = self.options.max_events
        events = recorded_events(prof)
        what = f"the --duration {self.options.duration:g} s window" if self.options.duration else "the window"
        return (
            f"--max-events {limit:,}: {what} ended early, {covered:.1f} s after the first torch call "
            f"({events:,} events recorded); raise it, or --max-events 0, for more"
        )

    def _on_optimizer_made(self) -> None:
        """The program made an optimizer: it will mark the steps, not forwards nor backward passes (an
        evaluation or a rollout before the first ``optimizer.step()`` is part of a training iteration)."""
        self._forward.remove()
        self._backward.remove()

    def _on_optimizer_start(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """An optimizer is stepping (LBFGS calls its closure, and so the model, inside its step): from now
        on the optimizer marks the steps. Steps that forwards or backward passes counted before it (an
        optimizer made before the session started) are dropped."""
        self._forward.remove()
        self._backward.remove()
        if self._optimizer_id is None and not self._explicit and self._steps and self._implicit_source():
            self._restart_steps("optimizer steps")
        self._forward_source = self._backward_source = False

    def _implicit_source(self) -> bool:
        return self._forward_source or self._backward_source

    def _on_forward_step(self) -> None:
        """A root-module (or ``generate``) call began after an earlier one ended: a step of an
        inference loop, unless the optimizer, backward passes or ``stallscope.step()`` mark the steps."""
        if self._explicit or self._optimizer_id is not None or self._made.made or self._stopped:
            self._forward.remove()
            return
        if self._backward_source or threading.get_ident() != self._thread:
            return  # a module called on another thread is no step of the loop
        self._forward_source = True
        self._step()

    def _on_backward_step(self) -> None:
        """A backward pass returned in a loop without an optimizer (manual SGD): it ends a step. Steps
        that forward calls counted before the first one are dropped."""
        if self._explicit or self._optimizer_id is not None or self._made.made or self._stopped:
            self._backward.remove()
            return
        if threading.get_ident() != self._thread:
            return  # a backward pass on another thread is no step of the loop
        if not self._backward_source:
            self._forward.remove()
            if self._steps and self._forward_source:
                self._restart_steps("backward passes")
            self._forward_source, self._backward_source = False, True
        self._step()

    def _restart_steps(self, source: str) -> None:
        """Another source (``source``, as said on stderr) marks the steps from now on: forget the steps
        counted so far, and what their window recorded or wrote; the next step is the run's first again."""
        had = self._steps
        what = "backward passes" if self._backward_source else "forward calls"
        if self._forward.generate:
            what = "generate calls"
        self._exit_recorder(keep=False)
        prof, self._prof = self._prof, None
        if prof is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prof.on_trace_ready = None
                prof.stop()
            release(prof)
        if self._exported:  # a window of the old steps was written (and said): it is not the trace
            with contextlib.suppress(OSError):
                self.trace_path.unlink()
            if self._window_last:
                self._progress(
                    f"the window written (steps {self._window_first}-{self._window_last}, marked by {what}) "
                    f"is dropped: {source} mark the steps from now on"
                )
        self._steps = self._probed_steps = self._step_events = self._first_step_events = 0
        self._scheduled = self._probing = self._awaiting_start = self._pending = False
        self._exported = self._window_done = False
        self._window_first = self._window_last = 0
        self._active_steps = self.options.steps
        self._tracked_steps = frozenset()
        if self._timer is not None and hasattr(self._timer, "restart"):
            self._timer.restart()
        self._dropped[what] = self._dropped.get(what, 0) + had
        if self._demand is not None and self._request is not None:
            request, self._request = self._request, None
            self._demand.fail(
                request, f"{source} mark the steps from now on: the window of the old steps is dropped"
            )
            self._reset_window()
        if self._demand is not None:
            self._scheduled = True  # on demand there is no fallback window
        self._retrack()

    def _dropped_note(self) -> str | None:
        """At the end: steps that a source counted before another took over, and so are not counted."""
        if not self._dropped:
            return None
        source = {"optimizer": "optimizer steps", "backward": "backward passes"}.get(
            self._step_source() or "", "its steps"
        )
        before = " and ".join(f"{n} marked by {what}" for what, n in self._dropped.items())
        return f"the steps are {source}: the step(s) counted before the first ({before}) are not counted"

    def _step_aside(self) -> None:
        """The program is starting a profiler of its own: stop ours now and never start another, so the
        program's profiling works as it would without stallscope. What ours recorded until now is kept
        (written as the trace, as at the end of a window); a window already written stays."""
        if self._aside or self._stopped:
            return
        self._aside = True
        self._awaiting_start = False
        self._stop_counting()
        if self._trigger is not None:
            self._trigger.remove()
        prof, self._prof = self._prof, None
        keep = (
            prof is not None
            and not self._exported
            and not self._probing  # a probe measures a skipped step: never the trace
            and prof.current_action.name in _RECORDING
        )
        if prof is not None:
            if keep:
                self._collecting()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if not keep:
                        prof.on_trace_ready = None
                    prof.stop()  # keep: torch collects the events, ``_on_trace_ready`` writes them
            finally:
                if keep:
                    self._collected()
            release(prof)
        self._exit_recorder(keep=False)  # (after a kept recording, ``_on_trace_ready`` kept its sites)
        if keep and self._exported and self._scheduled and not self._forward_source:
            # the step open when the program's profiler started is no whole step of the loop
            _rename_step(self.trace_path, self._steps + 1, f"after step {self._steps}")
        if not self._exported:
            done = "profiled nothing"
        elif keep:
            done = f"kept what it had recorded: {self._recorded()}"
        else:
            done = "its window was already written"
        note = f"the program runs its own torch.profiler: stallscope stepped aside ({done}; steps are still timed)"
        self.notes.append(note)
        self._progress(note)
        if self._demand is not None:
            self._demand.refuse("the program runs its own torch.profiler: stallscope stepped aside for good")
            if self._request is not None and keep:
                self._finish_capture()
            elif self._request is not None:
                request, self._request = self._request, None
                self._demand.fail(request, note)
                self._reset_window()
        self._retrack()

    def _recorded(self) -> str:
        """What a trace written when stepping aside holds: its steps, or the run from its first torch call."""
        if not self._scheduled:
            return "the run from its first torch call"
        first, last = self._window_first, self._window_last
        if not last:
            return "part of one step"
        return f"steps {first}-{last}" if first < last else f"step {first}"

    def step(self) -> None:
        """Mark the end of one iteration: step timing, and the profiler's schedule."""
        self._explicit = True
        self._step()

    def stop(self) -> Capture:
        """Stop everything (idempotent enough to call from a ``finally``) and say what was captured."""
        global _active
        if not self._stopped:
            self._stopped = True
            self._disarm_alarm()
            self._stop_counting()
            if self._trigger is not None:
                self._trigger.remove()
            if self._origin is not None:
                self._origin.remove()
            self._loaders.remove()
            if self._forward_source and self._forward.calls:
                self._count_step()  # the last root-module (or generate) call's step ends with the run
            self._forward.remove()
            self._backward.remove()
            self._made.remove()
            self._watch.remove()
            if self._hook is not None:
                self._hook.remove()
                self._pre_hook.remove()
            self._unwrap_steps()
            try:
                short = self._short_window()
                self._stop_profiler()
                if short is not None and self._exported and self._tail_step:
                    _rename_step(self.trace_path, self._tail_step, f"after step {self._tail_step - 1}")
                if short is not None and self._request is not None:
                    self.notes.append(short)
                    short = None
                self._end_capture_at_exit()
                unreached = self._unreached_note()
                if unreached is not None:  # the notes only: the CLI's closing lines say it on stderr
                    self.notes.append(unreached)
                for note in (self._dropped_note(), short):
                    if note is not None:
                        self.notes.append(note)
                        self._progress(note)
                if self._exported and self._mode() == "whole_run":
                    self.notes.append(WHOLE_RUN_NOTE)
                if self._budget_note is not None:
                    self.notes.append(self._budget_note)
                    if self.options.duration is None:
                        self._progress(self._budget_note)
            finally:
                if self._timer is not None:
                    self._timer.close()
                with _lock:
                    if _active is self:
                        _active = None
        return self._capture()

    def _step_source(self) -> str | None:
        if self._explicit:
            return "explicit"
        if self._forward_source:
            return "generate" if self._forward.generate else "forward"
        if self._backward_source:
            return "backward"
        return "optimizer" if self._optimizer_id is not None else None

    # -- steps -----------------------------------------------------------------------------------

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """The global post hook. It runs *inside* the optimizer's ``Optimizer.step#...`` record_function,
        and a profiler started there, after another one saw that record_function begin, makes torch write
        the record_function's end into the freed state of the first one: a crash later. So the hook counts
        the step, and the profiler's transition runs when ``optimizer.step`` has returned (the wrapper
        ``_wrap_step`` puts on this optimizer). When that wrapper is not on the call path (the program
        kept a reference to the old ``step``), transitions run here, in the safe order of ``_advance``."""
        if self._explicit or self._stopped:
            return
        if self._optimizer_id is None:
            self._optimizer_id = id(optimizer)
        if id(optimizer) != self._optimizer_id:  # a GAN's second optimizer is the same step
            return
        self._count_step()
        if self._optimizer_depth > 0:  # our wrapper is on this call: it transitions when step returns
            self._pending = True
        elif self._wrapped is None:  # the first step: wrap for the next ones; this one waits for them
            self._wrap_step(optimizer)
            self._pending = True
        else:  # the wrapper was bypassed: transition now, inside the record_function
            self._pending = False
            self._transition(inside_record_function=True)

    def _wrap_step(self, optimizer: Any) -> None:
        """Wrap ``optimizer.step`` on the instance (what ``opt.step()`` and an LR scheduler's wrapper, made
        before or after this, both go through), as a bound method so that schedulers can rewrap it."""
        inner = optimizer.step
        session = self

        @functools.wraps(inner)
        def step(opt: Any, *args: Any, **kwargs: Any) -> Any:
            session._optimizer_depth += 1
            try:
                return inner(*args, **kwargs)
            finally:
                session._optimizer_depth -= 1
                if session._optimizer_depth == 0 and (
                    session._pending or session._alarm_fired or session._budget_hit
                ):
                    session._pending = False
                    session._transition(inside_record_function=False)

        own = "step" in vars(optimizer)
        bound = types.MethodType(step, optimizer)
        optimizer.step = bound
        self._wrapped = (optimizer, inner if own else None, bound)

    def _unwrap_steps(self) -> None:
        if self._wrapped is None:
            return
        optimizer, previous, ours = self._wrapped
        if vars(optimizer).get("step") is ours:
            if previous is None:
                del optimizer.step
            else:
                optimizer.step = previous

    def _step(self) -> None:
        if self._stopped:
            return
        self._count_step()
        self._transition(inside_record_function=False)

    def _count_step(self) -> None:
        self._steps += 1
        if self._timer is not None:
            self._timer.step()

    def _transition(self, inside_record_function: bool) -> None:
        """Advance the profiler's schedule by one step."""
        if self._stopped or self._aside:
            return
        if self._demand is not None and self._prof is None and not self._probing and not self._awaiting_start:
            self._on_demand(inside_record_function)
            if self._origin is not None and self._origin.installed != self._wants_origin():
                self._retrack()  # origin tracking: on until the first step (CPU-only runs)
            return
        opened = self._scheduled or self.options.duration is not None
        if self._prof is None and not self._awaiting_start and not self._probing and opened:
            return
        self._in_step = True
        try:
            self._advance(inside_record_function)
        finally:
            self._in_step = False
        if self._alarm_fired or self._window_done or self._budget_hit:
            self._stop_profiler()
        if self._demand is not None and self._window_done and self._prof is None:
            self._finish_capture()
        self._retrack()

    def _advance(self, inside_record_function: bool) -> None:
        self._drop_spent()
        if self.options.duration is not None:
            if self._deadline is not None and time.monotonic() >= self._deadline:
                self._stop_profiler()
            else:
                self._sync_step_num()
                self._prof.step()
            return
        if self._probing:  # the probe step ended: its events are the budget's measure
            self._end_probe()
            if inside_record_function:
                self._awaiting_start = True
            else:
                self._start_scheduled()
            return
        if self._awaiting_start:  # the fallback stopped inside a record_function at the last step
            self._start_scheduled()
            return
        if not self._scheduled:
            self._drop_fallback()
            if inside_record_function:
                # the record_function began while the fallback ran: start the next profiler at the next
                # step, inside a record_function that began with no profiler running
                self._awaiting_start = True
            elif self.options.max_events and self.options.skip > 0:
                self._start_probe()
            else:
                self._start_scheduled()
            return
        if self._prof.current_action.name == "RECORD_AND_SAVE":  # this step stops and saves the window
            self._collecting()
        self._sync_step_num()
        self._prof.step()
        if self._prof is not None and self._prof.current_action.name in _RECORDING:
            self._enter_recorder()
            self._count_window()

    def _sync_step_num(self) -> None:
        """Before ``prof.step()``: the step it opens is the run's next one (``ProfilerStep#N`` is the run's
        N-th step), also when a step went by without a transition (the first optimizer step's transition
        is done at the end of the second)."""
        if self._prof is not None and self._prof.step_num != self._steps:
            self._prof.step_num = self._steps

    def _short_window(self) -> str | None:
        """The run is ending inside the scheduled window (before its last step): what the trace holds and
        why it is fewer steps than asked. Said on stderr and in the notes."""
        prof, o = self._prof, self.options
        if not self._scheduled or prof is None or self._probing or self._exported or o.duration is not None:
            return None
        if prof.current_action.name not in _RECORDING:
            return None  # nothing recorded: the CLI says the run was too short to reach the window
        first, last, asked = self._window_first, self._steps, self._active_steps
        tail = f"; the rest of the run after step {last} is the trace's 'after step {last}', not a step"
        self._tail_step = last + 1  # the profiler's open step: the end of the run, no step of the loop
        if self._forward_source:
            tail, self._tail_step = "", 0  # the last call's step ended with the run: it is whole
        whole = max(0, last - first + 1)
        if whole == 0:
            return (
                f"the run ended after step {last}, before a whole step of the window: no step was profiled"
                f"{tail}; lower --skip/--warmup (now {o.skip}/{o.warmup}) or run more steps"
            )
        which = f"steps {first}-{last}" if whole > 1 else f"step {first}"
        return (
            f"the run ended after step {last}, inside the window: profiled {which}, {whole} of the {asked} "
            f"asked (--skip {o.skip} and --warmup {o.warmup} come after {self._unprofiled()}){tail}; lower "
            "--skip/--warmup or run more steps for more"
        )

    def _unprofiled(self) -> str:
        """The steps never profiled before --skip: the profiler changes state only once an optimizer step
        has returned, at the end of the second."""
        return "the first two steps" if self._step_source() == "optimizer" else "the first step"

    def _unreached_note(self) -> str | None:
        """Steps came, but the run ended before the window recorded any (after ``stop``)."""
        o = self.options
        if not self._scheduled or self._exported or self._aside or o.duration is not None or self._demand:
            return None
        return (
            f"the run made {self._steps} step(s), too few to reach the window ({self._unprofiled()}, then --skip "
            f"{o.skip} and --warmup {o.warmup}): nothing was profiled; lower --skip/--warmup or run more steps"
        )

    def _drop_fallback(self) -> None:
        """First step: drop the whole-run fallback recording (a step came, so the window is scheduled)."""
        self._exit_recorder(keep=False)
        if self._trigger is not None:
            self._trigger.remove()
        prof, self._prof = self._prof, None
        self._scheduled = True
        if self._budget_hit:  # the budget ended the fallback, written as the whole run: a step came after
            self._budget_hit = self._exported = self._window_done = False
            self._budget_note = None
            self._fallback_cut = True
        if prof is None:  # no torch call before the first step (or the budget ended it)
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prof.on_trace_ready = None  # the fallback is not the trace any more
            prof.stop()
        if self.options.max_events:
            self._first_step_events = recorded_events(prof)
            if self._trigger is not None:
                self._learn_rate(self._first_step_events, self._trigger.calls)
        release(prof)

    def _start_probe(self) -> None:
        """Record the second step alone (one of the skipped steps): how many events a step makes once
        the first step's warm-up (lazy initialisation, optimizer state, caches) is over. Its torch calls
        are counted: at the budget the probe stops (a step over the budget is measured as that much)."""
        self._prof = self._profiler(schedule=None)
        self._prof.on_trace_ready = None  # never the trace
        self._prof.start()
        self._probing = True
        self._count_calls(self._on_probe_budget)

    def _end_probe(self) -> None:
        calls = self._counter.calls if self._counter is not None else 0
        self._stop_counting()
        prof, self._prof = self._prof, None
        self._probing = False
        if prof is None:  # the budget stopped it inside the step
            return
        self._probed_steps += 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prof.stop()
        self._step_events = recorded_events(prof)
        self._learn_rate(self._step_events, calls)
        release(prof)

    def _start_scheduled(self) -> None:
        self._awaiting_start = False
        o = self.options
        skip = max(0, o.skip - self._probed_steps)  # the probe step was one of the skipped ones
        if self._demand is not None:  # the request's first step (a job's ranks record the same), or now
            skip = max(0, self._window_at - (self._steps + 1) - o.warmup) if self._window_at else 0
        measured, events, over = "the first step", self._first_step_events, False
        if self._fallback_cut:  # its events are unknown: more than the budget with the setup before it
            measured, events = "the run up to its first step (cut at the budget)", o.max_events
        if self._probed_steps and self._step_events:
            measured, events = f"step {self._steps}", self._step_events
            over = self._probe_cut  # recorded up to the budget, then not
            if over:
                events = max(events, o.max_events)
        asked = self._request.steps if self._request is not None else o.steps
        self._active_steps, note = budget_steps(events, o.max_events, asked, measured, over)
        # one step over the budget: count the window's calls, to stop inside a step at the budget (never in
        # a window of steps that fit: counting slows each torch call made from Python by about 1.6 us)
        self._window_counted = bool(o.max_events) and events >= o.max_events
        if note is not None:
            self.notes.append(note)
            self._progress(note)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "won't be using warmup": --warmup 0 is the user's choice
            base = self._torch.profiler.schedule(
                skip_first=skip, wait=0, warmup=o.warmup, active=self._active_steps, repeat=1
            )
        first = self._steps + 1  # the step starting now, numbered as the run counts (and stderr says)
        recorded = first + skip + o.warmup  # the first recorded step
        self._window_first = recorded
        self._first_recorded = recorded
        self._tracked_steps = frozenset({recorded - 1 if recorded > first else recorded})
        self._prof = self._profiler(schedule=lambda n: base(max(n - first, 0)))
        renumber(self._prof, first)
        self._prof.start()
        if self._demand is not None and self._request is not None:
            self._demand.started(self._request, recorded)
        if self._prof.current_action.name in _RECORDING:
            self._enter_recorder()
            self._count_window()

    # -- on demand -------------------------------------------------------------------------------

    def _on_demand(self, inside_record_function: bool) -> None:
        """A step boundary between captures: start the window of an accepted request when its step comes
        (the probe and warm-up steps first). Never inside a record_function (``_on_optimizer_step``)."""
        assert self._demand is not None
        request = self._demand.due(self._steps)
        if request is None or inside_record_function:
            return
        lead = self.options.warmup + (1 if self.options.max_events else 0)
        if request.first_step is not None and self._steps < request.first_step - 1 - lead:
            return  # a job's window: the ranks start recording the same step
        self._request = request
        self._notes_from = len(self.notes)
        self._window_at = request.first_step
        self._active_steps = request.steps
        try:
            self.trace_path = self._demand.begin(request)
        except StallscopeError as exc:  # withdrawn meanwhile, or its folder cannot be made
            self._request = None
            self._demand.fail(request, str(exc))
            return
        self._in_step = True
        try:
            if self.options.max_events:
                self._start_probe()
            else:
                self._start_scheduled()
        finally:
            self._in_step = False

    def _capture(self) -> Capture:
        """What was recorded: the run's (``stop``), or on demand the capture under way's (its notes are
        the ones said since it began)."""
        return Capture(
            trace=self.trace_path if self._exported else None,
            mode=self._mode(),
            steps_seen=self._steps,
            sync_sites=list(self._sync_sites),
            step_timing=dict(self._timer.summary()) if self._timer is not None else {},
            notes=list(self.notes[self._notes_from :]),
            step_source=self._step_source(),
            profiled_steps=[self._window_first, self._window_last] if self._window_last else None,
            stepped_aside=self._aside,
            dataloaders=list(self._loaders.loaders),
            partial_step=self._partial_step if self._exported else 0,
            trace_events=self._trace_events if self._exported else 0,
            write_stopped=self._write_stopped,
        )

    def _finish_capture(self) -> None:
        """The capture's window is written: publish its bundle, and wait for the next request."""
        request, self._request = self._request, None
        if request is None or self._demand is None:
            return
        try:
            self._demand.publish(request, self._capture())
        finally:
            self._reset_window()

    def _end_capture_at_exit(self) -> None:
        """``stop()`` on demand: publish what the capture under way recorded, or say why there is nothing."""
        request = self._request
        if request is None or self._demand is None:
            return
        if self._exported:
            self._finish_capture()
            return
        self._request = None
        self._demand.fail(
            request, f"the program ended at step {self._steps}, before the window recorded a step"
        )
        self._reset_window()

    def _reset_window(self) -> None:
        """Between captures: the window's state as before the first."""
        self._exported = self._window_done = self._probing = self._awaiting_start = False
        self._probe_cut = self._window_counted = False
        self._window_first = self._window_last = self._first_recorded = 0
        self._partial_step = self._trace_events = self._tail_step = 0
        self._probed_steps = self._step_events = 0
        self._sync_sites = []
        self._tracked_steps = frozenset()
        self._active_steps = self.options.steps
        self._window_at = None

    def _count_window(self) -> None:
        if self._window_counted and self._counter is None:
            self._count_calls(self._on_window_budget)

    def _mode(self) -> str:
        if self.options.duration is not None:
            return "duration"
        return "steps" if self._scheduled else "whole_run"

    # -- profiler --------------------------------------------------------------------------------

    def _profiler(self, schedule: Any) -> Any:
        torch = self._torch
        activities = [torch.profiler.ProfilerActivity.CPU]
        extra: dict[str, Any] = {}
        if self.cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
            # sync events (cudaDeviceSynchronize... records) where this torch supports them
            with contextlib.suppress(AttributeError, TypeError):
                extra["experimental_config"] = torch.profiler._ExperimentalConfig(
                    enable_cuda_sync_events=True
                )
        prof = quiet_profiler(torch)(
            activities=activities,
            schedule=schedule,
            on_trace_ready=self._on_trace_ready,
            record_shapes=self.options.shapes,
            profile_memory=self.options.memory,
            with_stack=self.options.stacks,
            **extra,
        )
        setattr(prof, OURS, True)  # the program's own profilers make the session step aside
        return prof

    def _on_trace_ready(self, prof: Any) -> None:
        self._exit_recorder(keep=True)
        self.trace_path.parent.mkdir(parents=True, exist_ok=True)
        if self._heartbeat is not None:
            self._heartbeat.stage("writing the trace")
        self._stop_counting()
        try:
            self._trace_events = write_trace(prof, self.trace_path)
        except BaseException:  # a signal stopped the writing: no partial file stays
            self._write_stopped = True
            self.trace_path.unlink(missing_ok=True)
            raise
        finally:
            written = self._collected()
        self._exported = True
        if self._scheduled and self._window_first:
            self._window_last = self._steps if self._steps >= self._window_first else 0
        if not self._scheduled and self._trigger is not None:  # the budget ended the run's first recording
            self._learn_rate(self._trace_events, self._trigger.calls)
        if self._partial_step:
            note = self._partial_note(self._trace_events)
            self.notes.append(note)
            self._progress(note)
        if self._budget_hit and self._budget_note is None:
            self._budget_note = self._budget_window_note(prof)
            if self.options.duration is None:  # the fallback: the whole run's window unless a step comes
                return
            self._progress(self._budget_note)
        if (
            self.on_window_closed is not None
            and not self._stopped
            and not self._aside
            and self._demand is None
        ):
            first = self._window_first or max(1, self._steps - self._active_steps + 1)
            window = f"steps {first}-{self._steps}" if first < self._steps else f"step {first}"
            if self._partial_step:
                first, last = min(self._first_recorded, self._partial_step), self._partial_step
                window = f"steps {first}-{last}" if first < last else f"step {last}"
                window += " (the last one partial)"
            if self.options.duration is not None or self._budget_hit:
                window = "the first seconds"
            self.on_window_closed(
                f"profiled {window} of the run, trace written{written}; the program goes on "
                "(every step is still timed)"
            )
        # Not released here: we are inside prof.step(), which goes on to open the next ProfilerStep
        # annotation. The next step stops the profiler, which closes that annotation first.
        self._window_done = True

    def _collecting(self) -> None:
        """The recording profiler is about to stop: torch collects its events, then the trace is written
        (``_on_trace_ready``). Say so every few seconds while it lasts."""
        if self.on_progress is not None and self._heartbeat is None:
            self._heartbeat = Heartbeat(self.on_progress, "torch is collecting the profiled events")

    def _collected(self) -> str:
        """Stop the heartbeat; `` (N MB in S s)`` for the window-closed line."""
        beat, self._heartbeat = self._heartbeat, None
        if beat is None:
            return ""
        beat.stop()
        try:
            size = self.trace_path.stat().st_size / 1e6
        except OSError:
            return ""
        return f" ({size:.1f} MB in {beat.elapsed():.0f} s)"

    def _progress(self, message: str) -> None:
        if self.on_progress is not None:
            self.on_progress(message)

    def _stop_profiler(self) -> None:
        prof, self._prof = self._prof, None
        if prof is not None:
            if prof.current_action.name in _RECORDING:
                self._collecting()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    prof.stop()
            finally:
                self._collected()
            release(prof)
        self._exit_recorder(keep=True)

    # -- sync sites ------------------------------------------------------------------------------

    def _enter_recorder(self, learning: bool = False) -> None:
        """Record sync sites (or, ``learning``, only learn which sites read device-bound tensors: see
        ``_retrack``); a recorder already learning starts recording."""
        if self._recorder is not None:
            self._recorder.learning = learning
            return
        recorder_cls = _optional("stallscope.collector.sites", "SyncSiteRecorder")
        if recorder_cls is not None:
            # ~0 cost on non-sync ops (a mode: +2-3 us per op)
            self._recorder = recorder_cls(strategy="patch", latent=not self.cuda)
            self._recorder.learning = learning
            self._recorder.tracked = self._origin is not None and self._origin.installed
            self._recorder.__enter__()

    # -- origin tracking (CPU-only runs) ---------------------------------------------------------

    def _wants_origin(self) -> bool:
        """Origin tracking is on from the start to the first step (setup), in a window without steps
        (whole run, duration), and in one step of a scheduled window: the step before its first recorded
        step (the sync sites are learnt there, not logged), or that step itself when nothing precedes it."""
        if self._aside or self._exported or self._stopped:
            return False
        if not self._scheduled or (self._demand is not None and self._steps == 0):
            return True
        return self._steps + 1 in self._tracked_steps

    def _retrack(self) -> None:
        """At a step boundary, put origin tracking on or off (``_wants_origin``). It slows every torch call
        made from Python (a mode), so inside a scheduled window it is off: a sync site's calls count as
        device-bound when the learning step found them so (``stallscope.collector.sites``). It goes back on only on
        an empty mode stack (a mode pushed under a program's own would be popped by the program's exit)."""
        origin = self._origin
        if origin is None or threading.get_ident() != self._thread:
            return
        want = self._wants_origin()
        counter = self._counter  # on top of origin tracking: lifted off while that changes
        lifted = counter is not None and counter.installed and counter.remove()
        if want and not origin.installed:
            if self._torch._C._len_torch_function_stack() == 0:
                origin.install()
        elif not want and origin.installed:
            origin.remove()
        if origin.installed and self._scheduled and self._recorder is None:
            self._enter_recorder(learning=True)  # the step before the window: learn the sites
        if self._recorder is not None:
            self._recorder.tracked = origin.installed
        if lifted and counter is not None:
            counter.install()

    def _exit_recorder(self, keep: bool) -> None:
        rec, self._recorder = self._recorder, None
        if rec is None:
            return
        rec.__exit__(None, None, None)
        if keep:
            self._sync_sites = list(rec.records())

    # -- duration timer --------------------------------------------------------------------------

    def _arm_alarm(self, seconds: float) -> None:
        """Stop at the deadline even in a loop without steps: SIGALRM, main thread, if nobody uses it."""
        if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, None):
            return
        self._old_alarm = signal.signal(signal.SIGALRM, self._on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        self._alarm_fired = True
        # never in the middle of the profiler's own code, nor inside the optimizer's record_function
        # (its wrapper stops the profiler when the step returns)
        if not self._stopped and not self._in_step and not self._optimizer_depth:
            self._stop_profiler()

    def _disarm_alarm(self) -> None:
        if self._old_alarm is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old_alarm)
            self._old_alarm = None


def _rename_step(trace: Path, step: int, name: str, chunk: int = 1 << 20) -> None:
    """Rename ``ProfilerStep#step`` in the gzip trace at ``trace`` (the end of a run that ended inside
    the window: no step of the loop, so the analysis does not count it). Streams; on failure the trace
    stays as it was."""
    import gzip
    import json
    import os

    old, new = json.dumps(f"ProfilerStep#{step}").encode(), json.dumps(name).encode()
    keep = len(old) - 1
    tmp = trace.with_name(f".{trace.name}.rename")
    try:
        with gzip.open(trace, "rb") as src, gzip.open(tmp, "wb", compresslevel=6) as dst:
            carry = b""
            while data := src.read(chunk):
                buf = (carry + data).replace(old, new)
                dst.write(buf[:-keep])
                carry = buf[-keep:]
            dst.write(carry)
        os.replace(tmp, trace)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
