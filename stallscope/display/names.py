"""Kernel names for people: Itanium-mangled C++ names (``_ZN7cutlass6KernelI...``) demangled for display.

The JSON keeps the trace's raw names (a name is a key); views show ``display_name``. Demangling uses
LLVM's Itanium demangler through ``pycxxfilt`` (the C++ runtime's ``abi::__cxa_demangle``, as c++filt and
the ``cxxfilt`` package use it, gives up on the long CUTLASS/cuDNN kernel names real traces hold). Without
it, or for a name it cannot read, the raw name is shown. Results are cached: tables repeat kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

_MANGLED = ("_Z", "__Z")  # Itanium C++ (a leading extra underscore on macOS)


def _demangler() -> Callable[[str], str | None] | None:
    try:
        from pycxxfilt import itanium_demangle
    except ImportError:  # not installed (or no wheel for this platform): views show raw names
        return None
    return itanium_demangle


_DEMANGLE = _demangler()


@lru_cache(maxsize=65536)
def display_name(name: str) -> str:
    """``name`` demangled when it is a mangled C++ name the demangler can read, else ``name``."""
    if _DEMANGLE is None or not name.startswith(_MANGLED):
        return name
    try:
        out = _DEMANGLE(name.strip())
    except (ValueError, TypeError):  # not a valid mangled name (hostile text included)
        return name
    return out or name
