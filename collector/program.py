"""What the profiled program does that the session must follow: steps marked by its model's forward
calls, and a torch.profiler of its own.

- ``ForwardSteps``: an inference loop has no optimizer to mark its steps. Each call of the *root*
  module (the first module called at top level, not from inside another module's forward) starts a
  new step: the step is the forward and whatever the loop does with its output until the next call (a
  decode loop's token readback included). Global forward pre/post hooks, about 1-2 µs per module call;
  the session removes them once the optimizer or ``stallscope.step()`` marks steps instead.
- ``OwnProfilerWatch``: torch allows one profiler at a time. When the program starts its own
  (``torch.profiler.profile.start`` / ``with profile(...)``, or the legacy
  ``torch.autograd.profiler.profile``), the session is told first, so it can stop its own profiler and
  step aside before the program's starts: the program's profiling works as it would without stallscope.
  Profilers the session makes are marked and pass through.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

OURS = "_stallscope_session_profiler"


class ForwardSteps:
    """Calls ``on_step()`` at the start of every root-module call after the first."""

    def __init__(self, on_step: Callable[[], None]) -> None:
        self._on_step = on_step
        self._depth = 0
        self._root: int | None = None
        self._calls = 0
        self._handles: list[Any] = []

    @property
    def calls(self) -> int:
        return self._calls

    def install(self) -> None:
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )

        self._handles = [
            register_module_forward_pre_hook(self._pre),
            register_module_forward_hook(self._post, always_call=True),
        ]

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def _pre(self, module: Any, args: Any) -> None:
        if self._depth == 0:
            if self._root is None:
                self._root = id(module)
            if id(module) == self._root:
                self._calls += 1
                if self._calls >= 2:
                    self._on_step()
        self._depth += 1

    def _post(self, module: Any, args: Any, output: Any) -> None:
        self._depth = max(0, self._depth - 1)


class OwnProfilerWatch:
    """Calls ``on_program_profiler()`` just before the program starts a profiler of its own."""

    def __init__(self, on_program_profiler: Callable[[], None]) -> None:
        self._notify = on_program_profiler
        self._patched: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        import torch.autograd.profiler as legacy
        import torch.profiler

        self._wrap(torch.profiler.profile, "start")
        self._wrap(legacy.profile, "__enter__")

    def _wrap(self, owner: Any, name: str) -> None:
        original = owner.__dict__.get(name)
        if original is None:
            return
        notify = self._notify

        @functools.wraps(original)
        def wrapper(prof: Any, *args: Any, **kwargs: Any) -> Any:
            if not getattr(prof, OURS, False):
                notify()
            return original(prof, *args, **kwargs)

        setattr(owner, name, wrapper)
        self._patched.append((owner, name, original))

    def remove(self) -> None:
        while self._patched:
            owner, name, original = self._patched.pop()
            setattr(owner, name, original)
