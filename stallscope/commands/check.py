"""``stallscope check``: the CI performance gate. Exit 1 when a limit or a regression over the baseline is
exceeded, 0 when all hold, 2 on bad input."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from stallscope.analyzer.core.errors import UsageError
from stallscope.watchdog import add_input_limits

if TYPE_CHECKING:
    from stallscope.analyzer.document.diff import Side


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "trace", help="trace file, folder of rank files, stallscope bundle, or analyze --json output"
    )
    p.add_argument(
        "--rank", type=int, default=None, help="rank to check in a multi-rank folder (default: lowest)"
    )
    p.add_argument(
        "--max-idle-frac",
        type=float,
        metavar="F",
        help="fail if the device is idle more than F of the window",
    )
    p.add_argument(
        "--max-avoidable-syncs", type=int, metavar="N", help="fail if more than N syncs are avoidable"
    )
    p.add_argument(
        "--max-sync-wait-frac",
        type=float,
        metavar="F",
        help="fail if the host is blocked in syncs more than F of the window",
    )
    p.add_argument(
        "--baseline",
        metavar="OLD",
        help="the run to compare with (trace, folder, bundle or analyze --json output); needs --max-regression",
    )
    p.add_argument(
        "--max-regression",
        type=float,
        metavar="PCT",
        help="fail if the wall or the median step time grew more than PCT percent over --baseline",
    )
    p.add_argument("--no-cache", action="store_true", help="parse the trace even if a cached model exists")
    add_input_limits(p)


def _check_usage(args: argparse.Namespace) -> None:
    if (args.baseline is None) != (args.max_regression is None):
        raise UsageError("check: --baseline and --max-regression go together (give both)")
    limits = (args.max_idle_frac, args.max_avoidable_syncs, args.max_sync_wait_frac, args.max_regression)
    if all(v is None for v in limits):
        raise UsageError(
            "check: give at least one of --max-idle-frac, --max-avoidable-syncs, --max-sync-wait-frac, "
            "--max-regression"
        )
    for name, value in (
        ("--max-idle-frac", args.max_idle_frac),
        ("--max-sync-wait-frac", args.max_sync_wait_frac),
    ):
        if value is not None and not 0.0 <= value <= 1.0:
            raise UsageError(f"check: {name} must be a fraction between 0 and 1, not {value}")
    if args.max_regression is not None and not 0.0 <= args.max_regression < float("inf"):
        raise UsageError(f"check: --max-regression is a percentage of 0 or more, not {args.max_regression}")


def run(args: argparse.Namespace) -> int:
    """CI performance gate: exit 1 when a threshold is exceeded (a limit, or a regression over the
    baseline), 0 when all hold, 2 on bad input."""
    from stallscope.analyzer.document.diff import compare, gate, side_of
    from stallscope.diffing import load_doc, load_side
    from stallscope.render.diff import render_gates

    _check_usage(args)
    limits = (args.time_limit, args.max_inflated_mb)
    # the gate compares walls and steps only: the new run's top tables need not be complete
    doc, cut = load_doc(args.trace, args.rank, not args.no_cache, None, *limits, full_tops=False)
    new = side_of(doc, args.trace, tops_cut=cut)  # checks a saved analysis is complete
    failed = 0
    lines = []
    for name, value, limit, fmt in _check_measures(new, args):
        if limit is None:
            continue
        if value is None:
            lines.append(f"skip {name}: a CPU-only run has no device (limit {fmt.format(limit)} not applied)")
            continue
        ok = value <= limit
        failed += not ok
        lines.append(f"{'ok  ' if ok else 'FAIL'} {name} {fmt.format(value)} (limit {fmt.format(limit)})")
    if args.baseline is not None:
        old = load_side(args.baseline, args.rank, not args.no_cache, None, *limits)
        gates = gate(compare(old, new), args.max_regression)
        failed += sum(g.regressed for g in gates)
        lines += render_gates(gates, args.max_regression)
    print("\n".join(lines))
    print(f"stallscope check: {'failed' if failed else 'passed'} ({args.trace})")
    return 1 if failed else 0


def _check_measures(new: Side, args: argparse.Namespace) -> list[tuple[str, float | None, Any, str]]:
    """(name, value or None when it does not apply, limit, format) for each limit of ``check``, from the
    figures a diff reads of the run (``stallscope.analyzer.document.diff.Side``). On a CPU-only run the device limits do not
    apply, and the avoidable syncs are the would-be syncs: the sync-prone calls in the loop whose tensors
    would be on the accelerator."""
    wall = new.wall_us or 1.0
    if new.cpu_only:
        return [
            ("device idle", None, args.max_idle_frac, "{:.1%}"),
            ("would-be syncs", float(new.would_sync_count or 0), args.max_avoidable_syncs, "{:.0f}"),
            ("host sync wait", None, args.max_sync_wait_frac, "{:.1%}"),
        ]
    return [
        ("device idle", (new.device_idle_us or 0.0) / wall, args.max_idle_frac, "{:.1%}"),
        ("avoidable syncs", float(new.avoidable_sync_count), args.max_avoidable_syncs, "{:.0f}"),
        ("host sync wait", (new.host_sync_wait_us or 0.0) / wall, args.max_sync_wait_frac, "{:.1%}"),
    ]
