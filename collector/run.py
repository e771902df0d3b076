"""Run an unmodified program the way ``python script.py`` / ``python -m module`` would (as cProfile does).

``__main__`` semantics (runpy), ``sys.argv`` and ``sys.path[0]`` as the program expects, and the
program's own exit code: ``sys.exit(n)`` -> n, an uncaught exception -> its traceback (without our
frames) on stderr and 1, Ctrl-C -> 130. The caller's ``sys.argv`` and ``sys.path`` are restored after.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any

INTERRUPTED = 130
_OUR_FILES = {os.path.abspath(runpy.__file__), os.path.abspath(__file__), "<frozen runpy>"}


def run_script(path: str, argv: Sequence[str]) -> int:
    """Run the file (or folder/zip with ``__main__.py``) at ``path`` as ``__main__`` with ``argv``."""
    folder = os.path.dirname(os.path.abspath(path))
    with _program_state([path, *argv], folder):
        return _run(lambda: runpy.run_path(path, run_name="__main__"))


def run_module(name: str, argv: Sequence[str]) -> int:
    """Run module ``name`` as ``__main__`` (``python -m name argv...``); ``sys.path[0]`` is the cwd."""
    with _program_state([name, *argv], os.getcwd()):
        # alter_sys: sys.argv[0] becomes the module's file and sys.modules["__main__"] the module
        return _run(lambda: runpy.run_module(name, run_name="__main__", alter_sys=True))


@contextmanager
def _program_state(argv: list[str], path0: str) -> Iterator[None]:
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv[:] = argv
    if sys.path:
        sys.path[0] = path0
    else:
        sys.path.insert(0, path0)
    try:
        yield
    finally:
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path


def _run(body: Callable[[], Any]) -> int:
    try:
        body()
    except SystemExit as exc:
        return exit_code(exc)
    except KeyboardInterrupt:
        return INTERRUPTED
    except BaseException as exc:  # the program's own error: show it as Python would, minus our frames
        sys.stdout.flush()
        traceback.print_exception(type(exc), exc, _own_frames(exc.__traceback__))
        sys.stderr.flush()
        return 1
    finally:
        sys.stdout.flush()
    return 0


def exit_code(exc: SystemExit) -> int:
    """The process exit status Python gives ``sys.exit(code)``: None -> 0, int -> int, else print -> 1."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _own_frames(tb: TracebackType | None) -> TracebackType | None:
    """Drop the leading frames of runpy and this module: the traceback starts in the program."""
    while tb is not None and _ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


def _ours(filename: str) -> bool:
    return filename in _OUR_FILES or os.path.abspath(filename) in _OUR_FILES
