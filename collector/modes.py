"""One ``TorchFunctionMode`` on one thread's mode stack: what the collector's modes share.

torch keeps the stack of torch-function modes per thread, and a mode's ``__exit__`` pops whatever is on
top, so a mode the collector pushed must come off only from the thread that pushed it and only while it
is on top: taking it off from under a mode the program pushed later (``with torch.device(...)``) would
pop the program's mode instead. ``ThreadMode`` holds that rule once; ``stallscope.collector.origin.OriginTracker``,
``stallscope.collector.window.FirstOpTrigger`` and ``stallscope.collector.sites.SyncSiteRecorder`` (its ``mode`` strategy) use it.

torch is imported lazily: this module imports without it.
"""

from __future__ import annotations

import threading
from typing import Any


class ThreadMode:
    """Puts ``mode`` (a ``TorchFunctionMode`` instance) on the calling thread's stack and takes it off.

    ``install()`` pushes it on top (the installing thread is the one that may remove it); ``remove()``
    takes it off when it is on top of that thread's stack and says whether it did; called from another
    thread, or while another mode sits above it, it leaves the stack alone (the mode stays, and the
    caller may try again later). Reinstalling after a removal is allowed."""

    def __init__(self, mode: Any) -> None:
        self.mode = mode
        self._thread = threading.get_ident()
        self._installed = False

    @property
    def installed(self) -> bool:
        return self._installed

    def install(self) -> None:
        if self._installed:
            return
        self._thread = threading.get_ident()
        self.mode.__enter__()
        self._installed = True

    def on_top(self) -> bool:
        """Whether the mode is on top of the calling thread's stack (and that thread installed it)."""
        if not self._installed or threading.get_ident() != self._thread:
            return False
        import torch

        depth = torch._C._len_torch_function_stack()
        return bool(depth) and torch._C._get_function_stack_at(depth - 1) is self.mode

    def remove(self) -> bool:
        """Take the mode off when it is on top (see the class docstring); True when it came off."""
        if not self.on_top():
            return False
        self.mode.__exit__(None, None, None)
        self._installed = False
        return True
