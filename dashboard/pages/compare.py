"""Compare two traces (before / after a fix): headline numbers side by side with their change, per-finding
deltas (findings matched by rule and call site) and per-step distributions."""

from __future__ import annotations

from enum import Enum
from typing import Any

from dash import Dash, Input, Output, State, dcc, html

from stallscope.analyzer.core.errors import StallscopeError
from stallscope.analyzer.document.diff import compare as compare_sides
from stallscope.analyzer.document.diff import diff_json, side_of
from stallscope.dashboard.diff_report import table_row
from stallscope.dashboard.headline import bottleneck_text, catalog_summary
from stallscope.dashboard.pages import figures
from stallscope.dashboard.pages.common import Doc, data_table, message, ms, pct, site_text
from stallscope.dashboard.services import Services
from stallscope.dashboard.store import Status, StoreError
from stallscope.display.text import plain
from stallscope.display.units import signed


class Ids(str, Enum):
    A = "compare-a"
    B = "compare-b"
    RESULT = "compare-result"
    SWAP = "compare-swap"


# (summary key, label, format, whether lower is better)
HEADLINE = (
    ("wall_us", "wall time", "ms", True),
    ("device_utilization", "GPU utilization", "pct", False),
    ("device_idle_us", "device idle", "ms", True),
    ("host_sync_wait_us", "host blocked in syncs", "ms", True),
    ("sync_count", "syncs", "n", True),
    ("avoidable_sync_count", "avoidable syncs", "n", True),
    ("critical_path_us", "critical path", "ms", True),
    ("best_saving_us", "est. saving left", "ms", True),
)


_DEVICE_KEYS = frozenset({"device_utilization", "device_idle_us"})


def _fmt(value: Any, how: str) -> str:
    if value is None:
        return "—"  # a CPU-only trace has no utilization
    return ms(value) if how == "ms" else pct(value) if how == "pct" else f"{value:,}"


def _delta(a: Any, b: Any, how: str) -> str:
    if a is None or b is None:
        return "—"
    d = b - a
    if how == "pct":
        return f"{d * 100:+.1f} pts"
    rel = f" ({d / a:+.0%})" if a else ""
    return (signed(d) if how == "ms" else f"{d:+,}") + rel


def headline_rows(a: Doc, b: Doc) -> list[dict[str, Any]]:
    """Before/after rows of the headline numbers; a CPU-only side has no utilization (no delta, no
    verdict) and its bottleneck reads "CPU only", as on the overview."""
    sa, sb = catalog_summary(a), catalog_summary(b)
    rows = []
    for key, label, how, lower_better in HEADLINE:
        # a CPU-only side has no device figures: absent, not "idle = wall" (and so never "worse")
        va = None if sa.get("cpu_only") and key in _DEVICE_KEYS else sa.get(key)
        vb = None if sb.get("cpu_only") and key in _DEVICE_KEYS else sb.get(key)
        better = None if va is None or vb is None or va == vb else ((vb < va) == lower_better)
        rows.append(
            {
                "metric": label,
                "before": _fmt(va, how),
                "after": _fmt(vb, how),
                "change": _delta(va, vb, how),
                "verdict": "" if better is None else ("better" if better else "worse"),
            }
        )
    rows.append(
        {
            "metric": "bottleneck",
            "before": bottleneck_text(sa),
            "after": bottleneck_text(sb),
            "change": "",
            "verdict": "",
        }
    )
    return rows


def finding_rows(a: Doc, b: Doc) -> list[dict[str, Any]]:
    """One row per (rule, call site) found in either trace: its cost before and after. A finding that
    disappeared after the fix shows 'gone'."""

    def keyed(doc: Doc) -> dict[tuple[str, str], Doc]:
        return {(f["rule"], site_text(f.get("call_site"))): f for f in doc["findings"]}

    fa, fb = keyed(a), keyed(b)
    rows = []
    for key in sorted(
        set(fa) | set(fb),
        key=lambda k: -max(fa.get(k, {}).get("time_us", 0), fb.get(k, {}).get("time_us", 0)),
    ):
        x, y = fa.get(key), fb.get(key)
        title = plain((x or y or {}).get("title", key[0]))  # a table cell is text: no backticks
        ta, tb = (x or {}).get("time_us"), (y or {}).get("time_us")
        status = "gone" if y is None else "new" if x is None else _delta(ta, tb, "ms")
        rows.append(
            {
                "finding": title,
                "site": key[1],
                "before": _fmt(ta, "ms"),
                "after": _fmt(tb, "ms"),
                "change": status,
            }
        )
    return rows


#: the changed-row tables of ``stallscope diff`` (analyzer.document.diff), the same computation
DIFF_TABLES = (
    ("ops", "Top ops that changed most (self time)"),
    ("kernels", "Top kernels that changed most (device time)"),
)


