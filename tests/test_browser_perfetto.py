"""The overview's "Open it in Perfetto" panel in headless chromium: the button hands the annotated trace to
a Perfetto UI tab by Perfetto's postMessage protocol (PING until PONG, then ``{perfetto: {buffer, title,
fileName}}``), here to a stand-in page on 127.0.0.1 that answers as Perfetto UI does; and with nothing to
answer (no network) it says so instead of failing silently.

Skips when chromium is absent unless ``STALLSCOPE_REQUIRE_BROWSER=1`` (see ``tests/_browser.py``).
"""

from __future__ import annotations

import http.server
import io
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from _browser import Browser, start_browser

from stallscope.dashboard.app import Running, create_app
from stallscope.dashboard.services import Services
from stallscope.dashboard.store import Store
from stallscope.dashboard.worker import analyse_entry

ITEM = Path(__file__).resolve().parent.parent / "sample_traces" / "item_in_loop.pt.trace.json.gz"

# answers PING with PONG, as ui.perfetto.dev does, and shows what it was handed in its title
FAKE_PERFETTO = b"""<!doctype html><title>waiting</title><script>
window.addEventListener("message", function (e) {
  if (e.data === "PING") { e.source.postMessage("PONG", "*"); return; }
  var p = e.data && e.data.perfetto;
  if (p) document.title = "got " + p.buffer.byteLength + " " + p.fileName;
});
</script>"""


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(FAKE_PERFETTO)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with start_browser() as b:
        yield b


@pytest.fixture(scope="module")
def fake_perfetto() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def overview(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    services = Services(Store(tmp_path_factory.mktemp("store")), None, 64 << 20)
    entry = services.store.add(ITEM.name, io.BytesIO(ITEM.read_bytes()), 64 << 20)
    assert analyse_entry(str(services.store.root), entry.id) == "ready"
    running = Running(create_app(services), "127.0.0.1", 0).start()
    try:
        yield running.url, entry.id
    finally:
        running.stop()


def _click_open(browser: Browser, url: str, origin: str, wait_ms: int) -> None:
    browser.open(url)
    browser.wait_for("return document.querySelector('#overview-open-perfetto')", timeout=30)
    browser.js(
        "const b = document.querySelector('#overview-open-perfetto');"
        "b.setAttribute('data-origin', arguments[0]); b.setAttribute('data-wait-ms', arguments[1]);",
        origin,
        str(wait_ms),
    )
    browser.driver.find_element("css selector", "#overview-open-perfetto").click()


def test_open_in_perfetto_hands_over_the_annotated_trace(
    browser: Browser, overview: tuple[str, str], fake_perfetto: str
) -> None:
    base, trace_id = overview
    home = browser.driver.current_window_handle
    _click_open(browser, f"{base}/trace/{trace_id}", fake_perfetto, 20000)
    status = "const t = document.querySelector('#overview-perfetto-status').textContent;"
    assert (
        browser.wait_for(status + " return t.startsWith('Opened') && t", timeout=30)
        == "Opened in Perfetto UI."
    )
    size = browser.js(
        "return fetch(arguments[0]).then(r => r.arrayBuffer()).then(b => b.byteLength)",
        f"{base}/api/traces/{trace_id}/annotated",
    )
    tab = next(h for h in browser.driver.window_handles if h != home)
    browser.driver.switch_to.window(tab)
    try:
        title = browser.wait_for("return document.title.startsWith('got') && document.title", timeout=30)
    finally:
        browser.driver.close()
        browser.driver.switch_to.window(home)
    assert title == f"got {size} item_in_loop.pt.trace.annotated.json.gz"


def test_open_in_perfetto_without_a_network_says_so(browser: Browser, overview: tuple[str, str]) -> None:
    base, trace_id = overview
    home = browser.driver.current_window_handle
    _click_open(browser, f"{base}/trace/{trace_id}", "http://127.0.0.1:9", 1500)  # nothing listens there
    said = browser.wait_for(
        "const t = document.querySelector('#overview-perfetto-status').textContent;"
        " return t.startsWith('Could not') && t",
        timeout=30,
    )
    assert "download the file" in said
    for h in browser.driver.window_handles:
        if h != home:
            browser.driver.switch_to.window(h)
            browser.driver.close()
    browser.driver.switch_to.window(home)
    # the download link still serves the file
    ok = browser.js("return fetch(arguments[0]).then(r => r.ok)", f"{base}/api/traces/{trace_id}/annotated")
    assert ok is True
