#!/usr/bin/env python3
"""What this machine charges for memory: the time to fill N GiB the first time a fresh process touches
it, and again once the process reuses what it freed. On a VM whose host backs guest memory lazily, the
first touch is kernel time of seconds per GiB; every process pays it for its peak, so the other
benchmarks' times (ours and HTA's) carry it in proportion to their peak memory.

    .venv/bin/python benchmarks/bench_memory_touch.py [--gib 1] [--rounds 3]

Each round runs in a fresh child process, which fills the block (numpy ``ones``), frees it and fills it
again; user and system seconds of each fill are printed as a table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
import numpy as np
n = int(float(sys.argv[1]) * (1 << 27))  # float64 values in the block
out = []
for label in ("first touch", "reused"):
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    block = np.ones(n)
    r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    out.append({"fill": label, "wall_s": t1 - t0, "user_s": r1.ru_utime - r0.ru_utime,
                "system_s": r1.ru_stime - r0.ru_stime})
    del block
print(json.dumps(out))
"""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="size of the block (GiB)")
    parser.add_argument("--rounds", type=int, default=3, help="fresh child processes")
    args = parser.parse_args(argv)
    print(f"| round | fill of {args.gib:g} GiB | wall s | user s | system s |")
    print("|---:|---|---:|---:|---:|")
    for r in range(1, args.rounds + 1):
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(args.gib)], capture_output=True, text=True, check=True
        )
        for row in json.loads(done.stdout.strip().splitlines()[-1]):
            print(
                f"| {r} | {row['fill']} | {row['wall_s']:.2f} | {row['user_s']:.2f} | {row['system_s']:.2f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
