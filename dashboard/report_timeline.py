"""The report's timeline: the whole window's rows as columns for the page's script, which merges them to
the screen's resolution on every zoom (``timeline.js``), so zooming in splits merged blocks again; and
the claims the page's "show" links open.

The figure embedded beside the columns is ``timeline_figure.figure`` of the window with empty rows: its
layout, row labels, syncs, counters and step lines. The script adds one bar trace per legend group, styled
as the dashboard's (``timeline_figure.bar_style``, ``opacity``), with the same labels. Columns: ``s`` start and ``d`` duration (ms), ``g`` legend group, ``n`` name, ``t`` call
site (absent: none), ``p`` partner event (absent: none), and for items merged once ``c`` count, ``b`` busy
and ``l`` longest (ms). Past ``RAW_BUDGET``
events the columns are merged once to the finest level that fits (the page can split no further; the
dashboard can).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np

from stallscope.analyzer.analysis import Analysis
from stallscope.dashboard import claims, timeline, timeline_figure
from stallscope.dashboard.counter_rows import counter_rows

RAW_BUDGET = 60_000  # events the page holds unmerged (about 2.5 MB); past it, merged once to fit
UNMERGED = 10**9
COUNTER_POINTS = 2000

Doc = dict[str, Any]


def _ms(values: Any, origin: float) -> list[float]:
    return [round(v, 5) for v in ((np.asarray(values, dtype=np.float64) - origin) / 1000).tolist()]


def _span_ms(values: Any) -> list[float]:
    return [round(v, 5) for v in (np.asarray(values, dtype=np.float64) / 1000).tolist()]


def timeline_doc(a: Analysis, origin_name: str) -> tuple[Doc, Doc, timeline.TimelineSlice]:
    """(figure frame, columns, the slice) of the analysis' window for the page's script. Times are ms from
    the window's start; names and call sites are indices into ``names`` and ``sites``."""
    w = a.window
    model = a.model
    rows = len(timeline.frame(model, a)) or 1
    events = len(model.events.overlapping(w.start_us, w.end_us))
    bins = UNMERGED if events <= RAW_BUDGET else max(RAW_BUDGET // rows, timeline.DEFAULT_MAX_ITEMS)
    sl = timeline.extract(model, a, w.start_us, w.end_us, bins)
    sl = replace(sl, counters=counter_rows(model, w.start_us, w.end_us, COUNTER_POINTS))
    origin = w.start_us
    names: dict[str, int] = {}
    sites: dict[str, int] = {"": 0}
    groups: dict[str, int] = {}
    group_doc: list[Doc] = []
    cols = []
    ypos = {r.key: i for i, r in enumerate(sl.rows)}
    for r in sl.rows:
        it = r.items
        gi = []
        for key in it.color:
            legend, colour = timeline_figure.legend_and_colour(r.kind, key)
            if legend not in groups:
                groups[legend] = len(group_doc)
                group_doc.append(
                    {
                        "name": legend,
                        "marker": timeline_figure.bar_style(r.kind, colour),
                        "plural": timeline.plural(r.kind, key),
                        "idle": r.kind == timeline.RowKind.GAPS,
                    }
                )
            gi.append(groups[legend])
        col: Doc = {
            "s": _ms(it.start_us, origin),
            "d": _span_ms(it.end_us - it.start_us),  # durations: shorter numbers than end times
            "g": gi,
            "n": [names.setdefault(n, len(names)) for n in it.name],
        }
        site = [sites.setdefault(s, len(sites)) for s in it.site]
        if any(site):
            col["t"] = site
        if (it.partner >= 0).any():
            col["p"] = it.partner.tolist()
        if (it.count > 1).any():  # merged once: keep what each item stands for
            col |= {"c": it.count.tolist(), "b": _span_ms(it.busy_us), "l": _span_ms(it.longest_us)}
        cols.append(col)
    places = {
        str(e): [ypos[k], round((s - origin) / 1000, 5), round((end - origin) / 1000, 5)]
        for e, (k, s, end) in sl.places.items()
        if k in ypos
    }
    empty = replace(sl, rows=tuple(replace(r, items=timeline.no_items(), events=0) for r in sl.rows))
    fig = json.loads(timeline_figure.figure(empty, origin_us=origin, origin_name=origin_name).to_json())
    doc = {
        "origin_us": origin,
        "end_ms": round(w.dur_us / 1000, 5),
        "merged_once": bins != UNMERGED,
        "rows": [r.key for r in sl.rows],
        "kinds": [r.kind.value for r in sl.rows],
        "groups": group_doc,
        "cols": cols,
        "names": list(names),
        "sites": list(sites),
        "places": places,
        "steps": [[n, round((s - origin) / 1000, 5), round((e - origin) / 1000, 5)] for n, s, e in sl.steps],
    }
    return fig, doc, sl


def claim_doc(a: Analysis, c: claims.Claim) -> Doc:
    """A claim for the page: the view to open (ms from the window's start) and the outlines."""
    w = a.window
    lo, hi = c.view(w.start_us, w.end_us)
    origin = w.start_us
    return {
        "range": [round((lo - origin) / 1000, 6), round((hi - origin) / 1000, 6)],
        "marks": [[k, round((s - origin) / 1000, 6), round((e - origin) / 1000, 6)] for k, s, e in c.marks],
        "note": c.note,
    }
