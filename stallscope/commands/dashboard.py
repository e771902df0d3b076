"""``stallscope dashboard``: serve the Dash dashboard (upload, browse and compare traces) on this machine."""

from __future__ import annotations

import argparse
import signal
import threading

from stallscope.analyzer.core.errors import UsageError


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 shares it on the network)",
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
    store_dir = args.store or default_root()
    try:
        limits = Limits(args.max_inflated_mb, args.analysis_memory_mb, args.analysis_time_limit)
        services = open_services(store_dir, args.max_upload_mb, limits=limits)
    except OSError as exc:
        raise UsageError(f"--store {store_dir}: cannot use it ({exc.strerror or exc})") from None
    try:
        running = Running(create_app(services), args.host, args.port, quiet=not args.log)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc})") from None
    print(f"stallscope dashboard: {running.url}  (store {store_dir}; Ctrl-C stops it)", flush=True)
    if threading.current_thread() is threading.main_thread():  # `kill` stops it as cleanly as Ctrl-C
        signal.signal(signal.SIGTERM, _stop)
    try:
        running.serve_forever()
    finally:
        if services.worker is not None:
            services.worker.shutdown()
    return 0


def _stop(_signum: int, _frame: object) -> None:
    raise SystemExit(0)
