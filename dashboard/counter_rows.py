"""Counter rows of the timeline: each counter series of the trace (``model.Counters``) as a step line in a
row of its own, scaled to the row (hover for the value). Used by ``stallscope.dashboard.timeline`` for the HTML
report and the dashboard alike; the samples are only selected and decimated here, never re-derived."""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from stallscope.analyzer.core.model import F64, TraceModel
from stallscope.analyzer.load.counters import decimate
from stallscope.dashboard import palette

MAX_ROWS = 8  # counter rows drawn; the others are named in the row label of the last one
_BAND = 0.38  # half the height of a row the line may use


@dataclass(frozen=True)
class CounterRow:
    key: str  # "counter:<series index>"
    label: str  # raw trace text (series name, unit): escape before display
    ts_us: F64
    value: F64
    samples: int  # samples of the series in the range, before decimation


def counter_rows(
    model: TraceModel, start_us: float, end_us: float, max_points: int
) -> tuple[CounterRow, ...]:
    """The counter series with samples in the range (plus the value in force at its start), in trace
    order, series that are zero throughout left out; at most ``MAX_ROWS``, ``max_points`` samples each."""
    c = model.counters
    out: list[CounterRow] = []
    hidden = 0
    for i, series in enumerate(c.series):
        ts, value = c.of(i)
        lo = max(int(np.searchsorted(ts, start_us, side="right")) - 1, 0)
        hi = int(np.searchsorted(ts, end_us, side="left"))
        if hi <= lo or not np.any(value[lo:hi]):
            continue
        if len(out) == MAX_ROWS:
            hidden += 1
            continue
        shown_ts, shown_value = decimate(ts[lo:hi], value[lo:hi], max(max_points, 2))
        unit = f" ({series.unit})" if series.unit else ""
        out.append(CounterRow(f"counter:{i}", f"{series.name}{unit}", shown_ts, shown_value, hi - lo))
    if hidden:
        last = out[-1]
        out[-1] = CounterRow(
            last.key, f"{last.label} (+{hidden} more series)", last.ts_us, last.value, last.samples
        )
    return tuple(out)


def add_counters(
    fig: go.Figure, rows: tuple[CounterRow, ...], first_y: int, origin: float, end_us: float
) -> None:
    """One step line per counter row, in rows ``first_y``, ``first_y + 1``... (y grows downwards)."""
    for i, row in enumerate(rows):
        y0 = first_y + i
        lo, hi = float(row.value.min()), float(row.value.max())
        span = (hi - lo) or 1.0
        x = np.r_[np.maximum(row.ts_us, origin), end_us]
        v = np.r_[row.value, row.value[-1]]
        y = y0 + _BAND - 2 * _BAND * (v - lo) / span
        name = html.escape(row.label)
        fig.add_trace(
            go.Scatter(
                name="counter",
                legendgroup="counter",
                showlegend=i == 0,
                mode="lines",
                line={"shape": "hv", "color": palette.COUNTER, "width": 1.5},
                x=((x - origin) / 1000).round(6).tolist(),
                y=y.round(4).tolist(),
                hovertext=[f"<b>{name}</b><br>{val:,.6g}" for val in v.tolist()],
                customdata=[row.key] * len(x),  # what a click hit (the dashboard's detail panel)
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
