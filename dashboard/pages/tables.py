"""Syncs, gaps, steps and top-ops pages: the analysis JSON's lists as sortable tables with filters.

``sync_rows``, ``gap_rows`` and ``step_rows`` are the callbacks' bodies: pure functions of the analysis
JSON and the filter values. Positions are ms from the window start; a duration column takes one unit
for the whole trace from its largest value (``stallscope.display.units.scale``: a column of 2 µs waits is
not "0.002 ms"); call sites as text, "—" with the reason when there is none. Gaps are listed largest
first. Kernel names are demangled for display. A CPU-only run's steps have no device columns (there is no
device to be busy or idle, not 0 and the whole wall).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from dash import Dash, Input, Output, State, dcc, html

from stallscope.dashboard.headline import cpu_only
from stallscope.dashboard.pages.common import Doc, data_table, site_text, trace_nav
from stallscope.dashboard.services import Services
from stallscope.dashboard.store import Entry, StoreError
from stallscope.display.names import display_name
from stallscope.display.units import Scale, scale

NO_OP = "— (no aten op above the call)"
NO_SITE = "— (no Python stack in the trace: record with with_stack=True)"


class Ids(str, Enum):
    TRACE = "tables-trace"
    SYNC_KIND = "syncs-kind"
    SYNC_AVOIDABLE = "syncs-avoidable"
    SYNC_MIN_WAIT = "syncs-min-wait"
    SYNC_TABLE = "syncs-table"
    GAP_CAUSE = "gaps-cause"
    GAP_MIN_DUR = "gaps-min-dur"
    GAP_TABLE = "gaps-table"
    STEP_SEARCH = "steps-search"
    STEP_TABLE = "steps-table"
    TOP_OPS = "tops-ops"
    TOP_KERNELS = "tops-kernels"
    COUNT = "tables-count"


def _num(cid: str, name: str, fmt: str = ",.3f") -> dict[str, Any]:
    return {"id": cid, "name": name, "type": "numeric", "format": {"specifier": fmt}}


def _dur(cid: str, name: str, unit: Scale) -> dict[str, Any]:
    return _num(cid, unit.header(name), unit.specifier)


def _scales(doc: Doc) -> dict[str, Scale]:
    """One unit per duration column, from the whole trace's values (filters never change a header)."""
    syncs, gaps = doc.get("syncs") or [], doc.get("gaps") or []
    return {
        "wait": scale(s["wait_us"] for s in syncs),
        "bubble": scale(s["bubble_us"] for s in syncs),
        "idle": scale(g["dur_us"] for g in gaps),
    }


def sync_columns(doc: Doc) -> list[dict[str, Any]]:
    u = _scales(doc)
    return [
        _num("at_ms", "at (ms)"),
        {"id": "kind", "name": "kind"},
        {"id": "api", "name": "api"},
        {"id": "op", "name": "op"},
        _dur("wait", "host wait", u["wait"]),
        _dur("bubble", "device idle charged", u["bubble"]),
        {"id": "avoidable", "name": "avoidable"},
        {"id": "reason", "name": "reason"},
        {"id": "site", "name": "call site"},
        {"id": "show", "name": "", "presentation": "markdown"},
    ]


def gap_columns(doc: Doc) -> list[dict[str, Any]]:
    return [
        {"id": "device", "name": "GPU", "type": "numeric"},
        _dur("idle", "idle", _scales(doc)["idle"]),
        _num("at_ms", "at (ms)"),
        {"id": "cause", "name": "cause"},
        {"id": "detail", "name": "detail"},
        {"id": "site", "name": "call site"},
        {"id": "show", "name": "", "presentation": "markdown"},
    ]


#: (column id, header, the JSON's µs field; None: per step, derived) of each table's duration columns
_Keys = tuple[tuple[str, str, str | None], ...]
_STEP_KEYS: _Keys = (
    ("dur", "wall", "dur_us"),
    ("busy", "device busy", "device_busy_us"),
    ("idle", "device idle", "device_idle_us"),
    ("wait", "host sync wait", "host_sync_wait_us"),
)
DEVICE_STEP_COLUMNS = ("busy", "idle")
_OP_KEYS: _Keys = (
    ("self", "self", "self_us"),
    ("total", "total", "total_us"),
    ("per_step", "self per step", None),
)
_KERNEL_KEYS: _Keys = (
    ("total", "total", "total_us"),
    ("mean", "mean", "mean_us"),
    ("per_step", "per step", None),
)


