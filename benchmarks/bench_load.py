#!/usr/bin/env python3
"""Load benchmark: stallscope's cold and warm trace load against Holistic Trace Analysis, same file, one run.

A real trace from ../shared/traces is tiled end to end (../shared/tools/tile_trace.py) to at least
--events events. Each measurement runs in a fresh child process that reports wall time of the load call
(imports excluded, reported apart) and the process's peak RSS:

  stallscope cold    empty cache: parse and build the model (a first `analyze`); the Parquet cache is
                     written by a background thread while the caller goes on (both times reported)
  stallscope parse   the same without touching the cache (`--no-cache`)
  stallscope warm    second open of the same file: served from the cache
  stallscope analyze cold load plus every analysis pass and the JSON document (a first `analyze`), in
                     process; its stages are printed below the table
  analyze --json CLI `stallscope analyze TRACE --json OUT -q` as a user runs it (parsing with a decode
                     worker where there is a second core, see docs/analysis.md), timed from process start
                     to exit (interpreter, imports, writing OUT, finishing the cache write): cold (empty
                     cache), then warm (the same command again: the answer cache); its memory is the
                     larger of its processes' peak RSS and the peak of their summed PSS (the command
                     and its decode worker, sampled every 50 ms)
  HTA                hta.trace_analysis.TraceAnalysis(trace_dir=...) on the same file, in its own venv
                     (benchmarks/_work/hta-venv, PyPI HolisticTraceAnalysis; installed on first use)

HTA's time is its load alone (imports excluded); the CLI rows include everything. stallscope's own modules
are byte-compiled first, as installing a wheel does and as HTA's venv has them: an editable install leaves
that to the first run, which cannot save it where PYTHONDONTWRITEBYTECODE is set, and each command then
compiles ~60 modules again (~0.05 s). The machine's load
average (other work on it) is printed with the table.

usage: python3 dev.py bench [--events N] [--source TRACE] [--repeat K] [--write-results]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORK = HERE / "_work"
SHARED = ROOT.parent / "shared"
DEFAULT_SOURCE = SHARED / "traces" / "hta_v100_ns_resolution_rank0.pt.trace.json.gz"
HTA_VENV = WORK / "hta-venv"
HTA_PACKAGE = "HolisticTraceAnalysis"

CHILD_OURS = r"""
import json, resource, sys, time
from pathlib import Path
t0 = time.perf_counter()
from stallscope.analyzer.load import cache
from stallscope.analyzer.load.loader import load_file
t1 = time.perf_counter()
model = load_file(Path(sys.argv[1]), use_cache=sys.argv[2] == "cache")
t2 = time.perf_counter()
cache.wait()  # the cache is written in a background thread while the caller analyses
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "written_s": t3 - t1, "events": len(model.events),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

CHILD_ANALYZE = r"""
import json, resource, sys, time
from pathlib import Path
t0 = time.perf_counter()
from stallscope.analyzer.load import cache
from stallscope.analyzer.analysis import analyze_model
from stallscope.analyzer.load.loader import load_file
from stallscope.analyzer.document.analysis import to_json
from stallscope.analyzer.document.encoding import encode_json
t1 = time.perf_counter()
c1 = time.process_time()
model = load_file(Path(sys.argv[1]))
t2 = time.perf_counter()
c2 = time.process_time()
result = analyze_model(model)
t3 = time.perf_counter()
encode_json(to_json(result))
t4 = time.perf_counter()
cache.wait()
t5 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t4 - t1, "cold_load_s": t2 - t1, "cold_load_cpu_s": c2 - c1,
                  "analysis_s": t4 - t2, "passes_s": t3 - t2, "output_s": t4 - t3, "cache_wait_s": t5 - t4,
                  "events": len(model.events), "bottleneck": result.summary.bottleneck,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

#: runs the CLI as a child and reports its wall time (process start to exit) and peak memory: the
#: largest of its processes' peak RSS and of the summed PSS of the process and its children (a decode
#: worker), sampled every 50 ms (PSS splits pages shared after a fork between the processes: a sum of RSS
#: would count them twice)
CHILD_CLI = r"""
import json, os, resource, subprocess, sys, time
def pss_kb(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("Pss:")), 0)
    except OSError:
        return 0
def tree(pid):
    out = [pid]
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [q for c in f.read().split() for q in tree(int(c))]
    except OSError:
        pass
    return out