def diff_rows(a: Doc, b: Doc, names: tuple[str, str]) -> dict[str, list[dict[str, Any]]]:
    """The ops and kernels that changed most, as ``stallscope diff`` computes and shows them."""
    d = diff_json(compare_sides(side_of(a, names[0]), side_of(b, names[1])))
    return {
        key: [
            {k: row[k] for k in ("status", "name", "count", "before", "after", "change")}
            for row in map(table_row, d[key])
        ]
        for key, _title in DIFF_TABLES
    }


#: readings of ``stallscope diff``'s ``run_steps`` under which the windows' change is not to be trusted
UNTRUSTED = ("noise", "windows_atypical", "windows_disagree")


def run_reading(a: Doc, b: Doc, names: tuple[str, str]) -> tuple[str, str] | None:
    """What every step of both runs says of the windows' change (``stallscope diff``'s ``run_steps``):
    (reading, sentence), or None when a side did not time its whole run."""
    run = diff_json(compare_sides(side_of(a, names[0]), side_of(b, names[1])))["run_steps"]
    if not isinstance(run, dict):
        return None
    return str(run["reading"]), f"whole runs: {run['note']}"


def on_swap(a_id: str | None, b_id: str | None) -> tuple[str | None, str | None]:
    """The swap control: before becomes after and after before."""
    return b_id, a_id


def _columns(keys: tuple[str, ...]) -> list[dict[str, str]]:
    return [{"id": k, "name": k} for k in keys]


def on_pick(services: Services, a_id: str | None, b_id: str | None) -> Any:
    """The comparison of two ready traces, or a message saying what is missing."""
    if not a_id or not b_id:
        return message("pick a 'before' and an 'after' trace", "info")
    try:
        a, b = services.store.analysis(a_id), services.store.analysis(b_id)
        names = (services.store.get(a_id).name, services.store.get(b_id).name)
    except StoreError as exc:
        return message(str(exc))
    parts: list[Any] = [
        html.H4("Headline numbers"),
        data_table(
            data=headline_rows(a, b),
            columns=_columns(("metric", "before", "after", "change", "verdict")),
        ),
        html.H4("Findings"),
        data_table(
            data=finding_rows(a, b),
            columns=_columns(("finding", "site", "before", "after", "change")),
        ),
    ]
    try:
        changed = diff_rows(a, b, names)
        reading = run_reading(a, b, names)
    except StallscopeError as exc:
        parts.append(message(f"ops not compared: {exc}", "info"))
        changed, reading = {}, None
    if reading is not None:  # above the headline: it says how far to trust it
        parts.insert(0, message(reading[1], "warning" if reading[0] in UNTRUSTED else "info"))
    for key, title in DIFF_TABLES:
        if changed.get(key):
            parts += [
                html.H4(title),
                data_table(
                    id=f"compare-{key}",
                    data=changed[key],
                    columns=_columns(("status", "name", "count", "before", "after", "change")),
                ),
            ]
    if a["steps"] or b["steps"]:
        parts.append(dcc.Graph(figure=figures.step_distributions(a, b, names), config={"displaylogo": False}))
    return html.Div(parts)


def layout(services: Services, a_id: str | None, b_id: str | None) -> html.Div:
    ready = [e for e in services.store.entries() if e.status is Status.READY]
    options = [{"label": f"{e.name} ({e.id[:8]})", "value": e.id} for e in ready]
    known = {e.id for e in ready}
    a_id = a_id if a_id in known else None
    b_id = b_id if b_id in known else None
    pick = {"width": "420px", "display": "inline-block", "marginRight": "12px"}
    return html.Div(
        [
            html.H3("Compare two traces"),
            dcc.Dropdown(options, a_id, id=Ids.A.value, placeholder="before", style=pick),
            dcc.Dropdown(options, b_id, id=Ids.B.value, placeholder="after", style=pick),
            html.Button("⇄ swap before and after", id=Ids.SWAP.value),
            html.Div(on_pick(services, a_id, b_id), id=Ids.RESULT.value),
        ]
    )


def register(app: Dash, services: Services) -> None:
    @app.callback(
        Output(Ids.A.value, "value"),
        Output(Ids.B.value, "value"),
        Input(Ids.SWAP.value, "n_clicks"),
        State(Ids.A.value, "value"),
        State(Ids.B.value, "value"),
        prevent_initial_call=True,
    )
    def swap(_n: int | None, a_id: str | None, b_id: str | None) -> tuple[str | None, str | None]:
        return on_swap(a_id, b_id)

    @app.callback(
        Output(Ids.RESULT.value, "children"),
        Input(Ids.A.value, "value"),
        Input(Ids.B.value, "value"),
        prevent_initial_call=True,
    )
    def pick(a_id: str | None, b_id: str | None) -> Any:
        return on_pick(services, a_id, b_id)
