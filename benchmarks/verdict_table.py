"""Print the verdict table of ``docs/validation.md``: every trace in ``../shared/traces`` (all folders), its
verdict and the numbers that decide it.

    .venv/bin/python benchmarks/verdict_table.py [--traces ../shared/traces]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stallscope.analyzer.analysis import Analysis, analyze  # noqa: E402
from stallscope.analyzer.load.loader import load  # noqa: E402


def row(name: str, a: Analysis) -> str:
    v = a.verdict
    window = a.window.dur_us
    util = f"{a.summary.device_utilization:.0%}" if a.main_device is not None else "CPU only"
    if v is None:
        return f"| {name} | - | - | {util} | - | - | - |"
    shares = sorted(((s, k) for k, s in v.path_share.items() if s >= 0.01), reverse=True)[:3]
    path = ", ".join(f"{k} {s:.0%}" for s, k in shares)
    sens = " / ".join(
        f"{v.sensitivity_us.get(k, 0.0) / window:.0%}"
        for k in ("device", "communication", "host", "input", "sync", "launch")
    )
    return (
        f"| {name} | **{v.bottleneck}** ({v.basis}) | {window / 1000:,.1f} | {util} | {path} | {sens} | "
        f"{len(a.warnings)} |"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "traces")
    args = parser.parse_args(argv)
    print(
        "| trace | verdict (basis) | window ms | GPU busy | critical path "
        "| compute 2x / communication 2x / host 2x / input overlapped / no syncs / launch 2x saves | warnings |"
    )
    print("|---|---|---:|---:|---|---|---:|")
    for path in sorted(args.traces.rglob("*.json.gz")):
        name = str(path.relative_to(args.traces)).removesuffix(".pt.trace.json.gz")
        print(row(name, analyze(load(path))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
