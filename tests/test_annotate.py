"""``stallscope annotate``: the original trace kept event for event, the analysis added as tracks that
match the analysis' own numbers, arrows in matched pairs bound to the trace's slices, hostile text kept as
text. The command and the dashboard's download: test_annotate_cli.py."""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from _kineto import SAMPLES
from synth.trace import SynthTrace

from stallscope.analyzer.analysis import Analysis, analyze
from stallscope.analyzer.document import annotate as annotate_module
from stallscope.analyzer.document.analysis import to_json
from stallscope.analyzer.document.annotate import (
    Annotated,
    anchors_of,
    awaited_by_sync,
    write_annotated,
)
from stallscope.analyzer.document.tracks import ANALYSIS_PROCESS, CATEGORY, FLOW_NAME
from stallscope.analyzer.load.loader import load

ITEM = SAMPLES / "item_in_loop.pt.trace.json.gz"
HOSTILE = '<script>alert("x")</script> \'q\' "dq" \\ ünïcødé ⚡ },{ '


def read_json(path: Path) -> Any:
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def annotated(
    trace: Path, out: Path, syncs: bool = False, anchored: bool = True
) -> tuple[Analysis, dict[str, Any], Annotated]:
    """Analyse ``trace`` and write it annotated to ``out`` (``syncs``: with each sync's awaited activity;
    ``anchored``: arrows placed inside the lanes' slices, as the command does)."""
    a = analyze(load(trace, use_cache=False))
    doc = to_json(a)
    awaited = awaited_by_sync(a) if syncs else None
    anchors = anchors_of(doc, a.model.events, awaited) if anchored else None
    return a, doc, write_annotated(trace, doc, a.model.lanes, out, awaited=awaited, anchors=anchors)


def arrows_bind_to_slices(original: list[Any], added: list[Any]) -> None:
    """Every arrow end lies strictly inside a slice of the trace on its thread (where Perfetto UI and
    chrome://tracing bind it), and every arrow is an s/f pair."""
    slices: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for e in original:
        if isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("dur"), int | float):
            slices[(str(e.get("pid")), str(e.get("tid")))].append((e["ts"], e["ts"] + e["dur"]))
    pairs: dict[Any, list[str]] = defaultdict(list)
    for e in added:
        if e["ph"] in ("s", "f"):
            pairs[e["id"]].append(e["ph"])
            assert e["ph"] == "s" or e["bp"] == "e"
            inside = [b < e["ts"] < end for b, end in slices[(str(e["pid"]), str(e["tid"]))]]
            assert any(inside), e
    assert all(sorted(p) == ["f", "s"] for p in pairs.values())


def split(trace: Path, out: Path) -> tuple[list[Any], list[Any], int]:
    """(original events, added events, the analysis pid) of an annotated file."""
    doc, original = read_json(out), read_json(trace)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    n = len(original["traceEvents"] if isinstance(original, dict) else original)
    added = events[n:]
    pid = next(e["pid"] for e in added if e.get("name") == "process_name")
    return events[:n], added, pid


def thread_names(added: list[Any]) -> dict[int, str]:
    return {e["tid"]: e["args"]["name"] for e in added if e["ph"] == "M" and e["name"] == "thread_name"}


def on_track(added: list[Any], prefix: str) -> list[Any]:
    names = thread_names(added)
    return [e for e in added if e["ph"] == "X" and names.get(e["tid"], "").startswith(prefix)]


# ----- the original is kept ---------------------------------------------------------------------------


