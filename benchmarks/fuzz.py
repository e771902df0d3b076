"""Long fuzz runs: ``.venv/bin/python benchmarks/fuzz.py --minutes N``.

Draws inputs from the generators of ``tests/fuzzing.py`` (generated Kineto traces of every class, and
mutated copies of the small shared real traces when ``../shared/traces`` is there), in turn, each from a
seeded ``random.Random`` (input ``i`` of seed ``S`` is always the same). Every input is analysed
in-process twice and checked against the contract (exit 0 or 2, one line, no traceback, within its time
bound, the same JSON both times). Every ``--subprocess-every``-th input, and every input that failed in
process, is also run as ``stallscope analyze`` in two child processes with different ``PYTHONHASHSEED``:
their JSON must be identical and their peak memory within ``300 MB + 30 x`` the input's JSON size.

An input that breaks the contract is saved to ``tests/corpus/`` (``fuzz-<class>-<hash>``), where
``tests/test_corpus.py`` makes it a regression test. The summary per class is printed as a Markdown table
for ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fuzzing import (
    BREAKERS,
    CORPUS,
    Case,
    contract_problems,
    generate_case,
    json_size,
    mutate_case,
    real_trace_docs,
    run_cli,
    time_bound_s,
    write_case,
)

MEMORY_BASE_MB = 300.0
MEMORY_PER_JSON = 30.0


def child_run(path: Path, out: Path, seed: int, limit_s: float) -> tuple[int, bytes | None, float, str]:
    """``stallscope analyze`` in a child process: exit code, JSON, peak RSS in MB, stderr."""
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    cmd = [sys.executable, "-m", "stallscope", "analyze", str(path), "--json", str(out), "--no-cache", "-q"]
    cmd += ["--time-limit", f"{limit_s:g}"]
    out.unlink(missing_ok=True)
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        try:
            proc.wait(timeout=limit_s + 30)
        except subprocess.TimeoutExpired:
            proc.kill()
        _, status, usage = os.wait4(proc.pid, 0) if proc.returncode is None else (0, 0, None)
        code = proc.returncode if proc.returncode is not None else os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    rss = (usage.ru_maxrss if usage else resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    return code, out.read_bytes() if out.exists() else None, rss, stderr


def subprocess_problems(path: Path, tmp: Path, limit_s: float) -> list[str]:
    problems = []
    a = child_run(path, tmp / "child1.json", 1, limit_s)
    b = child_run(path, tmp / "child2.json", 2, limit_s)
    if a[0] not in (0, 2) or "Traceback" in a[3] or "internal error" in a[3]:
        problems.append(f"child exit {a[0]}: {a[3].strip()[-200:]}")
    if a[1] != b[1] or a[0] != b[0]:
        problems.append("JSON differs between PYTHONHASHSEED=1 and 2")
    bound = MEMORY_BASE_MB + MEMORY_PER_JSON * json_size(path) / 1e6
    if max(a[2], b[2]) > bound:
        problems.append(f"peak memory {max(a[2], b[2]):.0f} MB (bound {bound:.0f} MB)")
    return problems


def save(case: Case, problems: list[str]) -> Path:
    digest = hashlib.sha256(case.data).hexdigest()[:12]
    kind = case.kind.replace(":", "-").replace("+", "-")
    suffix = ".json.gz" if case.name.endswith(".gz") else ".json"
    path = CORPUS / f"fuzz-{kind}-{digest}{suffix}"
    path.write_bytes(case.data)
    print(f"FAIL {case.kind}: {'; '.join(problems)} -> {path.relative_to(CORPUS.parents[1])}", flush=True)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--subprocess-every", type=int, default=25, metavar="K")
    p.add_argument("--memory-limit-mb", type=int, default=4096, help="address-space limit of this process")
    args = p.parse_args(argv)
    limit = args.memory_limit_mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    bases = real_trace_docs()
    kinds = sorted(BREAKERS) + [f"real:{name}" for name, _ in bases]
    tally: dict[str, Counter[str]] = defaultdict(Counter)
    worst: dict[str, float] = defaultdict(float)
    end = time.monotonic() + 60 * args.minutes
    i = 0
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        while time.monotonic() < end:
            rng = random.Random(f"{args.seed}-{i}")
            kind = kinds[i % len(kinds)]
            case = (
                mutate_case(rng, bases[kinds.index(kind) - len(BREAKERS)])
                if kind.startswith("real:")
                else generate_case(rng, kind)
            )
            path = write_case(case, tmp / f"in{i}")
            bound = time_bound_s(json_size(path))
            first = run_cli(path, tmp / "a.json", bound)
            second = run_cli(path, tmp / "b.json", bound) if first.code == 0 else None
            problems = contract_problems(first, second, bound)
            if "out of memory" in first.stderr:
                problems.append("out of memory")
            if problems or i % args.subprocess_every == 0:
                tally[case.kind]["in child processes"] += 1
                problems += subprocess_problems(path, tmp, bound)
            tally[case.kind]["tried"] += 1
            tally[case.kind][f"exit {first.code}"] += 1
            worst[case.kind] = max(worst[case.kind], first.seconds / bound)
            if problems:
                tally[case.kind]["broke the contract"] += 1
                save(case, problems)
            for f in path.parent.iterdir():
                f.unlink()
            path.parent.rmdir()
            i += 1
    print(report(tally, worst, i, args))
    return 1 if any(t["broke the contract"] for t in tally.values()) else 0


def report(tally: dict[str, Counter[str]], worst: dict[str, float], n: int, args: argparse.Namespace) -> str:
    lines = [
        f"fuzz.py --minutes {args.minutes:g} --seed {args.seed}: {n:,} inputs",
        "",
        "| class | tried | exit 0 | exit 2 | other exit | in child processes | broke the contract | slowest / bound |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in sorted(tally):
        t = tally[kind]
        other = t["tried"] - t["exit 0"] - t["exit 2"]
        lines.append(
            f"| {kind} | {t['tried']:,} | {t['exit 0']:,} | {t['exit 2']:,} | {other} | "
            f"{t['in child processes']} | {t['broke the contract']} | {worst[kind]:.1%} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
