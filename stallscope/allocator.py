"""Allocator and collector settings for a command that builds one large model, answers and exits (``analyze``,
``check``, ``report``, ``diff``), not for a long-lived process such as the dashboard.

At tens of millions of events every column is tens of MB: glibc serves each such block with its own
``mmap`` and gives it back on ``free``, so each of the passes' temporaries is memory the kernel must find
and zero again, and numpy asks for transparent huge pages for large arrays, which the kernel may compact
memory to provide. On a 10M-event trace that was 3-4 s of kernel time; with large blocks taken from the
heap and kept there once freed, and no huge-page requests, 1 s (``docs/performance.md``). The peak is
about the same (freed blocks are reused, not added to; +10 MB at 1M events). The process gives it all
back when it exits.
"""

from __future__ import annotations

import ctypes
import gc
import sys

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (malloc.h)


def keep_freed_memory() -> None:
    """Serve large blocks from the heap and keep freed memory for reuse (glibc); ask for no huge pages
    (numpy). Elsewhere, or where an interface is missing, nothing changes."""
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray  # type: ignore[no-redef]
    no_huge_pages = getattr(multiarray, "_set_madvise_hugepage", None)
    if no_huge_pages is not None:
        no_huge_pages(False)
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc only: musl's mallopt takes other parameters
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    mallopt(_M_MMAP_MAX, 0)
    mallopt(_M_TRIM_THRESHOLD, -1)


def collect_less() -> None:
    """Run the cyclic collector 70 times less often (young generation: 50,000 new objects, not 700). The
    analysis makes tens of thousands of small acyclic objects (gaps, their details, the document's
    dicts); at 700 a collection every few hundred of them took 6% of a 1M-event analysis."""
    gc.set_threshold(50_000, 20, 20)