def _units(rows: list[Doc], keys: _Keys, per_step: str | None, n: int) -> dict[str, Scale]:
    """One unit per duration column of a whole table (filters never change a header)."""
    out = {}
    for key, _name, field in keys:
        if field is not None:
            out[key] = scale(r[field] for r in rows)  # null on a CPU-only run's device columns
        elif per_step == "self":
            out[key] = scale(r["self_us"] / n for r in rows if n)
        else:
            out[key] = scale(r["per_step_us"] for r in rows)
    return out


def _tops(doc: Doc, which: str) -> list[Doc]:
    return list((doc.get("tops") or {}).get(which, []))


def step_units(doc: Doc) -> dict[str, Scale]:
    return _units(doc["steps"], _STEP_KEYS, None, 0)


def top_op_units(doc: Doc) -> dict[str, Scale]:
    return _units(_tops(doc, "ops"), _OP_KEYS, "self", len(doc["steps"]))


def top_kernel_units(doc: Doc) -> dict[str, Scale]:
    return _units(_tops(doc, "kernels"), _KERNEL_KEYS, "kernel", len(doc["steps"]))


def step_columns(doc: Doc) -> list[dict[str, Any]]:
    """The steps table's columns: no device busy/idle for a CPU-only run."""
    u = step_units(doc)
    return [
        {"id": "name", "name": "step"},
        _num("at_ms", "at (ms)"),
        *(
            _dur(key, name, u[key])
            for key, name, _f in _STEP_KEYS
            if not (cpu_only(doc) and key in DEVICE_STEP_COLUMNS)
        ),
    ]


def top_op_columns(doc: Doc) -> list[dict[str, Any]]:
    u = top_op_units(doc)
    return [
        {"id": "name", "name": "op"},
        _dur("self", "self", u["self"]),
        _num("self_share", "share of window", ".1%"),
        _dur("total", "total", u["total"]),
        _num("count", "calls", ","),
        _num("in_steps", "in steps", ","),
        _dur("per_step", "self per step", u["per_step"]),
    ]


def top_kernel_columns(doc: Doc) -> list[dict[str, Any]]:
    u = top_kernel_units(doc)
    return [
        {"id": "name", "name": "kernel"},
        _dur("total", "total", u["total"]),
        _num("busy_share", "share of device busy", ".1%"),
        _num("count", "calls", ","),
        _dur("mean", "mean", u["mean"]),
        {"id": "tensor_cores", "name": "tensor cores"},
        _dur("per_step", "per step", u["per_step"]),
    ]


def top_op_rows(doc: Doc, limit: int | None = None) -> list[dict[str, Any]]:
    """The JSON's top ops (by self time) with their share of the window and self time per step."""
    window = doc["window"]["dur_us"]
    steps = len(doc["steps"])
    u = top_op_units(doc)
    return [
        {
            "name": r["name"],
            "self": u["self"].value(r["self_us"]),
            "self_share": r["self_us"] / window if window else None,
            "total": u["total"].value(r["total_us"]),
            "count": r["count"],
            "in_steps": r["in_steps"],
            "per_step": u["per_step"].value(r["self_us"] / steps) if steps else None,
        }
        for r in _tops(doc, "ops")[:limit]
    ]


def top_kernel_rows(doc: Doc) -> list[dict[str, Any]]:
    """The JSON's top kernels (by device time) with their share of the device's busy time."""
    busy = doc["summary"].get("device_busy_us") or 0.0
    tc = {True: "yes", False: "no", None: "not a GEMM"}
    u = top_kernel_units(doc)
    return [
        {
            "name": display_name(r["name"]),  # the JSON keeps the raw (mangled) name
            "total": u["total"].value(r["total_us"]),
            "busy_share": r["total_us"] / busy if busy else None,
            "count": r["count"],
            "mean": u["mean"].value(r["mean_us"]),
            "tensor_cores": tc[r["tensor_cores"]],
            "per_step": u["per_step"].value(r["per_step_us"]),
        }
        for r in _tops(doc, "kernels")
    ]


def show(trace_id: str | None, claim_id: str) -> str:
    """A table cell's "show" link (markdown) to the timeline opened at a claim; "" without a trace."""
    return f"[show](/trace/{trace_id}/timeline?claim={claim_id})" if trace_id else ""


