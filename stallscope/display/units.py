"""The one formatter of durations (every number stallscope shows is µs on the trace clock).

``duration`` is what the terminal, the report and the dashboard print for a time; ``Scale`` picks one unit
for a whole table column from its largest value, so a column of 2 µs host waits is not "0.002 ms".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from stallscope.analyzer.core.numbers import duration_text

MICRO = "µs"
NONE = "—"  # a value that does not exist (a CPU-only run's device figures)


def duration(us: float | None) -> str:
    """``1.53 ms`` from 1000 µs up, else ``812.0 µs``; "—" for None."""
    if us is None:
        return NONE
    return duration_text(us)  # the analyzer's own text writes times the same way


def signed(us: float) -> str:
    """A change: ``+1.20 ms`` / ``-1.20 ms`` (for a time that is not a change, see ``saving``)."""
    return f"{'+' if us >= 0 else '-'}{duration(abs(us))}"


def saving(us: float) -> str:
    """A saving is a positive amount of time: ``saves 8.01 ms`` (never "−8.01 ms")."""
    return f"saves {duration(max(us, 0.0))}"


def share(fraction: float | None) -> str:
    """A percentage with one decimal below 1% (a 0.4% saving is not "0%"); "—" for None."""
    if fraction is None:
        return NONE
    return f"{fraction:.1%}" if 0 < abs(fraction) < 0.01 else f"{fraction:.0%}"


@dataclass(frozen=True)
class Scale:
    """One unit for a column of durations: ``value(us)`` in that unit, ``unit`` for the header."""

    unit: str
    divisor: float
    decimals: int

    def value(self, us: float | None) -> float | None:
        return None if us is None else round(us / self.divisor, self.decimals)

    def header(self, name: str) -> str:
        return f"{name} ({self.unit})"

    @property
    def specifier(self) -> str:
        """The d3 format of the column (Dash tables)."""
        return f",.{self.decimals}f"


MS = Scale("ms", 1000.0, 3)
US = Scale(MICRO, 1.0, 1)


def scale(values: Iterable[float | None]) -> Scale:
    """ms when the column's largest value is 1 ms or more, else µs (the same threshold as ``duration``)."""
    top = max((abs(v) for v in values if v is not None), default=0.0)
    return MS if top >= 1000 else US
