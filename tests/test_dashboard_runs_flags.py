"""What flags a capture of a long run, on hand-made catalog entries (no analysis runs): the step-time
threshold against the last good capture, a rule new to the run, a new bottleneck; a run that recovers;
entries catalogued before the run fields, a capture whose time is not one, captures still being
analysed; the traces page's run row acting on every capture."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from dash import no_update

from stallscope.dashboard import runs
from stallscope.dashboard.pages import run as run_page
from stallscope.dashboard.pages import traces
from stallscope.dashboard.services import Services
from stallscope.dashboard.store import Entry, Status, Store

ITEM = Path(__file__).resolve().parent.parent / "sample_traces" / "item_in_loop.pt.trace.json.gz"


def entry(
    n: int,
    step_us: float | None = 1000.0,
    bottleneck: str = "device",
    rules: tuple[str, ...] = (),
    run_id: str = "r1",
    at: str | None = None,
    status: Status = Status.READY,
    uploaded_at: float | None = None,
) -> Entry:
    """GIVEN capture ``n`` of ``run_id`` (taken at 0n:00, uploaded in reverse order unless told)."""
    summary: dict[str, Any] | None = {
        "device_utilization": 0.5,
        "bottleneck": bottleneck,
        "cpu_only": False,
        "capture": {
            "run_id": run_id,
            "index": n,
            "at": at if at is not None else f"2026-12-02T0{n}:00:00Z",
            "trigger": "every",
            "steps": None,
        },
        "step_us": step_us,
        "step_count": 3,
        "top_findings": [{"rule": r, "title": f"`{r}` title", "est_saving_us": 10.0} for r in rules],
        "finding_rules": sorted(rules),
    }
    if status is not Status.READY:
        summary = None
    at_upload = uploaded_at if uploaded_at is not None else 100.0 - n
    return Entry(f"{n:032x}", f"c{n}.tar.gz", at_upload, 1, status, "", "", (f"run:{run_id}",), summary)


def flags(*entries: Entry, threshold: float = 0.2) -> list[list[str] | None]:
    run = runs.history(list(entries), "r1", threshold)
    return [None if c.flag is None else [ch.kind for ch in c.flag.changes] for c in run.captures]


def test_step_time_is_compared_with_the_last_good_capture() -> None:
    # 1.0 ms, 1.1 ms (+10%: fine), 1.35 ms (+23% on 1.1: flagged), 1.3 ms (+18% on 1.1: fine again)
    got = flags(entry(1, 1000), entry(2, 1100), entry(3, 1350), entry(4, 1300))
    assert got == [None, None, ["step_time"], None]
    run = runs.history([entry(1, 1000), entry(2, 1100), entry(3, 1350)], "r1")
    flag = run.captures[2].flag
    assert flag is not None and (flag.against_index, flag.against_id) == (2, f"{2:032x}")
    assert flag.changes[0].text == "step time 1.10 ms → 1.35 ms (+23%)"


def test_a_regression_stays_flagged_until_the_run_is_back() -> None:
    # 3 and 4 are slow against 2; 5 is back (faster), and is the baseline of 6: +28% on 5, +15% on 2
    got = flags(entry(1, 1000), entry(2, 1000), entry(3, 2000), entry(4, 1900), entry(5, 900), entry(6, 1150))
    assert got == [None, None, ["step_time"], ["step_time"], None, ["step_time"]]


def test_exactly_the_threshold_is_not_a_change_and_the_threshold_can_be_set() -> None:
    assert flags(entry(1, 1000), entry(2, 1200)) == [None, None]
    assert flags(entry(1, 1000), entry(2, 1201)) == [None, ["step_time"]]
    assert flags(entry(1, 1000), entry(2, 1201), threshold=0.5) == [None, None]


def test_a_rule_is_new_once_and_a_bottleneck_against_the_last_good_one() -> None:
    got = flags(
        entry(1, rules=("a",)),
        entry(2, rules=("a", "b")),  # b is new
        entry(3, rules=("b",)),  # b was seen in 2 (flagged or not): nothing new
        entry(4, bottleneck="host"),  # the last good (1) was device-bound
        entry(5, bottleneck="host"),  # still not the last good capture's bottleneck
    )
    assert got == [None, ["new_finding"], None, ["bottleneck"], ["bottleneck"]]
    run = runs.history([entry(1), entry(2, bottleneck="host")], "r1")
    change = run.captures[1].flag.changes[0]  # type: ignore[union-attr]
    assert (change.text, change.before, change.after) == ("bottleneck device → host", "device", "host")


def test_order_is_the_capture_time_then_the_upload_time_when_it_is_not_a_time() -> None:
    odd = entry(9, at="yesterday", uploaded_at=2e9)  # after every capture taken in 2026
    run = runs.history([entry(2), odd, entry(1)], "r1")
    assert [c.index for c in run.captures] == [1, 2, 9]
    assert run.captures[2].at == run.captures[2].time_text == "yesterday"
    assert run.captures[0].time_text == "2026-12-02 01:00:00"


def test_captures_without_an_analysis_are_listed_apart_by_their_tag() -> None:
    pending = entry(3, status=Status.PENDING)
    failed = entry(4, status=Status.ERROR)
    run = runs.history([pending, entry(1), failed], "r1")
    assert [c.index for c in run.captures] == [1] and run.others == (pending, failed)
    assert run.to_json()["others"][0] == {
        "id": pending.id,
        "name": "c3.tar.gz",
        "url": f"/trace/{pending.id}",
        "status": "pending",
        "error": "",
    }
    row = traces.run_row("r1", [pending, entry(1), failed])
    assert row["run"] == "1 capture, 2 not analysed" and row["status"] == "error, pending"


def test_old_entries_and_plain_uploads_are_rows_as_before() -> None:
    old = Entry("a" * 32, "old.json.gz", 1.0, 1, Status.READY, "", "", (), {"bottleneck": "host"})
    tagged_only = Entry("b" * 32, "t.json.gz", 2.0, 1, Status.READY, "", "", ("run:r1",), {"capture": None})
    table = traces.rows([old, tagged_only], "")
    assert [(r["id"], r["run"], r["bottleneck"]) for r in table] == [
        (old.id, "", "host"),
        (tagged_only.id, "", "-"),
    ]
    with pytest.raises(runs.UnknownRun):
        runs.history([old, tagged_only], "r1")


@pytest.mark.parametrize("text", ["", ".", "..", "a/b", "a b", "é", "x" * 129, "<b>", "a\n", "%2e"])
def test_run_ids_of_another_shape_are_refused_without_being_repeated(text: str) -> None:
    with pytest.raises(runs.BadRunId) as err:
        runs.check_run_id(text)
    assert str(err.value) == str(runs.BadRunId.shape())  # the same line whatever the text
    assert str(err.value).startswith("not a run id")


@pytest.mark.parametrize("text", ["r", "...", ".x", "_train.py-20261202-010000-a1b2c3", "x" * 128])
def test_run_ids_of_the_shape_capture_makes_are_taken(text: str) -> None:
    assert runs.check_run_id(text) == text
    assert runs.run_url(text) == f"/runs/{text}"


def test_the_traces_page_deletes_and_pins_a_run_as_its_captures(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    services = Services(store, None, 8 << 20)
    ids = [store.add(f"c{i}", io.BytesIO(ITEM.read_bytes()), 8 << 20, ("run:r1",)).id for i in range(2)]
    plain = store.add("plain", io.BytesIO(ITEM.read_bytes()), 8 << 20).id
    data = traces.rows(store.entries(), "")
    assert [r["id"] for r in data] == [plain, "run:r1"]  # not analysed yet: grouped by their tag
    run_row = data.index(next(r for r in data if r["id"] == "run:r1"))
    # WHEN the run's row is pinned THEN every capture is
    traces.on_table(services, traces.Ids.PIN.value, "", [run_row], data)
    assert [store.get(i).pinned for i in ids] == [True, True] and not store.get(plain).pinned
    # AND it cannot be one side of a comparison
    assert traces.on_compare(1, [0, run_row], data)[0].startswith("a run is a row of captures")
    # WHEN it is deleted THEN every capture goes, the plain upload stays
    traces.on_table(services, traces.Ids.DELETE.value, "", [run_row], data)
    assert [e.id for e in store.entries()] == [plain]


def test_the_run_page_redraws_only_when_its_captures_change(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    services = Services(store, None, 8 << 20)
    first = store.add("c1", io.BytesIO(ITEM.read_bytes()), 8 << 20, ("run:r1",)).id
    page = run_page.layout(services, "r1")
    key = page.children[0].data
    assert key["signature"] == [[first, "pending"]]
    assert run_page.on_tick(services, key) == (no_update, no_update)
    second = store.add("c2", io.BytesIO(ITEM.read_bytes()), 8 << 20, ("run:r1",)).id
    body, new_key = run_page.on_tick(services, key)
    assert new_key["signature"] == sorted([[first, "pending"], [second, "pending"]])
    assert body[1].children == "No capture of this run is analysed yet."
    assert [li.children[0].children for li in body[-1].children] == ["c2", "c1"]  # newest first, linked