def sync_rows(
    doc: Doc,
    kinds: list[str] | None,
    avoidable_only: bool,
    min_wait_us: float | None,
    trace_id: str | None = None,
) -> list[dict[str, Any]]:
    t0 = doc["window"]["start_us"]
    u = _scales(doc)
    out = []
    for i, s in enumerate(doc["syncs"]):
        if kinds and s["kind"] not in kinds:
            continue
        if avoidable_only and not s["avoidable"]:
            continue
        if min_wait_us and s["wait_us"] < min_wait_us:
            continue
        out.append(
            {
                "at_ms": (s["start_us"] - t0) / 1000,
                "kind": s["kind"],
                "api": s["api"],
                "op": s.get("op") or NO_OP,
                "wait": u["wait"].value(s["wait_us"]),
                "bubble": u["bubble"].value(s["bubble_us"]),
                "avoidable": "yes" if s["avoidable"] else "no",
                "reason": ", ".join(s.get("reason") or []),
                "site": site_text(s.get("call_site")) or NO_SITE,
                "show": show(trace_id, f"sync-{i}"),
            }
        )
    return out


def gap_rows(
    doc: Doc, causes: list[str] | None, min_dur_us: float | None, trace_id: str | None = None
) -> list[dict[str, Any]]:
    """The gaps that pass the filters, the largest idle first (ties: in time order); each row's "show"
    link names the gap by its index in the JSON's ``gaps``."""
    t0 = doc["window"]["start_us"]
    idle = _scales(doc)["idle"]
    gaps = sorted(enumerate(doc["gaps"]), key=lambda ig: (-ig[1]["dur_us"], ig[1]["start_us"]))
    return [
        {
            "device": g["device"],
            "idle": idle.value(g["dur_us"]),
            "at_ms": (g["start_us"] - t0) / 1000,
            "cause": g["cause"],
            "detail": g.get("detail") or "",
            "site": site_text(g.get("call_site")) or "—",
            "show": show(trace_id, f"gap-{i}"),
        }
        for i, g in gaps
        if (not causes or g["cause"] in causes) and not (min_dur_us and g["dur_us"] < min_dur_us)
    ]


def step_rows(doc: Doc, search: str | None) -> list[dict[str, Any]]:
    t0 = doc["window"]["start_us"]
    needle = (search or "").strip().lower()
    device = not cpu_only(doc)
    u = step_units(doc)
    return [
        {
            "name": s["name"],
            "at_ms": (s["start_us"] - t0) / 1000,
            **{
                key: u[key].value(s[field])
                for key, _name, field in _STEP_KEYS
                if device or key not in DEVICE_STEP_COLUMNS
            },
        }
        for s in doc["steps"]
        if needle in s["name"].lower()
    ]


def _table(tid: Ids, columns: list[dict[str, Any]], data: list[dict[str, Any]]) -> Any:
    return data_table(
        id=tid.value,
        columns=columns,
        data=data,
        sort_action="native",
        page_size=100,
        markdown_options={"link_target": "_self"},  # "show" opens the timeline in this tab
    )


def _page(entry: Entry, tab: str, controls: list[Any], table: Any, n: int) -> html.Div:
    return html.Div(
        [
            trace_nav(entry, tab),
            dcc.Store(id=Ids.TRACE.value, data=entry.id),
            html.Div(
                [*controls, html.Span(f"{n:,} rows", id=Ids.COUNT.value, className="muted")],
                className="ss-toolbar",
            ),
            table,
        ]
    )


def syncs_layout(services: Services, entry: Entry) -> html.Div:
    doc = services.store.analysis(entry.id)
    kinds = sorted({s["kind"] for s in doc["syncs"]})
    controls = [
        dcc.Dropdown(
            kinds,
            multi=True,
            id=Ids.SYNC_KIND.value,
            placeholder="kind",
            style={"width": "320px", "display": "inline-block"},
        ),
        dcc.Checklist(
            [{"label": " avoidable only", "value": "yes"}],
            [],
            id=Ids.SYNC_AVOIDABLE.value,
            inline=True,
            style={"display": "inline-block", "marginLeft": "10px"},
        ),
        dcc.Input(
            id=Ids.SYNC_MIN_WAIT.value,
            type="number",
            min=0,
            placeholder="min wait µs",
            debounce=True,
            style={"marginLeft": "10px"},
        ),
    ]
    rows = sync_rows(doc, None, False, None, entry.id)
    return _page(entry, "/syncs", controls, _table(Ids.SYNC_TABLE, sync_columns(doc), rows), len(rows))


