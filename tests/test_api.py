"""The dashboard's HTTP API, against a real server on a free localhost port (always shut down), driven by
the stdlib client that ``stallscope upload`` uses and by hand-made requests for the hostile cases."""

from __future__ import annotations

import json
import statistics
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stallscope.analyzer.analysis import analyze
from stallscope.analyzer.document.analysis import to_json
from stallscope.analyzer.load.loader import load
from stallscope.commands import main
from stallscope.dashboard import client, palette
from stallscope.dashboard.app import Running, create_app, open_services
from stallscope.dashboard.client import UploadError
from stallscope.dashboard.headline import best_saving

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
ITEM = SAMPLES / "item_in_loop.pt.trace.json.gz"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """A dashboard with a 1 MB upload limit, analysing in threads (child processes are exercised by
    the browser test and the benchmark)."""
    services = open_services(tmp_path_factory.mktemp("store"), max_upload_mb=1, processes=False)
    running = Running(create_app(services), "127.0.0.1", 0).start()
    try:
        yield running
    finally:
        running.stop()
        assert services.worker is not None
        services.worker.shutdown()


def call(
    method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            data = r.read()
            return r.status, json.loads(data) if data else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def multipart(filename: str, data: bytes) -> tuple[bytes, dict[str, str]]:
    b = "testboundary"
    body = (
        (
            f'--{b}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{b}--\r\n".encode()
    )
    return body, {"Content-Type": f"multipart/form-data; boundary={b}"}


def test_upload_list_fetch_analysis_delete(server: Running) -> None:
    answer = client.upload(ITEM, server.url)
    trace_id = answer["id"]
    assert answer["url"] == f"{server.url}/trace/{trace_id}"
    entry = client.wait(trace_id, server.url, timeout=120)
    assert entry["status"] == "ready", entry
    status, listing = call("GET", f"{server.url}/api/traces")
    assert status == 200
    (mine,) = [e for e in listing if e["id"] == trace_id]
    assert set(mine) >= {"id", "name", "uploaded_at", "size_bytes", "summary"}
    assert mine["name"] == ITEM.name and mine["size_bytes"] == ITEM.stat().st_size
    expected = to_json(analyze(load(ITEM, use_cache=False)))
    # the catalog's headline numbers
    assert mine["summary"] == {
        **expected["summary"],
        "cpu_only": False,
        "best_saving_us": best_saving(expected)[0],
        # what a run's page shows of a capture (this trace is none)
        "capture": None,
        "step_us": statistics.median(s["dur_us"] for s in expected["steps"]),
        "step_count": len(expected["steps"]),
        "top_findings": [{k: f[k] for k in ("rule", "title", "est_saving_us")} for f in expected["findings"]],
        "finding_rules": sorted({f["rule"] for f in expected["findings"]}),
    }
    status, doc = call("GET", f"{server.url}/api/traces/{trace_id}/analysis")
    assert status == 200 and doc["schema"] == "stallscope.analysis/3"
    assert doc["syncs"] == expected["syncs"] and doc["findings"] == expected["findings"]
    status, _ = call("DELETE", f"{server.url}/api/traces/{trace_id}")
    assert status == 204
    assert call("GET", f"{server.url}/api/traces/{trace_id}/analysis")[0] == 404
    assert trace_id not in [e["id"] for e in call("GET", f"{server.url}/api/traces")[1]]


def test_an_upload_over_the_limit_is_answered_413_with_a_json_error(server: Running, tmp_path: Path) -> None:
    body, headers = multipart("big.json", b" " * (2 << 20))
    status, error = call("POST", f"{server.url}/api/traces", body, headers)
    assert status == 413 and "limit of 1 MB" in error["error"]
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (1 << 20) + b" " * 100)  # just over: passes the request limit, not the store's
    with pytest.raises(UploadError, match="413 upload is larger than the limit of 1 MB"):
        client.upload(big, server.url)


def test_a_traversal_filename_is_display_text_only(server: Running, tmp_path: Path) -> None:
    body, headers = multipart("../../x.json", ITEM.read_bytes())
    status, answer = call("POST", f"{server.url}/api/traces", body, headers)
    assert status == 201
    entry = client.wait(answer["id"], server.url, timeout=120)
    assert entry["name"] == "x.json" and entry["status"] == "ready"
    assert not (tmp_path.parent / "x.json").exists() and not Path("x.json").exists()


@pytest.mark.parametrize("trace_id", ["0" * 32, "..%2F..%2Fetc%2Fpasswd", "not-an-id"])
def test_unknown_or_malformed_ids_are_404_json(server: Running, trace_id: str) -> None:
    for method, route in (("GET", ""), ("GET", "/analysis"), ("DELETE", "")):
        status, error = call(method, f"{server.url}/api/traces/{trace_id}{route}")
        assert status == 404 and "no trace with id" in error["error"]


def test_bad_requests_get_one_line_json_errors(server: Running) -> None:
    status, error = call("POST", f"{server.url}/api/traces", b"x", {"Content-Type": "text/plain"})
    assert status == 400 and "field 'file'" in error["error"]
    body, headers = multipart("broken.json", b'{"traceEvents": [')
    status, answer = call("POST", f"{server.url}/api/traces", body, headers)
    assert status == 201
    entry = client.wait(answer["id"], server.url, timeout=120)
    assert entry["status"] == "error" and entry["error"].startswith("broken.json: ")
    status, error = call("GET", f"{server.url}/api/traces/{answer['id']}/analysis")
    assert status == 409 and "could not be analysed" in error["error"] and "\n" not in error["error"]


def test_stallscope_upload_sends_a_bundle_folder_and_waits(
    server: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = tmp_path / "run"
    bundle.mkdir()
    (bundle / "trace.pt.trace.json.gz").write_bytes(ITEM.read_bytes())
    assert main(["upload", str(bundle), "--to", server.url, "--wait"]) == 0
    out = capsys.readouterr().out
    summary = to_json(analyze(load(ITEM, use_cache=False)))["summary"]
    assert f"{server.url}/trace/" in out
    assert f"{summary['avoidable_sync_count']} avoidable syncs" in out
    assert main(["upload", str(tmp_path / "missing.json"), "--to", server.url]) == 2
    assert "no such file" in capsys.readouterr().err


def test_upload_takes_a_bare_host_port_and_refuses_what_is_no_address(
    server: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    bare = server.url.removeprefix("http://")
    assert main(["upload", str(ITEM), "--to", bare]) == 0
    assert f"{server.url}/trace/" in capsys.readouterr().out
    for wrong in ("ftp://127.0.0.1:8050", "127.0.0.1:port", "http://"):
        assert main(["upload", str(ITEM), "--to", wrong]) == 2
        err = capsys.readouterr().err
        assert "give the dashboard's address" in err and err.count("\n") == 1


def test_the_page_links_the_stylesheet_and_the_server_serves_it(server: Running) -> None:
    """The dashboard's look (dashboard/pages/assets/stallscope.css) reaches the browser: Dash links it
    from the page and serves it, with the palette's colours in it."""
    with urllib.request.urlopen(f"{server.url}/", timeout=30) as r:
        index = r.read().decode()
    assert "/assets/stallscope.css" in index
    with urllib.request.urlopen(f"{server.url}/assets/stallscope.css", timeout=30) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/css")
        css = r.read().decode()
    for var, value in [("text", palette.TEXT), ("muted", palette.MUTED), ("grid", palette.GRID)]:
        assert f"--{var}: {value};" in css
    assert f"--font: {palette.FONT_FAMILY};" in css and f"--mono: {palette.MONO_FAMILY};" in css
    assert f"--link: {palette.HOST};" in css


@pytest.mark.parametrize(
    "route",
    [
        "/../../../../etc/passwd",
        "/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/assets/..%2f..%2f..%2f..%2fetc%2fpasswd",
        "/_dash-component-suites/..%2f..%2f..%2fetc/passwd",
        "/api/traces/..%2f..%2f..%2fetc%2fpasswd/analysis",
    ],
)
def test_no_route_reads_files_outside_the_app(server: Running, route: str) -> None:
    request = urllib.request.Request(server.url + route)
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            body = r.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        body = exc.read().decode(errors="replace")
    assert "root:x:0:0" not in body
