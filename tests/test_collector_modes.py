"""``stallscope.collector.modes.ThreadMode``: a collector mode comes off only from its own thread and only from the
top of the stack, so a mode the program pushed later is never popped in its place."""

from __future__ import annotations

import threading
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch.overrides import TorchFunctionMode  # noqa: E402

from stallscope.collector.modes import ThreadMode  # noqa: E402


class _Passing(TorchFunctionMode):
    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        return func(*args, **(kwargs or {}))


def _stack() -> list[Any]:
    return list(torch.overrides._get_current_function_mode_stack())


def test_remove_leaves_a_mode_pushed_above_it_and_retries_later() -> None:
    # GIVEN our mode, then the program's mode on top of it
    ours = ThreadMode(_Passing())
    ours.install()
    program: Any = _Passing()
    program.__enter__()
    # WHEN we try to remove ours, THEN the program's mode stays on top and ours stays installed
    assert not ours.remove()
    assert _stack() == [ours.mode, program]
    assert ours.installed
    # AND once the program's mode is gone, ours comes off
    program.__exit__(None, None, None)
    assert ours.remove()
    assert _stack() == [] and not ours.installed


def test_remove_from_another_thread_does_nothing_and_reinstall_works() -> None:
    ours = ThreadMode(_Passing())
    ours.install()
    removed: list[bool] = []
    t = threading.Thread(target=lambda: removed.append(ours.remove()))
    t.start()
    t.join()
    assert removed == [False] and _stack() == [ours.mode]
    assert ours.remove() and _stack() == []
    ours.install()
    assert _stack() == [ours.mode]
    assert ours.remove() and _stack() == []
