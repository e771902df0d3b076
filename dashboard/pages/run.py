"""Run page (``/runs/<run_id>``): the captures of one long run in wall-clock order, a chart of step time
and utilization over time, and the captures flagged as different from the run's earlier ones, each with
a link to its comparison against the last good capture (``stallscope.dashboard.runs`` says what flags a
capture). The page checks the run every few seconds and draws itself again when a capture arrives or
finishes its analysis.

Layout / callbacks split: ``layout`` and ``body`` build the page, ``on_tick`` is the refresh callback's
body (a plain function of the services and the page's key, called directly by the tests).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from dash import Dash, Input, Output, State, dcc, html, no_update

from stallscope.dashboard.pages import figures
from stallscope.dashboard.pages.common import TABLE_STYLE, data_table, message
from stallscope.dashboard.runs import (
    DEFAULT_THRESHOLD,
    Capture,
    Run,
    RunError,
    build,
    check_run_id,
    groups,
    history,
    parse_threshold,
)
from stallscope.dashboard.services import Services
from stallscope.dashboard.store import Entry
from stallscope.display.text import plain
from stallscope.display.units import duration

REFRESH_MS = 10_000


class Ids(str, Enum):
    BODY = "run-body"
    KEY = "run-key"  # {run_id, threshold, signature}: what the refresh compares
    TICK = "run-tick"
    FLAGS = "run-flags"
    CHART = "run-chart"
    TABLE = "run-captures"
    OTHERS = "run-others"


COLUMNS = [
    {"id": "index", "name": "capture", "type": "numeric"},
    {"id": "at", "name": "time (UTC)"},
    {"id": "trigger", "name": "trigger"},
    {"id": "steps", "name": "steps"},
    {
        "id": "step_ms",
        "name": "step time (ms)",
        "type": "numeric",
        "format": {"specifier": ",.2f", "nully": "—"},
    },
    {
        "id": "utilization",
        "name": "GPU utilization",
        "type": "numeric",
        "format": {"specifier": ".1%", "nully": "—"},
    },
    {"id": "bottleneck", "name": "bottleneck"},
    {"id": "findings", "name": "top findings (est. saving)"},
    {"id": "change", "name": "change"},
    {"id": "open", "name": "", "presentation": "markdown"},
]


def layout(services: Services, run_text: str, threshold_text: str | None = None) -> html.Div:
    """The page of the run ``run_text`` (a ``RunError`` for text that is not a run id, an unusable
    threshold or a run without captures: the router shows it as a message)."""
    run_id = check_run_id(run_text)
    threshold = parse_threshold(threshold_text)
    run = history(services.store.entries(), run_id, threshold)
    key = {"run_id": run_id, "threshold": threshold, "signature": signature(run)}
    return html.Div(
        [
            dcc.Store(id=Ids.KEY.value, data=key),
            dcc.Interval(id=Ids.TICK.value, interval=REFRESH_MS),
            html.Div(body(run), id=Ids.BODY.value),
        ]
    )


def signature(run: Run) -> list[list[str]]:
    """What the page was drawn from: each entry's id and status."""
    return sorted([e.id, e.status.value] for e in (*(c.entry for c in run.captures), *run.others))


def body(run: Run) -> list[Any]:
    cs = run.captures
    parts: list[Any] = [
        html.H2(["Run ", html.Span(run.run_id, className="mono")]),
        html.P(_line(run), className="muted"),
    ]
    flagged = [c for c in cs if c.flag is not None]
    if flagged:
        parts.append(html.Ul([_flag_item(c) for c in flagged], id=Ids.FLAGS.value, className="ss-run-flags"))
    if cs:
        parts.append(
            dcc.Graph(figure=figures.run_history(run), id=Ids.CHART.value, config={"displaylogo": False})
        )
        parts.append(
            data_table(
                id=Ids.TABLE.value,
                columns=COLUMNS,
                data=rows(run),
                sort_action="native",
                page_size=100,
                markdown_options={"link_target": "_self"},
                style_data_conditional=[
                    *TABLE_STYLE["style_data_conditional"],
                    {"if": {"filter_query": "{flagged} = 1"}, "backgroundColor": "#fff8e6"},
                ],
            )
        )
    if run.others:
        parts += [
            html.H4("Not analysed (yet)"),
            html.Ul([_other(e) for e in run.others], id=Ids.OTHERS.value),
        ]
    return parts