def test_every_original_event_and_top_level_key_is_kept_exactly(tmp_path: Path) -> None:
    # GIVEN the item-in-loop sample, WHEN annotated to .json.gz
    out = tmp_path / "a.json.gz"
    _, _, written = annotated(ITEM, out)
    # THEN it is gzip, and the original document's events come first, unchanged and in order
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    original, result = read_json(ITEM), read_json(out)
    n = len(original["traceEvents"])
    assert written.original_events == n and written.streamed
    assert result["traceEvents"][:n] == original["traceEvents"]
    # AND every top-level key is there, in order, with its value
    assert list(result) == list(original)
    assert {k: v for k, v in result.items() if k != "traceEvents"} == {
        k: v for k, v in original.items() if k != "traceEvents"
    }
    # AND every added event is in the analysis' own process, whose pid no original event uses
    added = result["traceEvents"][n:]
    pid = next(e["pid"] for e in added if e.get("name") == "process_name")
    assert {e["pid"] for e in added if e["ph"] in "MXi"} == {pid}
    assert str(pid) not in {str(e.get("pid")) for e in original["traceEvents"]}
    assert any(e["ph"] == "M" and e.get("args", {}).get("name") == ANALYSIS_PROCESS for e in added)


def test_the_copy_is_byte_for_byte_in_pieces_and_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a trace cut into many small pieces (the streaming copy), and the same rewritten whole
    monkeypatch.setattr(annotate_module, "PIECE_BYTES", 4096)
    a = analyze(load(ITEM, use_cache=False))
    doc = to_json(a)
    streamed = write_annotated(ITEM, doc, a.model.lanes, tmp_path / "s.json")
    original = gzip.decompress(ITEM.read_bytes())
    text = (tmp_path / "s.json").read_bytes()
    # THEN the streamed copy holds the original's text up to its last event verbatim (bar the spaces
    # before a separating comma), and both copies decode to the same document
    assert streamed.streamed
    last = original.rindex(b"}", 0, original.rindex(b"]"))
    body = original[: last + 1]
    assert text.replace(b",\n", b",").startswith(body.replace(b",\n", b",").replace(b" ,", b","))
    monkeypatch.setattr(annotate_module, "_copy_streamed", annotate_module._copy_whole)
    whole = write_annotated(ITEM, doc, a.model.lanes, tmp_path / "w.json")
    assert read_json(tmp_path / "w.json") == read_json(tmp_path / "s.json")
    assert whole.original_events == streamed.original_events


def test_elements_the_loader_skips_are_kept_too(tmp_path: Path) -> None:
    # GIVEN a trace whose event list also holds a number, a string and an event with a number out of range
    text = gzip.decompress(ITEM.read_bytes()).decode()
    at = text.index('"traceEvents": [') + len('"traceEvents": [')
    trace = tmp_path / "odd.json"
    trace.write_text(text[:at] + '1, "text", {"ph": "X", "name": "big", "ts": 1e400, "dur": 1},' + text[at:])
    out = tmp_path / "a.json"
    _, _, written = annotated(trace, out)
    # THEN they are copied as they were, with every other event
    original, _, _ = split(trace, out)
    assert original[:2] == [1, "text"] and original[2]["ts"] == math.inf
    assert original == read_json(trace)["traceEvents"] and written.original_events == len(original)
    assert b'"ts": 1e400' in out.read_bytes()


@pytest.mark.parametrize("whole", [False, True])
def test_a_bare_event_list_stays_a_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, whole: bool) -> None:
    if whole:  # the same through the whole-document rewrite
        monkeypatch.setattr(annotate_module, "_copy_streamed", annotate_module._copy_whole)
    trace = tmp_path / "bare.json"
    trace.write_text(json.dumps(read_json(ITEM)["traceEvents"]))
    out = tmp_path / "a.json.gz"
    _, doc, written = annotated(trace, out)
    result = read_json(out)
    assert isinstance(result, list)
    n = written.original_events
    assert (
        result[:n] == read_json(trace)
        and len(on_track(result[n:], "critical path")) == doc["critical_path"]["segments"]["count"]
    )


def test_the_output_loads_with_stallscopes_own_loader(tmp_path: Path) -> None:
    out = tmp_path / "a.json.gz"
    a, _, written = annotated(ITEM, out)
    again = load(out, use_cache=False).models[0]
    # the original events are all there; the added slices and instants are of a category it keeps apart
    assert again.event_count >= a.model.event_count
    added = sum(written.added.slices.values()) + written.added.instants
    assert again.report.unknown_categories.get(CATEGORY, 0) <= added


# ----- the added tracks are the analysis' numbers ------------------------------------------------------


