"""The profile options and what a session produced (``stallscope.collector.session``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stallscope.analyzer.core.errors import StallscopeError
from stallscope.collector.window import DEFAULT_MAX_EVENTS


@dataclass(frozen=True)
class ProfileOptions:
    """What to record. Defaults give a few steady-state steps of a typical training loop."""

    skip: int = 5
    warmup: int = 2
    steps: int = 5
    duration: float | None = None
    shapes: bool = False
    memory: bool = False
    stacks: bool = False  # Python frames in the trace: the sidecar's sync sites make them optional
    auto_steps: bool = True  # without an optimizer or stallscope.step(), root-module calls mark steps
    max_events: int = DEFAULT_MAX_EVENTS  # 0: no budget

    def check(self) -> None:
        """Raise ``StallscopeError`` for values that make no sense."""
        for name, value in (("skip", self.skip), ("warmup", self.warmup)):
            if value < 0:
                raise StallscopeError(f"--{name} must be 0 or more, not {value}")
        if self.steps < 1:
            raise StallscopeError(f"--steps must be 1 or more, not {self.steps}")
        if self.max_events < 0:
            raise StallscopeError(f"--max-events must be 0 (no limit) or more, not {self.max_events}")
        if self.duration is not None and not self.duration > 0:
            raise StallscopeError(f"--duration must be a positive number of seconds, not {self.duration}")


@dataclass
class Capture:
    """What a session produced. ``trace`` is None when no profiled window was reached."""

    trace: Path | None
    mode: str  # "steps" | "whole_run" | "duration"
    steps_seen: int
    sync_sites: list[dict[str, Any]] = field(default_factory=list)
    step_timing: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # "optimizer" | "explicit" | "backward" (backward passes, no optimizer) | "forward" (root-module
    # calls) | "generate" (its generate calls) | None
    step_source: str | None = None
    stepped_aside: bool = False  # the program ran its own torch.profiler: ours stopped (what it had, kept)
    dataloaders: list[dict[str, Any]] = field(default_factory=list)  # each DataLoader's arguments
    profiled_steps: list[int] | None = None  # [first, last] whole steps of the window, the run's numbering
    partial_step: int = 0  # the event budget ended the recording inside this step (0: whole steps)
    trace_events: int = 0  # events in the written trace
    write_stopped: bool = False  # a signal stopped the trace's writing: no trace (the partial file removed)