def gaps_layout(services: Services, entry: Entry) -> html.Div:
    doc = services.store.analysis(entry.id)
    causes = sorted({g["cause"] for g in doc["gaps"]})
    controls = [
        dcc.Dropdown(
            causes,
            multi=True,
            id=Ids.GAP_CAUSE.value,
            placeholder="cause",
            style={"width": "320px", "display": "inline-block"},
        ),
        dcc.Input(
            id=Ids.GAP_MIN_DUR.value,
            type="number",
            min=0,
            placeholder="min idle µs",
            debounce=True,
            style={"marginLeft": "10px"},
        ),
    ]
    rows = gap_rows(doc, None, None, entry.id)
    return _page(entry, "/gaps", controls, _table(Ids.GAP_TABLE, gap_columns(doc), rows), len(rows))


def steps_layout(services: Services, entry: Entry) -> html.Div:
    doc = services.store.analysis(entry.id)
    controls = [dcc.Input(id=Ids.STEP_SEARCH.value, type="search", placeholder="step name", debounce=True)]
    rows = step_rows(doc, None)
    return _page(entry, "/steps", controls, _table(Ids.STEP_TABLE, step_columns(doc), rows), len(rows))


def tops_layout(services: Services, entry: Entry) -> html.Div:
    """The host ops with the most self time and the kernels with the most device time (``tops``)."""
    doc = services.store.analysis(entry.id)
    ops, kernels = top_op_rows(doc), top_kernel_rows(doc)
    parts: list[Any] = [
        trace_nav(entry, "/tops"),
        html.H3("Host ops by self time"),
        _table(Ids.TOP_OPS, top_op_columns(doc), ops)
        if ops
        else html.P("No host ops in the window.", className="muted"),
    ]
    if kernels or not cpu_only(doc):
        parts += [
            html.H3("Kernels by device time"),
            _table(Ids.TOP_KERNELS, top_kernel_columns(doc), kernels)
            if kernels
            else html.P("No kernels in the window.", className="muted"),
        ]
    return html.Div(parts)


def _filtered(services: Services, trace_id: str, build: Any) -> tuple[Any, str]:
    try:
        rows = build(services.store.analysis(trace_id))
    except StoreError as exc:
        return [], str(exc)
    return rows, f"{len(rows):,} rows"


def register(app: Dash, services: Services) -> None:
    @app.callback(
        Output(Ids.SYNC_TABLE.value, "data"),
        Output(Ids.COUNT.value, "children", allow_duplicate=True),
        Input(Ids.SYNC_KIND.value, "value"),
        Input(Ids.SYNC_AVOIDABLE.value, "value"),
        Input(Ids.SYNC_MIN_WAIT.value, "value"),
        State(Ids.TRACE.value, "data"),
        prevent_initial_call=True,
    )
    def syncs(
        kinds: list[str] | None, avoidable: list[str] | None, min_wait: float | None, trace_id: str
    ) -> Any:
        return _filtered(
            services, trace_id, lambda d: sync_rows(d, kinds, bool(avoidable), min_wait, trace_id)
        )

    @app.callback(
        Output(Ids.GAP_TABLE.value, "data"),
        Output(Ids.COUNT.value, "children", allow_duplicate=True),
        Input(Ids.GAP_CAUSE.value, "value"),
        Input(Ids.GAP_MIN_DUR.value, "value"),
        State(Ids.TRACE.value, "data"),
        prevent_initial_call=True,
    )
    def gaps(causes: list[str] | None, min_dur: float | None, trace_id: str) -> Any:
        return _filtered(services, trace_id, lambda d: gap_rows(d, causes, min_dur, trace_id))

    @app.callback(
        Output(Ids.STEP_TABLE.value, "data"),
        Output(Ids.COUNT.value, "children", allow_duplicate=True),
        Input(Ids.STEP_SEARCH.value, "value"),
        State(Ids.TRACE.value, "data"),
        prevent_initial_call=True,
    )
    def steps(search: str | None, trace_id: str) -> Any:
        return _filtered(services, trace_id, lambda d: step_rows(d, search))
