"""The commands' allocator settings (``stallscope.allocator``), tried in a fresh process each."""

from __future__ import annotations

import subprocess
import sys

import pytest

# allocate 256 MB, free it, and report the resident MB before, with it, and after (Linux: /proc)
_FREED = """
import os, sys
import numpy as np
if sys.argv[1] == "kept":
    from stallscope.allocator import keep_freed_memory
    keep_freed_memory()
page = os.sysconf("SC_PAGE_SIZE")
def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page / 2**20
before = resident()
block = np.ones(256 * 2**20 // 8)
held = resident()
del block
after = resident()
if len(sys.argv) > 2:  # the model cache's writer child drops what its parent had freed
    from stallscope.analyzer.load.cache import _drop_freed_memory
    _drop_freed_memory()
print(before, held, after, resident())
"""


def _resident_mb(*how: str) -> tuple[float, ...]:
    done = subprocess.run([sys.executable, "-c", _FREED, *how], capture_output=True, text=True, check=True)
    return tuple(map(float, done.stdout.split()))


glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or "glibc" not in " ".join(__import__("platform").libc_ver()),
    reason="glibc's mallopt and malloc_trim",
)


@glibc
def test_the_cache_writer_child_drops_the_memory_its_parent_kept() -> None:
    # GIVEN a process set up as the commands are, which made and freed a 256 MB array (kept for reuse)
    before, held, after, dropped = _resident_mb("kept", "drop")
    assert held - before > 250 and after - before > 250
    # WHEN it drops freed memory (as the model cache's writer child does first) THEN the block is gone
    # from it
    assert dropped - before < 10


@glibc
def test_a_command_keeps_a_large_freed_block_for_reuse() -> None:
    # GIVEN a 256 MB array, made and freed by a process as it starts, and by one set up as the commands are
    plain = _resident_mb("plain")
    kept = _resident_mb("kept")
    # THEN both held it while it lived; the plain process gave it back to the system at once, the
    # command's kept it (the next large block is served from it, with no new pages to zero)
    assert plain[1] - plain[0] > 250 and kept[1] - kept[0] > 250
    assert plain[2] - plain[0] < 10
    assert kept[2] - kept[0] > 250


def test_numpy_asks_for_no_huge_pages_once_set_up() -> None:
    code = (
        "from stallscope.allocator import keep_freed_memory\n"
        "from numpy._core import multiarray\n"
        "keep_freed_memory()\n"
        "print(multiarray._set_madvise_hugepage(True))"  # returns the setting it replaces
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_command_collects_cycles_less_often() -> None:
    code = (
        "import gc\nfrom stallscope.allocator import collect_less\ncollect_less()\nprint(*gc.get_threshold())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["50000", "20", "20"]