t = time.perf_counter()
proc = subprocess.Popen([sys.executable, "-c", "from stallscope.commands import entry; entry()", *sys.argv[1:]])
tree_peak_kb = 0
while proc.poll() is None:
    tree_peak_kb = max(tree_peak_kb, sum(pss_kb(p) for p in tree(proc.pid)))
    time.sleep(0.05)
wall = time.perf_counter() - t
if proc.returncode:
    sys.exit(f"stallscope exited {proc.returncode}")
largest_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"load_s": wall, "import_s": 0.0, "peak_rss_mb": max(largest_kb, tree_peak_kb) / 1024,
                  "largest_rss_mb": largest_kb / 1024, "tree_pss_mb": tree_peak_kb / 1024}))
"""

CHILD_HTA = r"""
import json, logging, resource, sys, time
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
df = analysis.t.get_trace(0)
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "events": int(len(df)),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def tiled_trace(source: Path, events: int) -> Path:
    out = WORK / f"tiled-{source.name.split('.')[0]}-{events}.pt.trace.json.gz"
    if not out.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        tool = SHARED / "tools" / "tile_trace.py"
        print(f"tiling {source.name} to >= {events:,} events ...", flush=True)
        subprocess.run(
            [sys.executable, str(tool), str(source), str(out), "--events", str(events)], check=True
        )
    return out


def hta_python() -> Path:
    py = HTA_VENV / "bin" / "python"
    if not py.exists():
        print(f"installing {HTA_PACKAGE} into {HTA_VENV} (once) ...", flush=True)
        venv.create(HTA_VENV, with_pip=True)
        subprocess.run([str(py), "-m", "pip", "install", "--quiet", HTA_PACKAGE], check=True)
    return py


