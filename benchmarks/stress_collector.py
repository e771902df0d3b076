"""Stability of ``stallscope profile``: profile every example many times, each in its own process.

    .venv/bin/python benchmarks/stress_collector.py [--runs 5] [--example item_logging ...]

A profiler misused by the collector (started or stopped inside a record_function another profiler saw
begin) crashes torch only now and then, so one green test run proves little. This runs
``stallscope profile --no-analyze`` on each example ``--runs`` times and prints, per example, how many
runs exited 0 with a trace written, and the last lines of stderr of any that did not.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.py"))


def run_once(example: str, out: Path) -> tuple[bool, str]:
    cmd = [sys.executable, "-X", "faulthandler", "-m", "stallscope", "profile", "--no-analyze"]
    done = subprocess.run(
        [*cmd, "-o", str(out), f"examples/{example}.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    ok = done.returncode == 0 and any(out.glob("*.pt.trace.json.gz"))
    return ok, "\n".join(done.stderr.splitlines()[-5:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per example (default 5)")
    ap.add_argument("--example", action="append", choices=EXAMPLES, help="only these examples (default all)")
    args = ap.parse_args(argv)
    names = args.example or EXAMPLES
    failed = 0
    print("| example | runs | ok |\n|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="stallscope-stress-") as tmp:
        for name in names:
            ok = 0
            for i in range(args.runs):
                good, tail = run_once(name, Path(tmp) / f"{name}-{i}")
                ok += good
                if not good:
                    print(f"{name} run {i + 1} failed:\n{tail}", file=sys.stderr)
            failed += args.runs - ok
            print(f"| {name} | {args.runs} | {ok} |", flush=True)
    print(f"{len(names) * args.runs - failed} of {len(names) * args.runs} runs ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
