"""Scaling table: time per stage of ``analyze --json`` for 0.1M, 1M, 3M and 10M events.

The real V100 trace that bench_load.py uses is tiled end to end (``../shared/tools/tile_trace.py``) to each
size; each size runs in a fresh child process, set up as the commands set theirs up
(``stallscope.allocator``): decode + build (no cache, in the process: no decode worker), then every
analysis pass (the stage names ``analyze_model`` reports), then the output (the JSON document and its
encoding). The growth table divides each stage's time by the 1M row's, scaled by the events: a linear
stage reads about 1.0 at every size, a superlinear one grows.

``--baseline REV`` runs the same children against a git revision checked out as a temporary
``git worktree`` (removed afterwards), each size right after this tree's so both see the same machine,
and prints both tables with the ratios side by side. ``--warm`` loads the model from the Parquet model
cache (filled by an untimed child first, in a temporary cache directory both trees share), so the table
is the analysis alone; ``--repeat N`` keeps each stage's fastest of N children; ``--clock cpu`` reports
each child's CPU seconds, steadier than wall seconds when other work shares the machine. "of which
system s" is the child's kernel time (first touches of fresh memory land there; on some VMs they cost
seconds per GiB, which shows as growth at the largest sizes).

    .venv/bin/python benchmarks/bench_scaling.py [--events 100000,1000000,3000000,10000000]
        [--baseline main] [--warm] [--repeat 1] [--clock wall|cpu] [--source TRACE]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(ROOT))  # dev.py

from bench_load import DEFAULT_SOURCE, tiled_trace  # noqa: E402

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
if sys.argv[3] == "one-name":  # one import name, the analyzer in layers
    import stallscope.analyzer as analyzer
    from stallscope.analyzer.analysis import analyze_model
    from stallscope.analyzer.load.loader import load_file
    from stallscope.analyzer.document.encoding import encode_json
    from stallscope.analyzer.document.analysis import encoded_document
else:  # a --baseline revision from before them (a top-level analyzer)
    import analyzer
    from analyzer.analysis import analyze_model
    from analyzer.loader import load_file
    from analyzer.output import encode_json
    try:
        from analyzer.output import encoded_document
    except ImportError:
        from analyzer.output import to_json as encoded_document
try:  # the process settings of the commands (``stallscope.analysing``), each as far as a revision has it
    from stallscope.allocator import keep_freed_memory
    keep_freed_memory()
    from stallscope.allocator import collect_less
    collect_less()
except ImportError:  # a --baseline revision from before them
    pass
times, cpu = {}, {}
t, c = time.perf_counter(), time.process_time()
model = load_file(Path(sys.argv[1]), use_cache=sys.argv[2] == "warm")
times["decode+build"], cpu["decode+build"] = time.perf_counter() - t, time.process_time() - c
last = ["", time.perf_counter(), time.process_time()]
def stage(name):
    now, now_cpu = time.perf_counter(), time.process_time()
    if last[0]:
        times[last[0]] = times.get(last[0], 0.0) + now - last[1]
        cpu[last[0]] = cpu.get(last[0], 0.0) + now_cpu - last[2]
    last[0], last[1], last[2] = name, now, now_cpu
result = analyze_model(model, stage=stage)
stage("output")  # as the CLI makes it: the document, then the analysis dropped before the encoding
events, bottleneck = len(model.events), result.summary.bottleneck
doc = encoded_document(result)
del result, model
encode_json(doc)
stage("")
print(json.dumps({"events": events, "times": times, "cpu": cpu, "analyzer": analyzer.__file__,
                  "bottleneck": bottleneck,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "system_s": resource.getrusage(resource.RUSAGE_SELF).ru_stime}))
"""

STAGES = (
    "decode+build",
    "window and devices",
    "graph",
    "critical path",
    "gaps",
    "syncs",
    "what-if",
    "findings",
    "self-check",
    "output",
)
ANALYSIS = STAGES[1:]  # everything after the load


@dataclass(frozen=True)
class Tree:
    label: str  # "this tree" or the baseline revision
    root: Path
    cache: Path  # XDG_CACHE_HOME of its children (--warm)


