"""What-if page: pick scenarios and see their predicted time (from the analysis JSON), and the device
streams re-timed by the analyzer's replay for one of them."""

from __future__ import annotations

from enum import Enum
from typing import Any

from dash import Dash, Input, Output, State, dcc, html

from stallscope.analyzer.passes.replay import Scenario
from stallscope.dashboard.headline import SCENARIO_LABELS
from stallscope.dashboard.live import retimed
from stallscope.dashboard.pages import figures
from stallscope.dashboard.pages.common import Doc, data_table, message, ms, term_link, trace_nav
from stallscope.dashboard.services import Services
from stallscope.dashboard.store import Entry, StoreError
from stallscope.display.text import pipeline_note

LABELS = SCENARIO_LABELS


class Ids(str, Enum):
    TRACE = "whatif-trace"
    PICK = "whatif-pick"
    BARS = "whatif-bars"
    RETIME = "whatif-retime"
    RETIMED = "whatif-retimed"
    TABLE = "whatif-table"


def rows(doc: Doc, scenarios: list[str]) -> list[dict[str, Any]]:
    wall = float(doc["summary"]["wall_us"]) or 1.0
    return [
        {
            "scenario": LABELS.get(r["scenario"], r["scenario"]),
            "predicted": ms(r["predicted_wall_us"]),
            "saving": ms(r["saving_us"]),
            "share": f"{r['saving_us'] / wall:.0%}",
        }
        for r in doc["whatif"]
        if r["scenario"] in scenarios
    ]


def on_pick(services: Services, trace_id: str, scenarios: list[str] | None) -> tuple[Any, Any]:
    doc = services.store.analysis(trace_id)
    chosen = list(scenarios or [])
    return figures.whatif_bars(doc, chosen, LABELS), rows(doc, chosen)


def on_retime(services: Services, trace_id: str, scenario: str | None) -> Any:
    """The re-timed streams figure, or a message (a trace without a device, an unknown scenario)."""
    if not scenario:
        return html.Div()
    try:
        a = services.live.get(trace_id)
        which = Scenario(scenario)
        before, after = retimed(a, Scenario.AS_RECORDED), retimed(a, which)
    except (StoreError, ValueError) as exc:
        return message(str(exc))
    fig = figures.retimed_figure(a, before, after, LABELS.get(scenario, scenario))
    return dcc.Graph(figure=fig, config={"displaylogo": False})


def pipeline_panel(doc: Doc) -> list[Any]:
    """The two-stage pipeline model's numbers and why its pipelined time can exceed the recorded one."""
    p = doc.get("pipeline")
    if not p:
        return []
    return [
        html.H4(term_link("pipeline", "Pipeline model")),
        html.P(
            f"Host prep P = {ms(p['host_prep_us'])}, device compute G = {ms(p['device_us'])}, "
            f"n = {p['batches']} steps: serial {ms(p['serial_us'])}, pipelined {ms(p['pipelined_us'])}; "
            f"the {p['bottleneck']} is the slower stage.",
            id="whatif-pipeline",
        ),
        html.P(pipeline_note(p, float(doc["window"]["dur_us"])), className="muted"),
    ]


def layout(services: Services, entry: Entry) -> html.Div:
    doc = services.store.analysis(entry.id)
    present = [r["scenario"] for r in doc["whatif"]]
    options = [{"label": f" {LABELS.get(s, s)}", "value": s} for s in present]
    fig, data = on_pick(services, entry.id, present)
    return html.Div(
        [
            trace_nav(entry, "/whatif"),
            dcc.Store(id=Ids.TRACE.value, data=entry.id),
            html.P(
                [
                    "The dependency graph re-timed with changed costs (",
                    term_link("what-if", "what-if scenarios"),
                    "); each saving is against the replay of the unchanged graph.",
                ],
                className="muted",
            ),
            dcc.Checklist(options, present, id=Ids.PICK.value, inline=True),
            dcc.Graph(id=Ids.BARS.value, figure=fig, config={"displaylogo": False}),
            data_table(
                id=Ids.TABLE.value,
                columns=[{"id": k, "name": k} for k in ("scenario", "predicted", "saving", "share")],
                data=data,
            ),
            *pipeline_panel(doc),
            html.H4("Re-timed timeline"),
            dcc.Dropdown(
                [{"label": LABELS.get(s, s), "value": s} for s in present],
                None,
                id=Ids.RETIME.value,
                placeholder="pick a scenario to re-time the device streams",
                style={"width": "420px"},
            ),
            dcc.Loading(html.Div(id=Ids.RETIMED.value)),
        ]
    )


def register(app: Dash, services: Services) -> None:
    @app.callback(
        Output(Ids.BARS.value, "figure"),
        Output(Ids.TABLE.value, "data"),
        Input(Ids.PICK.value, "value"),
        State(Ids.TRACE.value, "data"),
        prevent_initial_call=True,
    )
    def pick(scenarios: list[str] | None, trace_id: str) -> tuple[Any, Any]:
        return on_pick(services, trace_id, scenarios)

    @app.callback(
        Output(Ids.RETIMED.value, "children"),
        Input(Ids.RETIME.value, "value"),
        State(Ids.TRACE.value, "data"),
        prevent_initial_call=True,
    )
    def retime(scenario: str | None, trace_id: str) -> Any:
        return on_retime(services, trace_id, scenario)
