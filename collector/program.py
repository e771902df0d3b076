"""What the profiled program does that the session must follow: steps marked by its model's forward
calls, and a torch.profiler of its own.

- ``ForwardSteps``: an inference loop has no optimizer to mark its steps. Each call of the *root*
  module (the first module called at top level, not from inside another module's forward) starts a
  new step: the step is the forward and whatever the loop does with its output until the next call (a
  decode loop's token readback included). Global forward pre/post hooks, about 1-2 µs per module call;
  the session removes them once the optimizer or ``stallscope.step()`` marks steps instead. When the
  root module is first called from its own ``generate`` method (HF-style ``model.generate(...)``), each
  ``generate`` call is a step instead (a wrapper on the instance) and the forward calls inside it are not:
  a step starts with a top-level ``generate`` call and holds what the loop does with its output (a
  token read back). The session ends the last step with the run, so N calls make N steps.
- ``BackwardSteps``: a training loop without an optimizer (manual SGD: ``p.data -= lr * p.grad``) marks
  its steps by its backward passes: each ``torch.autograd.backward`` call (``loss.backward()`` goes
  through it) ends a step when it returns. One Python wrapper call per backward.
- ``OptimizerWatch``: once the program makes an optimizer (``torch.optim.Optimizer.__init__``, which
  every torch optimizer and most others call), the optimizer marks the steps: forwards (evaluation,
  rollouts) and backward passes are no steps.
- ``OwnProfilerWatch``: torch allows one profiler at a time. When the program starts its own
  (``torch.profiler.profile.start`` / ``with profile(...)``, or the legacy
  ``torch.autograd.profiler.profile``), the session is told first, so it can stop its own profiler and
  step aside before the program's starts: the program's profiling works as it would without stallscope.
  Profilers the session makes are marked and pass through.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

OURS = "_stallscope_session_profiler"


class ForwardSteps:
    """Calls ``on_step()`` at the start of every root-module call after the first, or, once the root
    module is seen called from its own ``generate`` method, at the start of every top-level ``generate``
    call after the first (and never for the forward calls inside one)."""

    def __init__(self, on_step: Callable[[], None]) -> None:
        self._on_step = on_step
        self._depth = 0
        self._root: int | None = None
        self._calls = 0
        self._handles: list[Any] = []
        self._marking = False  # installed and not removed: calls still mark steps
        self._has_generate = False  # the root module has a ``generate`` method: look for it on the stack
        self.generate = False  # steps come from the root module's generate calls
        self._generating: Any = None  # the frame of the generate call in progress when it was found
        self._generate_depth = 0  # inside a generate call made through our wrapper
        self._generate_calls = 0
        self._wrapped: tuple[Any, Any] | None = None  # (module, its own generate or None)

    @property
    def calls(self) -> int:
        """Root-module calls, or generate calls once they mark the steps."""
        return self._generate_calls if self.generate else self._calls

    def install(self) -> None:
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )

        self._marking = True
        self._handles = [
            register_module_forward_pre_hook(self._pre),
            register_module_forward_hook(self._post, always_call=True),
        ]

    def _drop_hooks(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def remove(self) -> None:
        self._marking = False
        self._drop_hooks()
        self._generating = None
        if self._wrapped is not None:
            module, own = self._wrapped
            self._wrapped = None
            if own is None:
                vars(module).pop("generate", None)
            else:
                module.generate = own

    def _pre(self, module: Any, args: Any) -> None:
        if self._depth == 0:
            if self._root is None:
                self._root = id(module)
                self._has_generate = callable(getattr(type(module), "generate", None))
            if id(module) == self._root:
                self._root_call(module)
        self._depth += 1

    def _root_call(self, module: Any) -> None:
        if self.generate:  # generate calls mark the steps; a forward inside the first one is no step
            if self._generating is not None and not _on_stack(self._generating):
                self._generating = None  # the first generate call has returned
            return
        if self._has_generate:
            frame = _generate_frame(module)
            if frame is not None:  # the first generate call: one step, whatever it calls
                self.generate, self._generating = True, frame
                self._generate_calls = 1
                self._wrap_generate(module)
                # the wrapper marks the steps from now on: module calls need no hooks (torch copies the
                # hook dicts before calling them, so removing them here is safe)
                self._drop_hooks()
                return
        self._calls += 1
        if self._calls >= 2:
            self._on_step()

    def _wrap_generate(self, module: Any) -> None:
        """Each later ``module.generate(...)`` call starts a step (a wrapper on the instance)."""
        own = vars(module).get("generate")
        inner = module.generate
        steps = self

        @functools.wraps(inner)
        def generate(*args: Any, **kwargs: Any) -> Any:
            steps._generating = None  # a new call: the first one has returned (or this one is nested)
            if steps._generate_depth == 0 and steps._marking:
                steps._generate_calls += 1
                steps._on_step()
            steps._generate_depth += 1
            try:
                return inner(*args, **kwargs)
            finally:
                steps._generate_depth -= 1

        module.generate = generate
        self._wrapped = (module, own)

    def _post(self, module: Any, args: Any, output: Any) -> None:
        self._depth = max(0, self._depth - 1)


class BackwardSteps:
    """Calls ``on_backward()`` each time a top-level ``Tensor.backward`` or ``torch.autograd.backward``
    returns (wrappers on both, counted in one depth: the outermost call fires; a reference the program
    took before the session is not seen). A backward called inside another on the same thread (reentrant activation
    checkpointing recomputes and backpropagates a segment inside the outer backward) is part of it."""

    def __init__(self, on_backward: Callable[[], None]) -> None:
        self._on_backward = on_backward
        self._original: Any = None
        self._ours: Any = None
        self._tensor_original: Any = None
        self._tensor_ours: Any = None
        self._local = threading.local()  # .depth: backward calls in progress on this thread
        self.seen = 0

    def install(self) -> None:
        import torch.autograd

        original = torch.autograd.backward
        watch = self

        local = self._local

        @functools.wraps(original)
        def backward(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(local, "depth", 0)
            local.depth = depth + 1
            try:
                out = original(*args, **kwargs)
            finally:
                local.depth = depth
            if depth == 0 and watch._ours is not None:
                watch.seen += 1
                watch._on_backward()
            return out

        self._original, self._ours = original, backward
        torch.autograd.backward = backward
        # ``loss.backward()`` too, counted in the same depth: under a torch-function mode (the collector's
        # origin tracker) ``Tensor.backward`` runs inside the mode's handler, where the mode stack is
        # popped; the step must end after the handler returned, in this outermost wrapper
        tensor_original: Any = torch.Tensor.backward

        @functools.wraps(tensor_original)
        def tensor_backward(self_: Any, *args: Any, **kwargs: Any) -> Any:
            depth = getattr(local, "depth", 0)
            local.depth = depth + 1
            try:
                out = tensor_original(self_, *args, **kwargs)
            finally:
                local.depth = depth
            if depth == 0 and watch._ours is not None:
                watch.seen += 1
                watch._on_backward()
            return out

        self._tensor_original, self._tensor_ours = tensor_original, tensor_backward
        setattr(torch.Tensor, "backward", tensor_backward)  # noqa: B010 (typed as a method)

    def remove(self) -> None:
        ours, self._ours = self._ours, None
        if ours is None:
            return
        import torch.autograd

        if torch.autograd.backward is ours:
            torch.autograd.backward = self._original
        if torch.Tensor.backward is self._tensor_ours:
            setattr(torch.Tensor, "backward", self._tensor_original)  # noqa: B010


class OptimizerWatch:
    """Calls ``on_made()`` (once) when the program makes an optimizer: a wrapper on
    ``torch.optim.Optimizer.__init__``, restored by ``remove()``."""

    def __init__(self, on_made: Callable[[], None]) -> None:
        self._on_made = on_made
        self._original: Any = None
        self._ours: Any = None
        self.made = False

    def install(self) -> None:
        from torch.optim import Optimizer

        original = Optimizer.__dict__["__init__"]
        watch = self

        @functools.wraps(original)
        def __init__(opt: Any, *args: Any, **kwargs: Any) -> None:
            original(opt, *args, **kwargs)
            if not watch.made and watch._ours is not None:
                watch.made = True
                watch._on_made()

        self._original, self._ours = original, __init__
        setattr(Optimizer, "__init__", __init__)  # noqa: B010

    def remove(self) -> None:
        ours, self._ours = self._ours, None
        if ours is None:
            return
        from torch.optim import Optimizer

        if Optimizer.__dict__.get("__init__") is ours:
            setattr(Optimizer, "__init__", self._original)  # noqa: B010


def _generate_frame(module: Any, limit: int = 64) -> FrameType | None:
    """The frame of ``module.generate`` running below the current call, if any (HF-style generation:
    ``model.generate(...)`` calls the model once per token)."""
    f: FrameType | None = sys._getframe(2)
    while f is not None and limit > 0:
        if f.f_code.co_name == "generate" and f.f_locals.get("self") is module:
            return f
        f, limit = f.f_back, limit - 1
    return None


def _on_stack(frame: FrameType, limit: int = 256) -> bool:
    f: FrameType | None = sys._getframe(1)
    while f is not None and limit > 0:
        if f is frame:
            return True
        f, limit = f.f_back, limit - 1
    return False


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
