"""``stallscope dashboard``: serve the Dash dashboard (upload, browse and compare traces) on this machine."""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import threading

from stallscope.analyzer.core.errors import UsageError


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 shares it on the network,"
        " which needs --token or --no-auth)",
    )
    p.add_argument(
        "--token",
        default=None,
        help="the token every page and API call needs (default: $STALLSCOPE_DASHBOARD_TOKEN, else a new one"
        " printed in the URL at start); 16+ characters of A-Z a-z 0-9 . _ ~ -",
    )
    p.add_argument(
        "--no-auth",
        action="store_true",
        help="no token: anyone who can reach the address can read, upload and delete traces",
    )
    p.add_argument(
        "--store-limit-mb",
        type=float,
        default=10240,
        metavar="MB",
        help="most the store may hold on disk (default 10240); over it the oldest unpinned traces go first",
    )
    p.add_argument("--port", type=int, default=8050, help="port (default 8050; 0 picks a free one)")
    p.add_argument("--log", action="store_true", help="print one line per HTTP request (off by default)")
    p.add_argument(
        "--store",
        metavar="DIR",
        default=None,
        help="folder of uploaded traces and their analyses (default ~/.local/share/stallscope/dashboard)",
    )
    p.add_argument(
        "--max-upload-mb",
        type=int,
        default=512,
        metavar="N",
        help="largest upload accepted, in MB (default 512; larger requests are answered 413)",
    )
    p.add_argument(
        "--max-inflated-mb",
        type=float,
        default=4096,
        metavar="MB",
        help="refuse a trace holding more than MB of JSON once inflated (default 4096)",
    )
    p.add_argument(
        "--analysis-memory-mb",
        type=int,
        default=16384,
        metavar="MB",
        help="address space each analysis process may use (default 16384); beyond it the entry fails",
    )
    p.add_argument(
        "--analysis-time-limit",
        type=float,
        default=None,
        metavar="S",
        help="seconds an analysis may take (default: 60 s + 3 s per MB of JSON, as the CLI's --time-limit)",
    )
    p.add_argument(
        "--analysis-workers",
        default="1",
        metavar="N",
        help="analyse up to N uploads side by side, each in its own process under the limits above"
        " (default 1)",
    )
    p.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="analyse uploads on this existing Dask cluster instead (as analyze --scheduler); its workers"
        " must run on this machine, where they see the store's folder",
    )


def run(args: argparse.Namespace) -> int:
    from stallscope.dashboard.app import Running, create_app, open_services
    from stallscope.dashboard.store import default_root
    from stallscope.dashboard.worker import Limits

    if args.max_upload_mb <= 0:
        raise UsageError(f"--max-upload-mb must be a positive number of MB, not {args.max_upload_mb}")
    if args.max_inflated_mb <= 0 or args.analysis_memory_mb <= 0:
        raise UsageError("--max-inflated-mb and --analysis-memory-mb must be positive numbers of MB")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be between 0 and 65535, not {args.port}")
    if args.store_limit_mb < args.max_upload_mb:
        raise UsageError(
            f"--store-limit-mb ({args.store_limit_mb:g}) must be at least --max-upload-mb ({args.max_upload_mb})"
        )
    workers = analysis_workers(args.analysis_workers)
    if args.scheduler is not None:
        if not args.scheduler.strip():
            raise UsageError("--scheduler: give the address of a Dask scheduler (HOST:PORT)")
        if workers != 1:
            raise UsageError(
                "--analysis-workers and --scheduler: give one (local processes, or an existing cluster,"
                " which decides how many run at once)"
            )
    token, generated = access_token(args)
    store_dir = args.store or default_root()
    try:
        limits = Limits(args.max_inflated_mb, args.analysis_memory_mb, args.analysis_time_limit)
        services = open_services(
            store_dir,
            args.max_upload_mb,
            limits=limits,
            store_limit_mb=args.store_limit_mb,
            workers=workers,
            scheduler=args.scheduler,
        )
    except OSError as exc:
        raise UsageError(f"--store {store_dir}: cannot use it ({exc.strerror or exc})") from None
    try:
        running = Running(create_app(services, token), args.host, args.port, quiet=not args.log)
    except OSError as exc:
        if services.worker is not None:
            services.worker.shutdown()
        raise UsageError(f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc})") from None
    # a new token is printed once, in the URL to open (as Jupyter does); a given one never is
    url = f"{running.url}/?token={token}" if generated else running.url
    access = "no token" if token is None else "new token" if generated else "token as given"
    print(f"stallscope dashboard: {url}  (store {store_dir}; {access}; Ctrl-C stops it)", flush=True)
    if threading.current_thread() is threading.main_thread():  # `kill` stops it as cleanly as Ctrl-C
        signal.signal(signal.SIGTERM, _stop)
    try:
        running.serve_forever()
    finally:
        if services.worker is not None:
            services.worker.shutdown()
    return 0


def analysis_workers(text: str) -> int:
    """``--analysis-workers``: a whole number of processes, 1 or more (``UsageError`` otherwise)."""
    value = text.strip()
    if not (value.isascii() and value.isdigit()) or int(value) < 1 or len(value) > 4:
        raise UsageError(
            f"--analysis-workers must be a whole number of processes from 1 to 9999, not {text!r}"
        )
    return int(value)


def access_token(args: argparse.Namespace) -> tuple[str | None, bool]:
    """The token the dashboard needs (None: ``--no-auth``) and whether it was made here. ``--token``, else
    ``$STALLSCOPE_DASHBOARD_TOKEN``; on a loopback address a new one is made when neither is given; on
    any other address one must be given (or ``--no-auth`` passed): ``UsageError`` otherwise."""
    from stallscope.dashboard.auth import ENV, check_token, new_token

    given = args.token if args.token is not None else os.environ.get(ENV) or None
    if args.no_auth:
        if args.token is not None:
            raise UsageError("--token and --no-auth contradict each other: give one")
        return None, False
    if given is not None:
        try:
            return check_token(given), False
        except ValueError as exc:
            source = "--token" if args.token is not None else ENV
            raise UsageError(f"{source}: {exc}") from None
    if not is_loopback(args.host):
        raise UsageError(
            f"--host {args.host} shares the dashboard on the network: give it a token (--token TOKEN or"
            f" {ENV}), or pass --no-auth to share it with anyone who can reach it"
        )
    return new_token(), True


def is_loopback(host: str) -> bool:
    """``host`` is this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to any address


def _stop(_signum: int, _frame: object) -> None:
    raise SystemExit(0)