@functools.cache
def import_root(root: Path) -> tuple[Path, str]:
    """Where a child imports ``root``'s code from, and its layout: a tree installed as one import name
    (pyproject's package-dir) through its tree of links (``dev.link_tree``, made and byte-compiled once,
    as an install is: no child compiles a module inside a timed stage), an older one from its root."""
    if "package-dir" not in (root / "pyproject.toml").read_text():
        return root, "top-level"
    from dev import link_tree

    tree = link_tree(root)
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(tree)], check=True, stdout=subprocess.DEVNULL
    )
    return tree, "one-name"


def run_child(tree: Tree, trace: Path, warm: bool, clock: str = "wall") -> dict[str, Any]:
    """One child process in ``tree`` (its import root comes first on ``sys.path``)."""
    where, layout = import_root(tree.root)
    env = {**os.environ, "XDG_CACHE_HOME": str(tree.cache), "PYTHONPATH": str(where)}
    args = [sys.executable, "-c", CHILD, str(trace), "warm" if warm else "cold", layout]
    done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=where, check=False)
    if done.returncode != 0:
        raise SystemExit(f"benchmark child failed in {tree.root}:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if not Path(result["analyzer"]).resolve().is_relative_to(tree.root.resolve()):
        raise SystemExit(f"the child in {tree.root} imported {result['analyzer']}")
    if clock == "cpu":  # the tables read "times": CPU seconds instead of wall seconds
        result["times"] = result["cpu"]
    return result


def fastest(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each stage's fastest time over the runs (and the largest peak)."""
    out = dict(runs[0])
    out["times"] = {s: min(r["times"].get(s, 0.0) for r in runs) for s in runs[0]["times"]}
    out["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    out["system_s"] = min(r.get("system_s", float("nan")) for r in runs)
    return out


def total(row: dict[str, Any], stages: tuple[str, ...] = STAGES) -> float:
    return float(sum(row["times"].get(s, 0.0) for s in stages))


def per_event(row: dict[str, Any], ref: dict[str, Any], stage: str | None = None) -> float:
    """Time per event against the reference row's (1.0: linear)."""
    mine = row["times"].get(stage, 0.0) if stage else total(row)
    theirs = ref["times"].get(stage, 0.0) if stage else total(ref)
    if theirs <= 0:
        return float("nan")
    return float((mine / row["events"]) / (theirs / ref["events"]))


def stage_table(label: str, rows: dict[int, dict[str, Any]]) -> list[str]:
    ref = rows.get(1_000_000, next(iter(rows.values())))
    out = [
        f"{label}: seconds per stage",
        "",
        "| trace events | timed events | "
        + " | ".join(STAGES)
        + " | analysis s | total s | of which system s | peak RSS MB | per event vs 1M |",
        "|---:|---:|" + "---:|" * (len(STAGES) + 5),
    ]
    for n, r in rows.items():
        cells = " | ".join(f"{r['times'].get(s, 0.0):.2f}" for s in STAGES)
        out.append(
            f"| {n:,} | {r['events']:,} | {cells} | {total(r, ANALYSIS):.2f} | {total(r):.2f} | "
            f"{r.get('system_s', float('nan')):.2f} | {r['peak_rss_mb']:,.0f} | {per_event(r, ref):.2f} |"
        )
    return out


def growth_table(new: dict[int, dict[str, Any]], base: dict[int, dict[str, Any]] | None) -> list[str]:
    """Per stage, time per event against the 1M row (1.0: linear); with a baseline, ``new (base)``."""
    ref_new = new.get(1_000_000, next(iter(new.values())))
    ref_base = base.get(1_000_000, next(iter(base.values()))) if base else None
    out = [
        "growth: each stage's time per event against the 1M row (1.0 = linear)"
        + ("; this tree (baseline)" if base else ""),
        "",
        "| trace events | " + " | ".join(STAGES) + " | analysis | total |",
        "|---:|" + "---:|" * (len(STAGES) + 2),
    ]
    for n, r in new.items():
        cells = []
        for s in (*STAGES, "analysis", None):
            if s == "analysis":
                ratio = (total(r, ANALYSIS) / r["events"]) / (total(ref_new, ANALYSIS) / ref_new["events"])
                b = base[n] if base else None
                if b is not None and ref_base is not None:
                    was = (total(b, ANALYSIS) / b["events"]) / (
                        total(ref_base, ANALYSIS) / ref_base["events"]
                    )
                    cells.append(f"{ratio:.2f} ({was:.2f})")
                else:
                    cells.append(f"{ratio:.2f}")
                continue
            cell = f"{per_event(r, ref_new, s):.2f}"
            if base and ref_base is not None and n in base:
                cell += f" ({per_event(base[n], ref_base, s):.2f})"
            cells.append(cell)
        out.append(f"| {n:,} | " + " | ".join(cells) + " |")
    return out


def compare_table(label: str, new: dict[int, dict[str, Any]], base: dict[int, dict[str, Any]]) -> list[str]:
    out = [
        f"this tree against {label}",
        "",
        "| trace events | analysis s (baseline / this) | speed-up | total s (baseline / this) | speed-up "
        "| total vs 1M time (baseline / this) | peak RSS MB (baseline / this) | verdict (baseline / this) |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    ref_new = new.get(1_000_000, next(iter(new.values())))
    ref_base = base.get(1_000_000, next(iter(base.values())))
    for n, r in new.items():
        b = base[n]
        an, ab = total(r, ANALYSIS), total(b, ANALYSIS)
        tn, tb = total(r), total(b)
        out.append(
            f"| {n:,} | {ab:.2f} / {an:.2f} | {ab / an:.2f}x | {tb:.2f} / {tn:.2f} | {tb / tn:.2f}x | "
            f"{tb / total(ref_base):.2f}x / {tn / total(ref_new):.2f}x | "
            f"{b['peak_rss_mb']:,.0f} / {r['peak_rss_mb']:,.0f} | {b['bottleneck']} / {r['bottleneck']} |"
        )
    return out


def checkout(rev: str, where: Path) -> Path:
    path = where / "baseline"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(path), rev], check=True
    )
    return path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", default="100000,1000000,3000000,10000000")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--baseline", metavar="REV", help="a git revision to run side by side")
    parser.add_argument("--warm", action="store_true", help="load from the model cache (analysis alone)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="seconds of wall time, or of the child's CPU time (steadier on a shared machine)",
    )
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.events.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as tmp:
        cache = Path(tmp) / "cache"  # one model cache for both trees: a model is decoded once per size
        trees = [Tree("this tree", ROOT, cache)]
        if args.baseline:
            trees.append(Tree(args.baseline, checkout(args.baseline, Path(tmp)), cache))
        try:
            rows = measure(trees, sizes, args)
        finally:
            if args.baseline:
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(trees[1].root)], check=False
                )
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min)")
    how = "CPU seconds of each child" if args.clock == "cpu" else "wall seconds"
    print(f"{how}; model {'from the model cache (warm)' if args.warm else 'decoded (cold)'}")
    print()
    lines = stage_table("this tree", rows[0])
    if args.baseline:
        lines += ["", *stage_table(f"baseline {args.baseline}", rows[1])]
        lines += ["", *compare_table(args.baseline, rows[0], rows[1])]
    lines += ["", *growth_table(rows[0], rows[1] if args.baseline else None)]
    print("\n".join(lines))
    return 0


def measure(trees: list[Tree], sizes: list[int], args: argparse.Namespace) -> list[dict[int, dict[str, Any]]]:
    rows: list[dict[int, dict[str, Any]]] = [{} for _ in trees]
    for n in sizes:
        trace = tiled_trace(args.source, n)
        for tree, out in zip(trees, rows, strict=True):
            if args.warm and tree is trees[0]:
                run_child(tree, trace, warm=True)  # fills the cache, untimed
            load = os.getloadavg()[0]
            print(f"{tree.label}: {trace.name} (load average {load:.1f}) ...", file=sys.stderr, flush=True)
            out[n] = fastest([run_child(tree, trace, args.warm, args.clock) for _ in range(args.repeat)])
    return rows


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