def test_critical_path_slices_add_up_to_the_breakdown(tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    _, doc, _ = annotated(ITEM, out)
    _, added, _ = split(ITEM, out)
    slices = on_track(added, "critical path")
    assert len(slices) == doc["critical_path"]["segments"]["count"] > 0
    per_kind: dict[str, float] = defaultdict(float)
    for s in slices:
        assert s["name"] == s["args"]["kind"]
        per_kind[s["name"]] += s["dur"]
    for kind, us in doc["critical_path"]["breakdown_us"].items():
        assert math.isclose(per_kind.get(kind, 0.0), us, rel_tol=1e-9, abs_tol=1e-6), kind
    # and a device segment names its kernel and lane
    device = [s for s in slices if s["name"] == "device"]
    assert device and all(s["args"]["event"] and "stream" in s["args"]["lane"] for s in device)


def test_gap_and_sync_tracks_match_the_analysis(tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    _, doc, written = annotated(ITEM, out)
    _, added, _ = split(ITEM, out)
    gaps, syncs = on_track(added, "idle gaps"), on_track(added, "syncs")
    assert len(gaps) == len(doc["gaps"]) > 0 and len(syncs) == len(doc["syncs"]) > 0
    assert written.added.slices["gaps"] == len(gaps) and written.added.slices["syncs"] == len(syncs)
    assert sorted((g["ts"], g["dur"], g["name"]) for g in gaps) == sorted(
        (g["start_us"], g["dur_us"], g["cause"]) for g in doc["gaps"]
    )
    assert Counter(g["args"]["cause"] for g in gaps) == Counter(g["cause"] for g in doc["gaps"])
    assert sorted((s["ts"], s["dur"], s["name"]) for s in syncs) == sorted(
        (s["start_us"], s["wait_us"], s["kind"]) for s in doc["syncs"]
    )
    # the item() syncs carry their call site
    assert {s["args"]["call_site"] for s in syncs if s["name"] == "scalar_read"} == {
        "train.py:42 in train_step"
    }


def test_findings_are_instants_with_title_and_advice_at_their_call_site(tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    _, doc, _ = annotated(ITEM, out)
    _, added, _ = split(ITEM, out)
    instants = [e for e in added if e["ph"] == "i"]
    assert len(instants) == len(doc["findings"]) > 0
    assert [(e["args"]["title"], e["args"]["advice"]) for e in instants] == [
        (f["title"], f["advice"]) for f in doc["findings"]
    ]
    first_item = min(s["start_us"] for s in doc["syncs"] if s["kind"] == "scalar_read")
    at_site = [e for e in instants if e["args"]["call_site"] == "train.py:42 in train_step"]
    assert at_site and all(e["ts"] == first_item for e in at_site)
    assert all(e["s"] == "p" and e["cat"] == CATEGORY for e in instants)  # the analysis process's markers


def test_flows_are_matched_pairs_between_the_traces_own_threads(tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    _, doc, written = annotated(ITEM, out)
    original, added, _ = split(ITEM, out)
    flows = [e for e in added if e["ph"] in ("s", "f")]
    pairs: dict[Any, list[Any]] = defaultdict(list)
    for e in flows:
        assert (e["cat"], e["name"]) == (CATEGORY, FLOW_NAME)
        pairs[e["id"]].append(e)
    assert all(sorted(x["ph"] for x in p) == ["f", "s"] for p in pairs.values())
    seg = doc["critical_path"]["segments"]
    crossings = sum(1 for x, y in zip(seg["lane"], seg["lane"][1:], strict=False) if x != y)
    assert len(pairs) == written.added.flows == crossings > 0
    # their ids are not the trace's own flow ids, and both ends sit on threads of the trace's events
    assert not set(pairs) & {e.get("id") for e in original if e.get("ph") in ("s", "f")}
    threads = {(e.get("pid"), e.get("tid")) for e in original}
    assert all((e["pid"], e["tid"]) in threads for e in flows)
    # each goes forward in time and binds to a slice at both ends
    for p in pairs.values():
        s, f = sorted(p, key=lambda x: x["ph"] != "s")
        assert s["ts"] <= f["ts"]
    arrows_bind_to_slices(original, added)
    # without the model's slices (a caller with the document only), the same arrows, at the segments
    _, _, plain = annotated(ITEM, tmp_path / "plain.json", anchored=False)
    assert plain.added.flows == written.added.flows


def test_a_syncs_wait_already_on_the_critical_path_gets_no_second_arrow(tmp_path: Path) -> None:
    # GIVEN the item-in-loop sample, whose every sync's wait is a step of the critical path
    _, _, plain = annotated(ITEM, tmp_path / "a.json")
    _, _, with_syncs = annotated(ITEM, tmp_path / "b.json", syncs=True)
    # THEN the syncs' own arrows add nothing: the critical path's already join the same two slices
    assert with_syncs.added.sync_flows == 0 and with_syncs.added.flows == plain.added.flows > 0


@pytest.mark.shared
def test_syncs_off_the_critical_path_get_an_arrow_from_what_they_waited_for(
    shared_traces: Path, tmp_path: Path
) -> None:
    # the .item() and .cpu() syncs of a three-thread trace, several of them off the critical path
    trace = shared_traces / "field" / "hta_trace_diff_control.pt.trace.json.gz"
    if not trace.is_file():
        pytest.skip(f"{trace} not present")
    out = tmp_path / "a.json.gz"
    _, doc, written = annotated(trace, out, syncs=True)
    original, added, _ = split(trace, out)
    seg = doc["critical_path"]["segments"]
    crossings = sum(1 for x, y in zip(seg["lane"], seg["lane"][1:], strict=False) if x != y)
    assert written.added.sync_flows > 0 and written.added.flows == crossings + written.added.sync_flows
    by_id: dict[Any, list[Any]] = defaultdict(list)
    for e in added:
        if e["ph"] in ("s", "f"):
            by_id[e["id"]].append(e)
    pairs = [sorted(p, key=lambda x: x["ph"] != "s") for p in by_id.values()]  # (s, f)
    sync_pairs = [(s, f) for s, f in pairs if "sync" in s["args"]]  # a sync's arrow names its kind
    assert len(sync_pairs) == written.added.sync_flows
    waits = [(s["start_us"], s["start_us"] + s["wait_us"], s["kind"]) for s in doc["syncs"]]
    for s, f in sync_pairs:
        # it starts inside a device activity of the trace, on that activity's stream
        assert any(
            e.get("pid") == s["pid"] and e.get("tid") == s["tid"] and e["ts"] <= s["ts"] < e["ts"] + e["dur"]
            for e in original
            if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
        )
        # and ends inside the wait of a sync of its kind, on the host thread
        assert any(lo <= f["ts"] <= hi and kind == s["args"]["sync"] for lo, hi, kind in waits)
        assert s["ts"] <= f["ts"]


def test_arrows_find_streams_written_under_another_tid(tmp_path: Path) -> None:
    # GIVEN an older Kineto layout: device activity under "tid": "stream 7" (the loader keys it by
    # args.stream, 7)
    doc = read_json(ITEM)
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            e["tid"] = f"stream {e['tid']}"
    trace = tmp_path / "old.json"
    trace.write_text(json.dumps(doc))
    out = tmp_path / "a.json"
    _, _, written = annotated(trace, out)
    # THEN every arrow is placed, its device end on the thread the kernels are written under
    _, added, _ = split(trace, out)
    assert written.added.flows > 0 and written.added.flows_unplaced == 0
    ends = {e["tid"] for e in added if e["ph"] in "sf" and e["pid"] == 0}
    assert ends == {"stream 7"}


# ----- real traces -------------------------------------------------------------------------------------


@pytest.mark.shared
def test_an_ns_unit_trace_lines_up_with_its_own_kernels(shared_traces: Path, tmp_path: Path) -> None:
    # GIVEN a trace that says displayTimeUnit "ns" (its ts are µs with fractions, as Kineto writes them)
    trace = shared_traces / "hta_v100_ns_resolution_rank0.pt.trace.json.gz"
    out = tmp_path / "ns.json.gz"
    _, doc, _ = annotated(trace, out)
    original, added, _ = split(trace, out)
    assert read_json(out)["displayTimeUnit"] == read_json(trace)["displayTimeUnit"] == "ns"
    # THEN every device segment of the critical path lies inside an activity of that name, at its times
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for e in original:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            spans[e["name"]].append((e["ts"], e["ts"] + e["dur"]))
    device = [s for s in on_track(added, "critical path") if s["name"] == "device"]
    assert len(device) > 100
    for s in device:
        inside = [b <= s["ts"] and s["ts"] + s["dur"] <= e + 1e-3 for b, e in spans[s["args"]["event"]]]
        assert any(inside), s
    # AND the gaps lie between kernels, inside the window
    w = doc["window"]
    assert all(
        w["start_us"] <= g["ts"] and g["ts"] + g["dur"] <= w["end_us"] for g in on_track(added, "idle gaps")
    )


@pytest.mark.shared
@pytest.mark.parametrize(
    "name",
    [
        "hta_a100_item_event_sync.pt.trace.json.gz",
        "hta_a100_multistream_event_sync.pt.trace.json.gz",
        "field/kineto_v100_resnet50_nw0.pt.trace.json.gz",  # old layout; hand-offs between threads
        "field/tracelens_mi300_resnet_act_checkpoint.pt.trace.json.gz",  # streams idle waiting on streams
    ],
)
def test_real_traces_keep_every_event(shared_traces: Path, tmp_path: Path, name: str) -> None:
    trace = shared_traces / name
    out = tmp_path / "r.json.gz"
    _, doc, written = annotated(trace, out, syncs=True)
    original, added, _ = split(trace, out)
    assert original == read_json(trace)["traceEvents"] and written.original_events == len(original)
    assert len(on_track(added, "syncs")) == len(doc["syncs"])
    assert written.added.flows > 0 and written.added.flows_unplaced == 0
    arrows_bind_to_slices(original, added)


# ----- hostile text --------------------------------------------------------------------------------------


def hostile_trace(path: Path) -> Path:
    sc = SynthTrace("hostile", pid=77, tid=77)
    with sc.py_frame("train.py", 10, "main"):
        for _ in range(2):
            with sc.step(), sc.py_frame('tr"ain<b>.py', 42, HOSTILE):
                with sc.op("aten::linear"):
                    sc.launch(HOSTILE, 300.0)
                sc.item(avoidable=True, reasons=("repeated",))
                sc.host("log", 100.0, cat="user_annotation")
        sc.synchronize()
    doc = sc.to_document()
    # the last event's name holds "},{": the last place the copy would cut is inside a string
    last = doc["traceEvents"][-1]
    doc["traceEvents"].append(
        {"ph": "i", "s": "t", "name": HOSTILE, "pid": 77, "tid": 77, "ts": last.get("ts", 0)}
    )
    path.write_text(json.dumps(doc, ensure_ascii=False, indent=1), encoding="utf-8")
    return path


def test_hostile_names_stay_json_strings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a kernel and a python frame whose names hold markup, quotes, backslashes, unicode and '},{'
    trace = hostile_trace(tmp_path / "hostile.json")
    monkeypatch.setattr(annotate_module, "PIECE_BYTES", 64)  # cut wherever it can
    out = tmp_path / "h.json"
    _, _, written = annotated(trace, out)
    # THEN the copy, whose cut fell inside a name, was rewritten whole instead, still exact
    assert not written.streamed
    original, added, _ = split(trace, out)
    assert original == read_json(trace)["traceEvents"]
    # AND the names come back as the same strings (JSON-escaped in the file, never bare markup quotes)
    assert HOSTILE in {s["args"]["event"] for s in on_track(added, "critical path")}
    assert any(HOSTILE in (f["args"]["call_site"] or "") for f in on_track(added, "syncs"))
    raw = out.read_bytes().decode()
    assert 'alert(\\"x\\")' in raw and "ünïcødé ⚡" in raw
