"""Kernel names for people: Itanium-mangled C++ names (``_ZN7cutlass6KernelI...``) demangled for display.

The JSON keeps the trace's raw names (a name is a key); views show ``display_name``. Demangling uses the
system's C++ runtime through ``cxxfilt`` (``abi::__cxa_demangle``); without it, or for a name it cannot
demangle, the raw name is shown. Results are cached: a table repeats the same kernels.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

_MANGLED = ("_Z", "__Z")  # Itanium C++ (a leading extra underscore on macOS)


def _demangler() -> Any:
    try:
        import cxxfilt  # type: ignore[import-untyped]

        return cxxfilt.demangle
    except Exception:  # not installed, or no C++ runtime to load: show raw names
        return None


_DEMANGLE = _demangler()


@lru_cache(maxsize=65536)
def display_name(name: str) -> str:
    """``name`` demangled when it is a mangled C++ name and the demangler can read it, else ``name``."""
    if _DEMANGLE is None or not name.startswith(_MANGLED):
        return name
    try:
        out = _DEMANGLE(name.strip(), external_only=False)
    except Exception:  # cxxfilt.InvalidName and anything a hostile name provokes
        return name
    return str(out) if out else name
