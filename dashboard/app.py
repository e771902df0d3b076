"""The Dash app: one Flask server carrying the pages and the HTTP API, and a small threaded server to run
it (``stallscope dashboard``). Binds to 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any, cast

import dash
from dash import dcc, html
from flask import Flask
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from stallscope.dashboard import pages
from stallscope.dashboard.api import register_api
from stallscope.dashboard.auth import TOKEN_REQUIRED, check_token, redact, require_token
from stallscope.dashboard.pages.common import Shell
from stallscope.dashboard.palette import FONT_FAMILY, TEXT
from stallscope.dashboard.services import Services
from stallscope.dashboard.store import Store
from stallscope.dashboard.worker import AnalysisQueue, ClusterWorker, Limits, Worker

DEFAULT_MAX_UPLOAD_MB = 512


def create_app(services: Services, token: str | None = None) -> dash.Dash:
    """The app over ``services``; its Flask server is ``app.server``. With a ``token`` every page, Dash
    callback, asset and API route needs it (``stallscope.dashboard.auth``); without one, none does."""
    server = Flask("stallscope.dashboard")
    if token is not None:
        require_token(server, check_token(token))
    server.config[TOKEN_REQUIRED] = token is not None
    register_api(server, services)
    quiet: Any = {"update_title": None}  # no "Updating..." flicker in the tab title
    app = dash.Dash(
        __name__,
        server=cast(Any, server),
        title="stallscope",
        **quiet,
        suppress_callback_exceptions=True,  # pages are built on navigation
        assets_folder=str(Path(__file__).parent / "pages" / "assets"),
    )
    app.layout = html.Div(
        [
            dcc.Location(id=Shell.URL.value, refresh="callback-nav"),  # callbacks navigate without a reload
            html.Header(
                html.Nav(
                    [
                        dcc.Link("stallscope", href="/", className="ss-brand"),
                        dcc.Link("Traces", href="/"),
                        dcc.Link("Compare", href="/compare"),
                        dcc.Link("Glossary", href="/glossary"),
                    ],
                    className="ss-inner",
                ),
                className="ss-top",
            ),
            html.Main(html.Div(id=Shell.CONTENT.value), className="ss-main"),
        ],
        # the look is assets/stallscope.css; these two keep the text readable should it fail to load
        style={"fontFamily": FONT_FAMILY, "color": TEXT},
    )
    pages.register(app, services)
    return app


def open_services(
    store_dir: str | Path,
    max_upload_mb: int,
    processes: bool = True,
    limits: Limits | None = None,
    store_limit_mb: float | None = None,
    workers: int = 1,
    scheduler: str | None = None,
) -> Services:
    """Open (or create) the store (holding at most ``store_limit_mb``, None: no limit), start the
    analyses (each under ``limits``): ``workers`` side by side in local processes, or on the Dask cluster
    at ``scheduler`` (``UsageError`` if it cannot be reached); then queue what a previous run left
    unfinished."""
    store = Store(store_dir, limit_bytes=None if store_limit_mb is None else int(store_limit_mb * (1 << 20)))
    queue: AnalysisQueue = (
        ClusterWorker(store, scheduler, limits=limits)
        if scheduler is not None
        else Worker(store, processes=processes, limits=limits, workers=workers)
    )
    services = Services(store, queue, max_upload_mb << 20)
    queue.resume()
    return services


class _RedactedRequestLog(WSGIRequestHandler):
    """werkzeug's request log line with any ``?token=`` value hidden."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        self.requestline = redact(self.requestline)
        super().log_request(code, size)


class _PlainRequestLog(WSGIRequestHandler):
    """werkzeug's request log line without its ANSI colours, for a log that is not a terminal (and with
    any ``?token=`` value hidden)."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        line = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in redact(self.requestline))
        self.log("info", '"%s" %s %s', line, getattr(code, "value", code), size)


def _request_handler() -> type[WSGIRequestHandler]:
    coloured = sys.stderr.isatty() and not os.environ.get("NO_COLOR")
    return _RedactedRequestLog if coloured else _PlainRequestLog


class Running:
    """A dashboard served on a background thread (tests, benchmarks) or the foreground (the CLI)."""

    def __init__(
        self, app: dash.Dash, host: str = "127.0.0.1", port: int = 8050, quiet: bool = False
    ) -> None:
        # no access log line per request unless asked (`dashboard --log`); errors are still logged
        logging.getLogger("werkzeug").setLevel(logging.WARNING if quiet else logging.INFO)
        self.server: BaseWSGIServer = make_server(
            host, port, app.server, threaded=True, request_handler=_request_handler()
        )
        self.url = f"http://{host}:{self.server.server_port}"
        self._thread: threading.Thread | None = None

    def start(self) -> Running:
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="stallscope-dashboard", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.server.serve_forever()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
