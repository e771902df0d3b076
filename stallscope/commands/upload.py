"""``stallscope upload``: send a trace or bundle to a running dashboard, and with ``--wait`` print the
headline numbers of its analysis."""

from __future__ import annotations

import argparse
from typing import Any


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="trace (.json, .json.gz), zip/tar bundle, or a bundle folder")
    p.add_argument(
        "--to", required=True, metavar="ADDR", help="the dashboard: 127.0.0.1:8050 or http://host:port"
    )
    p.add_argument(
        "--token",
        default=None,
        help="the dashboard's token, sent as a Bearer header (default: $STALLSCOPE_DASHBOARD_TOKEN)",
    )
    p.add_argument("--tag", action="append", default=[], help="tag the upload (repeatable)")
    p.add_argument("--wait", action="store_true", help="wait for the analysis and print its headline numbers")


def run(args: argparse.Namespace) -> int:
    from stallscope.dashboard import client

    answer = client.upload(args.file, args.to, tags=tuple(args.tag), token=args.token)
    print(f"uploaded {args.file}: {answer.get('url')}")
    if args.wait:
        entry = client.wait(str(answer["id"]), args.to, token=args.token)
        if entry.get("status") != "ready":
            raise client.UploadError(
                f"analysis {entry.get('status')}: {entry.get('error') or 'no reason given'}"
            )
        print(f"  {wait_summary(entry.get('summary') or {})}")
    return 0


def wait_summary(s: dict[str, Any]) -> str:
    """What ``upload --wait`` prints from the dashboard's headline numbers: for a job, the job's line
    first (who held it back, what that cost), then the shown rank's; a CPU-only trace says so instead of
    "host-bound, GPU utilization 0.0%" (``stallscope.dashboard.headline``, as the pages)."""
    from stallscope.dashboard.headline import CPU_ONLY, bottleneck_text, job_text, utilization_text
    from stallscope.display.units import duration

    verdict = (
        CPU_ONLY
        if s.get("cpu_only")
        else f"{bottleneck_text(s)}-bound, GPU utilization {utilization_text(s)}"
    )
    line = (
        f"{verdict}, {s.get('avoidable_sync_count') or 0} avoidable syncs, "
        f"est. saving {duration(s.get('best_saving_us', s.get('est_saving_us')) or 0)}"
    )
    job = s.get("job")
    if not job:
        return line
    return f"job: {job_text(job)}\n  rank {s.get('rank')}: {line}"
