"""The one way numbers written as text in a trace (ids, step and iteration numbers, line numbers) are read.

``str.isdigit`` accepts superscripts (``"²"``) that ``int`` then rejects, ``\\d`` in a regular expression
accepts any script's digits, and ``int`` of a 5,000-digit string hits Python's int-string limit. Trace text
is untrusted: only ASCII digits, and only as many as an int64 holds, are a number; anything else is not.
"""

from __future__ import annotations

import math
from typing import Any

MAX_DIGITS = 18  # every 18-digit number fits an int64 (the model's id columns)
_ASCII_DIGITS = frozenset("0123456789")


def parse_uint(text: str, max_digits: int = MAX_DIGITS) -> int | None:
    """``text`` as a non-negative int when it is 1 to ``max_digits`` ASCII digits, else None."""
    if not 0 < len(text) <= max_digits or not _ASCII_DIGITS.issuperset(text):
        return None
    return int(text)


def finite_float(value: Any) -> float | None:
    """A JSON number as a finite float; None for anything else (strings, bools, NaN, infinities, ints too
    large for a float)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        out = float(value)
    except OverflowError:
        return None
    return out if math.isfinite(out) else None


def bounded_int(value: Any, limit: int = 2**63 - 1) -> int | None:
    """A JSON number that is a whole number within ``±limit`` as an int; None otherwise (1e400, NaN...)."""
    number = finite_float(value)
    if number is None or not number.is_integer() or abs(number) > limit:
        return None
    return int(number)


def ratio(part: float, whole: float) -> float:
    """``part / whole``, or 0.0 when ``whole`` is not positive (a window, busy time or count of zero)."""
    return part / whole if whole > 0 else 0.0


def duration_text(us: float) -> str:
    """A duration in µs as every view writes it: ``1,234.56 ms`` from a millisecond up, else ``12.3 µs``."""
    return f"{us / 1000:,.2f} ms" if abs(us) >= 1000 else f"{us:,.1f} µs"
