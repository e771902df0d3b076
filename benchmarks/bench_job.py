"""Whole-job analysis at scale: 64- and 256-rank jobs tiled from the real 8-rank DLRM traces.

    .venv/bin/python benchmarks/bench_job.py [--ranks 64 256] [--workers 1 2 N] [--skip-hta]

Each job rank r is DLRM rank r % 8 re-ranked (``distributedInfo``: rank r, world size n). Two planted
stragglers: every event of rank 13 from its fifth collective kernel on is shifted 2 ms later, and (in the
256-rank job) of rank 200 from its seventh on 3 ms later, so those collectives wait for them. Each configuration runs in a fresh process with an
empty cache (every rank is parsed and analysed):

  stallscope, workers 1   the ranks one after another in the process (no cluster)
  stallscope, workers k   a dask.distributed LocalCluster of k worker processes on 127.0.0.1
  HTA                     hta.trace_analysis.TraceAnalysis(trace_dir=JOB) in its own venv (its own pool)

Reported: wall time, peak RSS of the main process and of each worker, the pickled size of the rank tables
(what the job step holds) and whether the planted stragglers were found.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_load import SHARED, WORK, child, hta_python, hta_version  # noqa: E402

DLRM = SHARED / "traces" / "param_dlrm_v100_8rank"
PLANTED = {13: (4, 2000.0), 200: (6, 3000.0)}  # rank -> (its k-th collective kernel, delay µs)

CHILD_OURS = r"""
import json, pickle, resource, sys, time
from pathlib import Path
t0 = time.perf_counter()
from stallscope.analyzer.job.discover import job_files
from stallscope.analyzer.job.execute import Execution, reduce_all
from stallscope.analyzer.job.verdict import analyze_job, dedupe
workers = int(sys.argv[2])
files = job_files([sys.argv[1]])
how = Execution(workers=None if workers == 1 else workers, use_cache=False)
worker_rss = []
worker_cpu = []
def usage():
    import resource
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_maxrss, r.ru_utime + r.ru_stime
if workers > 1:
    import stallscope.analyzer.job.execute as ex
    from contextlib import contextmanager
    real = ex._client
    @contextmanager
    def measuring(h):
        with real(h) as client:
            yield client
            got = client.run(usage)
            worker_rss.extend(v[0] / 1024 for v in got.values())
            worker_cpu.extend(v[1] for v in got.values())
    ex._client = measuring
t1 = time.perf_counter()
tables, failed = reduce_all(files, how)
t2 = time.perf_counter()
tables, _ = dedupe(tables)
job = analyze_job(tables, failed)
t3 = time.perf_counter()
late = sorted({i.straggler for i in job.instances if i.late_us >= 1000})
self_use = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"ranks": len(tables), "failed": len(failed), "reduce_s": t2 - t1, "job_s": t3 - t2,
                  "wall_s": t3 - t1, "import_s": t1 - t0, "tables_kb": len(pickle.dumps(tables)) / 1024,
                  "instances": len(job.instances), "late_ranks": late,
                  "main_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "worker_rss_mb": worker_rss,
                  "cpu_s": self_use.ru_utime + self_use.ru_stime + sum(worker_cpu)}))
"""

CHILD_HTA = r"""
import json, logging, resource, sys, time
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"ranks": len(analysis.t.get_ranks()), "wall_s": t2 - t1, "import_s": t1 - t0,
                  "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
                  "main_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "children_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def _source_docs() -> list[dict[str, Any]]:
    files = sorted(DLRM.glob("*.json.gz"))
    docs = [json.loads(gzip.decompress(f.read_bytes())) for f in files]
    return sorted(docs, key=lambda d: d["distributedInfo"]["rank"])


def _shift_from_collective(doc: dict[str, Any], k: int, delay: float) -> None:
    """Shift every timed event from the k-th NCCL kernel's launch call on by ``delay`` µs."""
    events = doc["traceEvents"]
    kernels = sorted(
        (e for e in events if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower()),
        key=lambda e: e["ts"],
    )
    corr = kernels[k]["args"]["correlation"]
    launch = next(
        e for e in events if e.get("cat") == "cuda_runtime" and e["args"].get("correlation") == corr
    )
    # the host op that made the collective starts a little before its launch call
    cut = launch["ts"] - 100.0
    for e in events:
        if e.get("ph") != "M" and isinstance(e.get("ts"), (int, float)) and e["ts"] >= cut:
            e["ts"] += delay


def make_job(n: int) -> Path:
    out = WORK / f"job-{n}"
    if (out / "done").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    print(f"writing a {n}-rank job to {out} ...", flush=True)
    sources = _source_docs()
    for r in range(n):
        doc = json.loads(json.dumps(sources[r % 8]))
        doc["distributedInfo"] = doc["distributedInfo"] | {"rank": r, "world_size": n}
        if r in PLANTED:
            _shift_from_collective(doc, *PLANTED[r])
        (out / f"rank{r}.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode(), 6))
    (out / "done").write_text("")
    return out


def run_child(python: str | Path, code: str, *args: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as cache_home:  # an empty cache: every rank is parsed
        result: dict[str, Any] = child(python, code, *args, env=os.environ | {"XDG_CACHE_HOME": cache_home})
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[64, 256])
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, os.cpu_count() or 2])
    p.add_argument("--skip-hta", action="store_true")
    a = p.parse_args(argv)
    if not DLRM.is_dir():
        print(f"bench_job: {DLRM} not found", file=sys.stderr)
        return 2
    rows = []
    for n in a.ranks:
        job = make_job(n)
        for w in dict.fromkeys(a.workers):
            r = run_child(sys.executable, CHILD_OURS, str(job), str(w))
            rows.append((n, f"stallscope, workers {w}", r))
            print(n, w, json.dumps(r), flush=True)
        if not a.skip_hta:
            r = run_child(hta_python(), CHILD_HTA, str(job))
            rows.append((n, f"HTA {hta_version(hta_python())} TraceAnalysis", r))
            print(n, "hta", json.dumps(r), flush=True)
    print(
        "\n| ranks | run | wall s | CPU s (all processes) | main peak RSS MB | per-worker peak RSS MB "
        "| rank tables KB | stragglers found |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for n, name, r in rows:
        workers = r.get("worker_rss_mb") or []
        per = f"{min(workers):.0f}-{max(workers):.0f}" if workers else "-"
        if "children_rss_mb" in r:
            per = f"{r['children_rss_mb']:.0f} (largest child)"
        late = r.get("late_ranks")
        found = "-" if late is None else ", ".join(map(str, late))
        tables = f"{r['tables_kb']:.0f}" if "tables_kb" in r else "-"
        print(
            f"| {n} | {name} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['main_rss_mb']:.0f} | {per} "
            f"| {tables} | {found} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
