"""The cost of ``stallscope profile`` on a loop of many tiny ops (benchmarks/lbfgs_sequence.py, shaped like
pytorch/examples' time_sequence_prediction): wall time, peak RSS, trace size and events.

    python benchmarks/bench_profile_cost.py [--args "15 16 4"] [--before DIR] [--runs 1]
    python benchmarks/bench_profile_cost.py --tiny-ops 400000 [--steps 5]

With ``--tiny-ops N`` the program is instead a loop of ``--steps`` optimizer steps of N tiny ops each
(about 5 events an op: N = 400,000 makes about 2M events a step), profiled with ``--skip 1 --warmup 1
--steps 2`` and the default ``--max-events``: one step is four times the budget, so the budget must hold
inside it.

Configurations, each a fresh process (peak RSS from ``os.wait4``):

- ``no stallscope``: ``python benchmarks/lbfgs_sequence.py ARGS``;
- ``before`` (with ``--before DIR``, a copy of an older stallscope, e.g.
  ``git archive 1e42f21 | tar -x -C DIR``): its ``stallscope profile --no-analyze`` with its defaults;
- ``after``: this checkout's ``stallscope profile --no-analyze`` with its defaults;
- ``after --stacks --max-events 0``: this checkout with Python stacks and no budget.

Prints a Markdown table for docs/performance.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "benchmarks" / "lbfgs_sequence.py"
TINY_OPS = """\
import sys
import torch

n, steps = int(sys.argv[1]), int(sys.argv[2])
w = torch.ones(4, requires_grad=True)
opt = torch.optim.SGD([w], lr=1e-6)
for step in range(steps):
    x = w * 1.0
    with torch.no_grad():
        for _ in range(n):
            x = x * 1.0001
    (w * x).sum().backward()
    opt.step()
    opt.zero_grad()
"""


def measure(cmd: list[str], env: dict[str, str], cwd: str) -> tuple[float, float, int]:
    """(wall s, peak RSS MB, exit code) of one child process, run in ``cwd`` (``python -m stallscope``
    imports the stallscope found there first)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if proc.stderr is not None:
        for line in proc.stderr.read().splitlines():
            if line.startswith("stallscope:"):
                print(f"    {line}", file=sys.stderr)
    return wall, usage.ru_maxrss / 1024.0, os.waitstatus_to_exitcode(status)


def trace_stats(bundle: Path) -> tuple[float, int]:
    """(trace MB, events) of the bundle's trace file."""
    traces = sorted(bundle.glob("*.json.gz"))
    if not traces:
        return 0.0, 0
    with gzip.open(traces[0], "rt") as f:
        events = len(json.load(f)["traceEvents"])
    return traces[0].stat().st_size / 1e6, events


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--args", default="15 16 4", help="STEPS LENGTH SAMPLES of the LBFGS loop")
    ap.add_argument("--before", type=Path, help="a copy of an older stallscope to compare with")
    ap.add_argument("--tiny-ops", type=int, metavar="N", help="a loop of N tiny ops a step instead")
    ap.add_argument("--steps", type=int, default=5, help="steps of the --tiny-ops loop")
    args = ap.parse_args()
    if args.tiny_ops:
        tiny_ops(args.tiny_ops, args.steps)
        return
    program = [str(PROGRAM), *args.args.split()]
    configs: list[tuple[str, list[str], str]] = [("no stallscope", [sys.executable, *program], str(ROOT))]
    profile = [sys.executable, "-m", "stallscope", "profile", "--no-analyze"]
    if args.before is not None:
        configs.append(("before", profile, str(args.before.resolve())))
    configs.append(("after (defaults)", profile, str(ROOT)))
    configs.append(("after --stacks --max-events 0", [*profile, "--stacks", "--max-events", "0"], str(ROOT)))
    print(f"`benchmarks/lbfgs_sequence.py {args.args}`\n")
    print("| configuration | wall s | peak RSS MB | trace MB | trace events | exit |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, cmd, path) in enumerate(configs):
            env = {**os.environ, "PYTHONPATH": path}
            out = Path(tmp) / f"b{i}"
            full = cmd if name == "no stallscope" else [*cmd, "-o", str(out), *program]
            print(f"  {name}...", file=sys.stderr)
            wall, rss, code = measure(full, env, path)
            size, events = trace_stats(out) if out.exists() else (0.0, 0)
            print(f"| {name} | {wall:.1f} | {rss:.0f} | {size:.1f} | {events:,} | {code} |", flush=True)


def tiny_ops(n: int, steps: int) -> None:
    """Bare against profiled with the default budget, a step of ``n`` tiny ops (Markdown table)."""
    window = ["--skip", "1", "--warmup", "1", "--steps", "2"]
    print(f"`bench_profile_cost.py --tiny-ops {n} --steps {steps}`: {steps} steps of {n:,} tiny ops\n")
    print("| configuration | wall s | peak RSS MB | trace MB | trace events | exit |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        program = Path(tmp) / "tiny_ops.py"
        program.write_text(TINY_OPS)
        argv = [str(program), str(n), str(steps)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        profile = [sys.executable, "-m", "stallscope", "profile", "--no-analyze"]
        out = Path(tmp) / "bundle"
        configs = [
            ("no stallscope", [sys.executable, *argv]),
            (
                f"stallscope profile {' '.join(window)} (default --max-events)",
                [*profile, *window, "-o", str(out), *argv],
            ),
        ]
        rows = []
        for name, cmd in configs:
            print(f"  {name}...", file=sys.stderr)
            wall, rss, code = measure(cmd, env, str(ROOT))
            size, events = trace_stats(out) if out.exists() else (0.0, 0)
            rows.append(rss)
            print(f"| {name} | {wall:.1f} | {rss:.0f} | {size:.1f} | {events:,} | {code} |", flush=True)
        print(f"\npeak RSS, profiled less bare: {rows[1] - rows[0]:.0f} MB")


if __name__ == "__main__":
    main()
