"""A dashboard shared with a token: without it every page, Dash endpoint, asset and API call is refused and
nothing changes; with it (Bearer header, or the cookie the ``?token=`` URL sets) all of them work; a change
sent with the cookie must come from the dashboard's own origin; the token never reaches the request log;
sharing on a non-loopback address without a token is refused before anything binds."""

from __future__ import annotations

import http.client
import io
import json
import os
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stallscope.dashboard import client
from stallscope.dashboard.app import Running, create_app, open_services
from stallscope.dashboard.auth import ENV, cookie_name, redact
from stallscope.dashboard.client import UploadError
from stallscope.dashboard.pages.traces import Ids, on_table, usage_text
from stallscope.dashboard.services import Services

ITEM = Path(__file__).resolve().parent.parent / "sample_traces" / "item_in_loop.pt.trace.json.gz"
TOKEN = "test-token-0123456789abcdef"


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Services]]:
    services = open_services(
        tmp_path_factory.mktemp("store"), max_upload_mb=4, processes=False, store_limit_mb=64
    )
    running = Running(create_app(services, TOKEN), "127.0.0.1", 0, quiet=True).start()
    try:
        yield running, services
    finally:
        running.stop()
        assert services.worker is not None
        services.worker.shutdown()


def request(
    running: Running, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One raw request (no redirects followed, no cookies kept): status, headers, body."""
    conn = http.client.HTTPConnection("127.0.0.1", running.server.server_port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def multipart(data: bytes) -> tuple[bytes, dict[str, str]]:
    b = "authboundary"
    body = (
        f'--{b}\r\nContent-Disposition: form-data; name="file"; filename="t.json.gz"\r\n\r\n'.encode()
        + data
        + f"\r\n--{b}--\r\n".encode()
    )
    return body, {"Content-Type": f"multipart/form-data; boundary={b}"}


BEARER = {"Authorization": f"Bearer {TOKEN}"}
CALLBACK = json.dumps({"output": "x.children", "outputs": {"id": "x", "property": "children"}, "inputs": []})


def _reads(trace_id: str) -> list[tuple[str, str]]:
    return [
        ("GET", "/"),
        ("GET", f"/trace/{trace_id}"),
        ("GET", "/compare"),
        ("GET", "/_dash-layout"),
        ("GET", "/_dash-dependencies"),
        ("GET", "/assets/stallscope.css"),
        ("GET", "/api/traces"),
        ("GET", f"/api/traces/{trace_id}"),
        ("GET", f"/api/traces/{trace_id}/analysis"),
        ("GET", "/api/store"),
    ]


def test_without_the_token_everything_is_refused_and_nothing_changes(
    shared: tuple[Running, Services],
) -> None:
    running, services = shared
    # GIVEN one analysed entry
    trace_id = services.store.add("kept.json.gz", io.BytesIO(ITEM.read_bytes()), 4 << 20).id
    assert services.worker is not None and services.worker.submit(trace_id).result(timeout=120) == "ready"
    before = services.store.entries()
    body, headers = multipart(ITEM.read_bytes())
    same_origin = {"Origin": running.url}
    attempts: list[tuple[str, str, bytes | None, dict[str, str]]] = [
        *((m, p, None, {}) for m, p in _reads(trace_id)),
        ("POST", "/api/traces", body, headers),
        ("DELETE", f"/api/traces/{trace_id}", None, same_origin),
        ("POST", f"/api/traces/{trace_id}/pin", None, same_origin),
        ("POST", "/_dash-update-component", CALLBACK.encode(), {"Content-Type": "application/json"}),
    ]
    for wrong in (
        {},
        {"Authorization": "Bearer " + TOKEN[:-1] + "x"},
        {"Cookie": f"stallscope_auth=x{TOKEN}"},
    ):
        for method, path, data, extra in attempts:
            # WHEN it is asked for without the token (none, a wrong one)
            status, got, answer = request(running, method, path, data, {**extra, **wrong})
            # THEN it is refused, with a reason and no data
            assert status == 401, (method, path, status)
            assert b"token" in answer and b"kept.json.gz" not in answer
            assert got.get("www-authenticate", "").startswith("Bearer")
    # AND nothing was stored, deleted or pinned
    assert services.store.entries() == before


def test_with_the_bearer_token_reads_uploads_pins_and_deletes_work(shared: tuple[Running, Services]) -> None:
    running, services = shared
    for method, path in _reads("0" * 32):
        status, _, _ = request(running, method, path, headers=BEARER)
        assert status in (200, 404), (path, status)  # 404: the made-up id only
    body, headers = multipart(ITEM.read_bytes())
    status, _, answer = request(running, "POST", "/api/traces", body, {**headers, **BEARER})
    assert status == 201
    trace_id = json.loads(answer)["id"]
    assert services.store.get(trace_id).name == "t.json.gz"
    deadline = time.monotonic() + 120  # analysed first: its result changes the store's usage read below
    while (
        services.store.get(trace_id).status.value in ("pending", "analysing") and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    status, _, answer = request(running, "POST", f"/api/traces/{trace_id}/pin", headers=BEARER)
    assert status == 200 and json.loads(answer)["pinned"] is True and services.store.get(trace_id).pinned
    status, _, answer = request(running, "DELETE", f"/api/traces/{trace_id}/pin", headers=BEARER)
    assert status == 200 and services.store.get(trace_id).pinned is False
    status, _, answer = request(running, "GET", "/api/store", headers=BEARER)
    assert json.loads(answer) == {"usage_bytes": services.store.usage(), "limit_bytes": 64 << 20}
    assert request(running, "DELETE", f"/api/traces/{trace_id}", headers=BEARER)[0] == 204
    assert trace_id not in {e.id for e in services.store.entries()}


def test_the_token_url_sets_a_strict_httponly_cookie_that_pages_and_callbacks_accept(
    shared: tuple[Running, Services],
) -> None:
    running, services = shared
    # WHEN a browser opens the URL printed at start
    status, headers, _ = request(running, "GET", f"/trace/{'a' * 32}?tab=x&token={TOKEN}")
    # THEN it is sent on to the same page without the token, with the cookie
    assert status == 303 and headers["location"] == f"/trace/{'a' * 32}?tab=x"
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"{cookie_name(TOKEN)}={TOKEN};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    jar = {"Cookie": f"{cookie_name(TOKEN)}={TOKEN}"}
    # AND the cookie opens pages, the Dash endpoints, assets and API reads
    for method, path in _reads("0" * 32):
        assert request(running, method, path, headers=jar)[0] in (200, 404), path
    callback = json.dumps(
        {
            "output": "traces-usage.children",
            "outputs": {"id": "traces-usage", "property": "children"},
            "inputs": [{"id": "traces-tick", "property": "n_intervals", "value": 1}],
            "changedPropIds": ["traces-tick.n_intervals"],
        }
    ).encode()
    json_type = {"Content-Type": "application/json"}
    status, _, answer = request(
        running, "POST", "/_dash-update-component", callback, {**jar, **json_type, "Origin": running.url}
    )
    assert status == 200 and usage_text(services).encode() in answer
    # BUT a change sent with the cookie from another origin (or none named) is refused, and changes nothing
    trace_id = services.store.add("x.json.gz", io.BytesIO(ITEM.read_bytes()), 4 << 20).id
    for origin in ({}, {"Origin": "http://127.0.0.1:1"}, {"Origin": "http://evil.example"}):
        for method, path in (("DELETE", f"/api/traces/{trace_id}"), ("POST", f"/api/traces/{trace_id}/pin")):
            assert request(running, method, path, headers={**jar, **origin})[0] == 401
        assert (
            request(running, "POST", "/_dash-update-component", callback, {**jar, **json_type, **origin})[0]
            == 401
        )
    assert services.store.get(trace_id).pinned is False
    # AND from its own pages it works
    assert (
        request(running, "DELETE", f"/api/traces/{trace_id}", headers={**jar, "Origin": running.url})[0]
        == 204
    )
    assert trace_id not in {e.id for e in services.store.entries()}


def test_the_upload_client_sends_the_token_from_its_argument_the_environment_or_the_url(
    shared: tuple[Running, Services], monkeypatch: pytest.MonkeyPatch
) -> None:
    running, services = shared
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(UploadError, match="401 missing or wrong token"):
        client.upload(ITEM, running.url)
    count = len(services.store.entries())
    assert client.upload(ITEM, running.url, token=TOKEN)["status"] == "pending"
    answer = client.upload(ITEM, f"{running.url}/?token={TOKEN}")
    assert client.wait(str(answer["id"]), f"{running.url}/?token={TOKEN}", timeout=120)["status"] == "ready"
    monkeypatch.setenv(ENV, TOKEN)
    assert client.status(str(answer["id"]), running.url)["status"] == "ready"
    assert len(services.store.entries()) == count + 2


def test_the_traces_page_pins_and_unpins_the_selected_rows(shared: tuple[Running, Services]) -> None:
    _, services = shared
    trace_id = services.store.add("pin-me.json.gz", io.BytesIO(ITEM.read_bytes()), 4 << 20).id
    data: list[dict[str, Any]] = [{"id": trace_id}]
    rows, _, note = on_table(services, Ids.PIN.value, "pin-me", [0], data)
    assert note == "pinned 1 trace" and services.store.get(trace_id).pinned
    assert [r["pinned"] for r in rows] == ["pinned"]
    rows, _, note = on_table(services, Ids.UNPIN.value, "pin-me", [0], data)
    assert note == "unpinned 1 trace" and not services.store.get(trace_id).pinned
    assert [r["pinned"] for r in rows] == [""]
    used = services.store.usage() / (1 << 20)
    assert usage_text(services).startswith(f"store: {used:,.1f} MB of 64 MB (")


def test_redact_hides_only_the_token_value() -> None:
    assert (
        redact(f"GET /trace/x?tab=1&token={TOKEN}&b=2 HTTP/1.1")
        == "GET /trace/x?tab=1&token=***&b=2 HTTP/1.1"
    )
    assert redact(f"GET /?token={TOKEN} HTTP/1.1") == "GET /?token=*** HTTP/1.1"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != ENV}
    return subprocess.run(
        [sys.executable, "-m", "stallscope", "dashboard", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, **(env or {})},
    )


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "::", "dashboard.example"])
def test_sharing_on_the_network_without_a_token_exits_2_with_one_line(tmp_path: Path, host: str) -> None:
    # the check runs before the store is opened or anything binds: the store folder is never made
    done = _cli("--host", host, "--port", "0", "--store", str(tmp_path / "s"))
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1
    assert f"--host {host}" in done.stderr and "--token" in done.stderr and "--no-auth" in done.stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (["--token", "short"], {}, "--token: a token is 16 to 256"),
        ([], {ENV: "has space in it and more"}, f"{ENV}: a token is 16 to 256"),
        (["--token", TOKEN, "--no-auth"], {}, "contradict"),
        (["--store-limit-mb", "10", "--max-upload-mb", "20"], {}, "--store-limit-mb (10) must be at least"),
    ],
)
def test_bad_token_and_limit_arguments_exit_2_with_one_line(
    tmp_path: Path, args: list[str], env: dict[str, str], words: str
) -> None:
    done = _cli("--port", "0", "--store", str(tmp_path / "s"), *args, env=env)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert words in done.stderr and "short" not in done.stderr.replace("--token short", "")
    assert "has space" not in done.stderr


def test_a_loopback_dashboard_makes_a_token_prints_it_once_and_never_logs_it(tmp_path: Path) -> None:
    # GIVEN `stallscope dashboard --log` on loopback with no token given
    cmd = [
        sys.executable,
        "-m",
        "stallscope",
        "dashboard",
        "--store",
        str(tmp_path / "s"),
        "--port",
        "0",
        "--log",
    ]
    env = {k: v for k, v in os.environ.items() if k != ENV}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    url = line.split()[2]
    parts = urllib.parse.urlsplit(url)
    token = urllib.parse.parse_qs(parts.query)["token"][0]
    base = f"{parts.scheme}://{parts.netloc}"
    try:
        # THEN it printed the URL with a new token, which the server accepts (404: the made-up id only)
        assert len(token) >= 32 and "new token" in line
        with pytest.raises(UploadError, match=r": 404 no trace with id"):
            client.status("0" * 32, base, token=token)
        with pytest.raises(UploadError, match="401"):
            client.upload(ITEM, base, token="wrong-token-0123456789")
        # WHEN the browser's URL, an API read with ?token= and a Bearer upload come in
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
        conn.request("GET", f"/?token={token}")
        assert conn.getresponse().status == 303
        conn.close()
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
        conn.request("GET", f"/api/traces?token={token}")
        assert conn.getresponse().status == 200
        conn.close()
        assert client.upload(ITEM, base, token=token)["status"] == "pending"
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    # THEN the request log has each request, with the token's value hidden
    assert '"GET /?token=*** HTTP/1.1" 303' in err and '"GET /api/traces?token=*** HTTP/1.1" 200' in err
    assert '"POST /api/traces HTTP/1.1" 201' in err
    assert token not in err and token not in out  # printed once: the first line, read above