def child(python: Path | str, code: str, *args: str, env: dict[str, str] | None = None) -> dict[str, float]:
    done = subprocess.run(
        [str(python), "-c", code, *args], capture_output=True, text=True, env=env, cwd=ROOT, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"benchmark child failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def hta_version(py: Path) -> str:
    done = subprocess.run(
        [str(py), "-m", "pip", "show", HTA_PACKAGE], capture_output=True, text=True, check=False
    )
    return next(
        (ln.split(":", 1)[1].strip() for ln in done.stdout.splitlines() if ln.startswith("Version")), "?"
    )


def best(runs: list[dict[str, float]]) -> dict[str, float]:
    return min(runs, key=lambda r: r["load_s"])


def measure(trace: Path, repeat: int, skip_hta: bool) -> dict[str, dict[str, float]]:
    rows: dict[str, list[dict[str, float]]] = {
        "stallscope cold": [],
        "stallscope parse": [],
        "stallscope warm": [],
        "stallscope analyze": [],
        "analyze --json CLI cold": [],
        "analyze --json CLI warm": [],
        "analyze --json CLI cold, no decode worker": [],
    }
    for _ in range(repeat):
        cache = tempfile.mkdtemp(prefix="stallscope-bench-cache-")
        env = {**os.environ, "XDG_CACHE_HOME": cache}
        try:
            rows["stallscope cold"].append(child(sys.executable, CHILD_OURS, str(trace), "cache", env=env))
            rows["stallscope warm"].append(child(sys.executable, CHILD_OURS, str(trace), "cache", env=env))
            rows["stallscope parse"].append(child(sys.executable, CHILD_OURS, str(trace), "nocache", env=env))
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        cache = tempfile.mkdtemp(prefix="stallscope-bench-cache-")
        try:  # the whole first `analyze`: cold load, every analysis pass, the JSON document
            env = {**os.environ, "XDG_CACHE_HOME": cache}
            rows["stallscope analyze"].append(child(sys.executable, CHILD_ANALYZE, str(trace), env=env))
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        cache = tempfile.mkdtemp(prefix="stallscope-bench-cache-")
        try:  # the command a user types, twice: the second is answered from the cache
            env = {**os.environ, "XDG_CACHE_HOME": cache}
            cli = ("analyze", str(trace), "--json", os.path.join(cache, "out.json"), "-q")
            rows["analyze --json CLI cold"].append(child(sys.executable, CHILD_CLI, *cli, env=env))
            rows["analyze --json CLI warm"].append(child(sys.executable, CHILD_CLI, *cli, env=env))
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        cache = tempfile.mkdtemp(prefix="stallscope-bench-cache-")
        try:  # the same cold command parsing in one process (STALLSCOPE_DECODE_WORKERS=0)
            env = {**os.environ, "XDG_CACHE_HOME": cache, "STALLSCOPE_DECODE_WORKERS": "0"}
            cli = ("analyze", str(trace), "--json", os.path.join(cache, "out.json"), "-q")
            rows["analyze --json CLI cold, no decode worker"].append(
                child(sys.executable, CHILD_CLI, *cli, env=env)
            )
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    out = {name: best(r) for name, r in rows.items()}
    if not skip_hta:
        py = hta_python()
        hta_dir = WORK / "hta-input"
        shutil.rmtree(hta_dir, ignore_errors=True)
        hta_dir.mkdir(parents=True)
        os.symlink(trace, hta_dir / "rank-0.pt.trace.json.gz")
        out["HTA TraceAnalysis"] = best([child(py, CHILD_HTA, str(hta_dir)) for _ in range(repeat)])
        out["HTA TraceAnalysis"]["version"] = hta_version(py)  # type: ignore[assignment]
    return out


def table(results: dict[str, dict[str, float]], trace: Path) -> str:
    hta = results.get("HTA TraceAnalysis")
    lines = [
        f"trace: {trace.name} ({trace.stat().st_size / 1e6:.1f} MB gzip, "
        f"{int(results['stallscope parse']['events']):,} events kept by stallscope"
        + (f", {int(hta['events']):,} rows in HTA's frame" if hta else "")
        + ")",
        "",
        "| load | model ready s | + cache on disk s | peak RSS MB | HTA time / ours | ours RSS / HTA's |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        speed = f"{hta['load_s'] / r['load_s']:.1f}x" if hta else "-"
        mem = f"{r['peak_rss_mb'] / hta['peak_rss_mb']:.2f}" if hta else "-"
        written = f"{r['written_s']:.2f}" if "written_s" in r else "-"
        lines.append(f"| {name} | {r['load_s']:.2f} | {written} | {r['peak_rss_mb']:.0f} | {speed} | {mem} |")
    full = results["stallscope analyze"]
    lines.append("")
    lines.append(
        f"full analyze (cold load {full['cold_load_s']:.2f} s + analysis {full['analysis_s']:.2f} s, "
        f"verdict {full['bottleneck']}-bound): {full['load_s']:.2f} s = "
        f"{full['load_s'] / results['stallscope cold']['load_s']:.2f}x the cold load (target <= 2x)"
    )
    lines.append(
        f"its stages: imports {full['import_s']:.2f} s, decode+build {full['cold_load_s']:.2f} s "
        f"({full['cold_load_cpu_s']:.2f} s of CPU), analysis passes {full['passes_s']:.2f} s, "
        f"JSON document {full['output_s']:.2f} s, then waiting for the cache write {full['cache_wait_s']:.2f} s"
    )
    lines.append(
        "imports (not in the times above): "
        + ", ".join(
            f"{n} {r['import_s']:.2f} s"
            for n, r in results.items()
            if n != "stallscope warm" and not n.startswith("analyze --json CLI")
        )
        + "; the CLI rows include theirs"
    )
    return "\n".join(lines)


PACKAGES = ("analyzer", "collector", "dashboard", "stallscope")


def byte_compile() -> None:
    """Write the ``.pyc`` files of stallscope's packages (up-to-date ones are left as they are)."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *PACKAGES], cwd=ROOT, check=True, stdout=subprocess.DEVNULL
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=1, help="runs per measurement; the fastest is kept")
    p.add_argument("--skip-hta", action="store_true", help="measure stallscope only")
    p.add_argument(
        "--write-results",
        action="store_true",
        help="also print a heading (command, machine) for the table, to paste into docs/performance.md",
    )
    a = p.parse_args()
    if not a.source.exists():
        print(f"bench_load: {a.source}: not found (the benchmark needs ../shared/traces)", file=sys.stderr)
        return 2
    WORK.mkdir(exist_ok=True)
    trace = tiled_trace(a.source, a.events)
    byte_compile()
    before = os.getloadavg()[0]
    results = measure(trace, a.repeat, a.skip_hta)
    text = table(results, trace)
    text += f"\nload average (1 min) {before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    print(text)
    if a.write_results:
        machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        hta = results.get("HTA TraceAnalysis", {})
        print("\nTo paste into docs/performance.md (replacing the table there):\n")
        print(f"bench_load.py --source {a.source.name} --events {a.events} --repeat {a.repeat}", end="")
        print(f" ({machine}, HTA {hta.get('version', '-')})\n\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