def _line(run: Run) -> str:
    """How many captures, over what time, how many flagged and what flags one."""
    cs = run.captures
    if not cs:
        return "No capture of this run is analysed yet."
    n = len(cs)
    line = f"{n} capture{'s' * (n != 1)}"
    line += f", {cs[0].time_text} to {cs[-1].time_text} UTC" if n > 1 else f", {cs[0].time_text} UTC"
    flagged = run.flagged
    line += (f"; {flagged} flagged" if flagged else "; none flagged") + (
        f": a capture is flagged when its step time is more than {run.threshold:.0%} above the last good"
        " capture's (the latest earlier one not flagged), a finding's rule is new to the run, or its"
        " bottleneck is not the last good capture's"
    )
    return line + "."


def _flag_item(c: Capture) -> html.Li:
    assert c.flag is not None
    against = (
        f"capture {c.flag.against_index}" if c.flag.against_index is not None else "the last good capture"
    )
    return html.Li(
        [
            html.Strong(f"capture {c.index if c.index is not None else '?'}"),
            f" ({c.time_text}): ",
            "; ".join(ch.text for ch in c.flag.changes),
            " — ",
            dcc.Link(f"compare with {against}", href=c.flag.diff),
        ],
        className="stallscope-warning",
    )


def _other(e: Entry) -> html.Li:
    state = e.status.value + (f": {e.error[:120]}" if e.error else "")
    return html.Li([dcc.Link(e.name, href=f"/trace/{e.id}"), f" ({state})"])


def rows(run: Run) -> list[dict[str, Any]]:
    """Table rows, one per capture. Names and titles are plain text cells; the only markdown is the
    links, built from the entries' ids (32 hex digits) and capture numbers."""
    out = []
    for c in run.captures:
        links = f"[trace](/trace/{c.entry.id})"
        if c.flag is not None:
            links += f" · [diff against {c.flag.against_index or 'last good'}]({c.flag.diff})"
        out.append(
            {
                "id": c.entry.id,
                "index": c.index,
                "at": c.time_text,
                "trigger": c.trigger or "",
                "steps": f"{c.steps[0]}–{c.steps[1]}" if c.steps else "—",
                "step_ms": None if c.step_us is None else c.step_us / 1000,
                "utilization": c.utilization,
                "bottleneck": c.bottleneck or "-",
                "findings": "; ".join(_finding(f) for f in c.top_findings) or "none",
                "change": "; ".join(ch.text for ch in c.flag.changes) if c.flag else "",
                "flagged": int(c.flag is not None),
                "open": links,
            }
        )
    return out


def _finding(f: dict[str, Any]) -> str:
    title = plain(str(f.get("title") or f.get("rule") or "finding"))
    saving = f.get("est_saving_us")
    return f"{title} ({duration(float(saving))})" if isinstance(saving, (int, float)) and saving else title


def on_tick(services: Services, key: dict[str, Any] | None) -> tuple[Any, Any]:
    """The page again, and its new key, when the run's captures changed since it was drawn; else
    nothing (a redraw would reset the chart's zoom)."""
    if not key:
        return no_update, no_update
    run_id = str(key.get("run_id"))
    try:
        mine = groups(services.store.entries()).get(check_run_id(run_id))
        run = build(run_id, mine or [], float(key.get("threshold") or DEFAULT_THRESHOLD))
    except RunError as exc:
        return [message(str(exc))], no_update
    sig = signature(run)
    if sig == key.get("signature"):
        return no_update, no_update
    if not mine:
        return [message(f"no captures of run {run_id!r} any more")], {**key, "signature": sig}
    return body(run), {**key, "signature": sig}


def register(app: Dash, services: Services) -> None:
    @app.callback(
        Output(Ids.BODY.value, "children"),
        Output(Ids.KEY.value, "data"),
        Input(Ids.TICK.value, "n_intervals"),
        State(Ids.KEY.value, "data"),
        prevent_initial_call=True,
    )
    def tick(_n: int | None, key: dict[str, Any] | None) -> tuple[Any, Any]:
        return on_tick(services, key)
