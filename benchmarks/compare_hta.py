"""Compare stallscope's analysis with Holistic Trace Analysis (HTA) on the shared real traces.

Run from the repo root: ``.venv/bin/python benchmarks/compare_hta.py [--json OUT]``.

For every single-rank trace in ``../shared/traces`` (and rank 0 of the DLRM folder) this runs
(a) stallscope in-process and (b) HTA 0.5.0 in a subprocess of its own venv
(``benchmarks/_work/hta-venv``): ``get_temporal_breakdown`` and ``critical_path_analysis``. For the trace
that *is* HTA's output (``*overlaid_critical_path*``) it also reads HTA's critical path back from the
``critical_path`` flow events and the ``args.critical`` marks it left on the events.

All times are microseconds. HTA's figures are over HTA's own span (see docs/validation.md).

``--embedded`` checks instead that a trace carrying stallscope's sidecar under its top-level
``"stallscope"`` key (``stallscope.collector.embed``, what ``stallscope profile`` writes) reads in HTA exactly as
the same trace without it: for each trace, HTA's figures on the original and on an embedded copy must be
equal (load time aside), and the copy must stay one JSON object with the same Kineto keys.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from stallscope.analyzer.analysis import analyze
from stallscope.analyzer.load.loader import load

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "traces"
HTA_PY = REPO / "benchmarks" / "_work" / "hta-venv" / "bin" / "python"
HTA_TIMEOUT_S = 600

Json = dict[str, Any]

# Runs inside the HTA venv. argv: trace path. Prints one JSON object on its last stdout line.
HTA_WORKER = r"""
import json, logging, os, sys, tempfile, time, traceback
logging.disable(logging.WARNING)
import pandas as pd

# HTA 0.5.0 calls df.drop(axis=1, columns=[...]), which pandas >= 3 rejects; drop the redundant axis.
_drop = pd.DataFrame.drop

def _compat_drop(self, labels=None, *, axis=0, index=None, columns=None, **kw):
    if index is not None or columns is not None:
        return _drop(self, labels, index=index, columns=columns, **kw)
    return _drop(self, labels, axis=axis, **kw)

pd.DataFrame.drop = _compat_drop
from hta.trace_analysis import TraceAnalysis

def breakdown(ta):
    df = ta.get_temporal_breakdown(visualize=False)
    row = df[df["rank"] == 0].iloc[0] if (df["rank"] == 0).any() else df.iloc[0]
    t = ta.t.get_trace(int(row["rank"]))
    k = t[t["stream"].ne(-1)]
    return {
        "rank": int(row["rank"]),
        "idle_us": float(row["idle_time(us)"]),
        "compute_us": float(row["compute_time(us)"]),
        "non_compute_us": float(row["non_compute_time(us)"]),
        "span_us": float(row["kernel_time(us)"]),
        "span_start_us": float(k["ts"].min() + ta.t.min_ts),
        "span_end_us": float((k["ts"] + k["dur"]).max() + ta.t.min_ts),
    }

def critical(ta, rank):
    sym = ta.t.symbol_table.get_sym_id_map()
    t = ta.t.get_trace(rank)
    ids = [v for k, v in sym.items() if "ProfilerStep" in k]
    n = int(t["name"].isin(ids).sum()) if ids else 0
    if n:
        ann, inst = "ProfilerStep", (0, n - 1)
    else:
        ann, inst = "", None
    res = ta.critical_path_analysis(rank=rank, annotation=ann, instance_id=inst)
    if res is None:
        return {"error": "critical_path_analysis returned None"}
    g, ok = res
    if not ok:
        return {"error": "critical_path_analysis reported failure", "annotation": ann}
    nodes = [g.node_list[i] for i in g.critical_path_nodes]
    bd = g.get_critical_path_breakdown()
    by_bound = {str(k) if k else "dependency(0-weight)": float(v) for k, v in bd.groupby("bound_by").duration.sum().items()}
    by_type = {str(k): float(v) for k, v in bd.groupby("type").duration.sum().items()}
    return {
        "annotation": ann or "(whole trace)",
        "instances": list(inst) if inst else None,
        "length_us": float(sum(e.weight for e in g.critical_path_edges_set)),
        "span_us": float(nodes[-1].ts - nodes[0].ts),
        "start_us": float(nodes[0].ts + ta.t.min_ts),
        "end_us": float(nodes[-1].ts + ta.t.min_ts),
        "edges": len(g.critical_path_edges_set),
        "by_bound": by_bound,
        "by_type": by_type,
    }

out = {}
path = sys.argv[1]
with tempfile.TemporaryDirectory() as d:
    os.symlink(os.path.abspath(path), os.path.join(d, "rank-0.pt.trace.json.gz"))
    t0 = time.perf_counter()
    try:
        ta = TraceAnalysis(trace_dir=d)
        sym = ta.t.symbol_table.get_sym_id_map()
        steps = [k for k in sym if "ProfilerStep" in k]
        out["step_symbols"] = len(steps)
        out["load_s"] = round(time.perf_counter() - t0, 2)
        try:
            out["breakdown"] = breakdown(ta)
        except Exception as e:
            out["breakdown"] = {"error": f"{type(e).__name__}: {e}".splitlines()[0]}
        ta_cp = ta
        if len(steps) >= 2:
            # HTA drops the last profiler step by default; reload with it so the critical path covers
            # the same steps as stallscope's window, and report that breakdown too.
            ta_cp = TraceAnalysis(trace_dir=d, include_last_profiler_step=True)
            try:
                out["breakdown_last"] = breakdown(ta_cp)
            except Exception as e:
                out["breakdown_last"] = {"error": f"{type(e).__name__}: {e}".splitlines()[0]}
        try:
            out["critical"] = critical(ta_cp, out.get("breakdown", {}).get("rank", 0))
        except Exception as e:
            tb = traceback.extract_tb(e.__traceback__)[-1]
            out["critical"] = {"error": f"{type(e).__name__}: {e} @ {os.path.basename(tb.filename)}:{tb.lineno}".splitlines()[0]}
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}".splitlines()[0]
    out["total_s"] = round(time.perf_counter() - t0, 2)
print(json.dumps(out))
"""


def find_traces() -> list[Path]:
    """Single-rank trace files, then rank 0 of each multi-rank folder."""
    files = sorted(p for p in TRACES.glob("*.json.gz") if p.is_file())
    for folder in sorted(p for p in TRACES.iterdir() if p.is_dir()):
        ranked = sorted(folder.glob("worker0_*.json.gz")) or sorted(folder.glob("*rank0*.json.gz"))
        files.extend(ranked[:1])
    return files


def run_ours(path: Path) -> Json:
    t0 = time.perf_counter()
    result = analyze(load(path, use_cache=False))
    cp = result.critical
    s = result.summary
    return {
        "window_start_us": result.window.start_us,
        "window_end_us": result.window.end_us,
        "window_us": result.window.dur_us,
        "window_basis": result.window.basis.value,
        "steps": len(result.model.steps),
        "critical_us": cp.length_us if cp else None,
        "critical_breakdown_us": {k.value: v for k, v in cp.breakdown_us.items()} if cp else {},
        "device_busy_us": s.device_busy_us,
        "device_idle_us": s.device_idle_us,
        "idle_by_cause_us": {k.value: v for k, v in result.idle_by_cause.items()},
        "seconds": round(time.perf_counter() - t0, 2),
    }


def run_hta(path: Path) -> Json:
    if not HTA_PY.exists():
        return {"error": f"HTA venv missing: {HTA_PY}"}
    try:
        proc = subprocess.run(
            [str(HTA_PY), "-c", HTA_WORKER, str(path)],
            capture_output=True,
            text=True,
            timeout=HTA_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {HTA_TIMEOUT_S}s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {proc.returncode}: {tail}"}
    out: Json = json.loads(lines[-1])
    return out


def check_embedded(paths: list[Path], sidecar: Path) -> int:
    """HTA's figures of each trace, as recorded and with ``sidecar`` embedded: 0 when all are equal."""
    import shutil
    import tempfile

    sys.path.insert(0, str(REPO))
    from stallscope.collector.embed import embed_sidecar

    doc = json.loads(sidecar.read_text())
    failed = 0
    for path in paths:
        with tempfile.TemporaryDirectory() as d:
            copy = Path(d) / path.name
            shutil.copyfile(path, copy)
            embed_sidecar(copy, doc)
            with gzip.open(path) as f:
                before = json.load(f)
            with gzip.open(copy) as f:
                after = json.load(f)
            assert after.pop("stallscope") == doc and after == before, path.name
            plain, embedded = run_hta(path), run_hta(copy)
        for r in (plain, embedded):
            for key in ("load_s", "total_s", "breakdown_s", "critical_s"):
                r.pop(key, None)
        same = plain == embedded and "error" not in plain
        failed += not same
        verdict = "same figures" if same else f"DIFFERENT: {plain} / {embedded}"
        print(f"{path.name}: HTA with the sidecar embedded: {verdict}")
    return 1 if failed else 0


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def read_overlaid(path: Path) -> Json | None:
    """HTA's own critical path, as its overlay left it: ``critical_path`` flows plus ``args.critical``."""
    with gzip.open(path, "rt") as fh:
        doc: Json = json.load(fh)
    events: list[Json] = doc["traceEvents"]
    flows = [e for e in events if e.get("cat") == "critical_path"]
    if not flows:
        return None
    starts = {e["id"]: e for e in flows if e["ph"] == "s"}
    ends = {e["id"]: e for e in flows if e["ph"] == "f"}
    by_type: dict[str, list[float]] = {}
    hops: dict[str, int] = {}
    for i, s in starts.items():
        f = ends[i]
        kind = str(s["args"]["type"]).removeprefix("critical_path_")
        by_type.setdefault(kind, []).append(float(s["args"]["weight"]))
        src = "gpu" if "stream" in str(s.get("tid")) or s["pid"] == 0 else "cpu"
        dst = "gpu" if f["pid"] == 0 else "cpu"
        hops[f"{src}->{dst}"] = hops.get(f"{src}->{dst}", 0) + 1
    marked = [e for e in events if e.get("ph") == "X" and e.get("args", {}).get("critical")]
    gpu_cats = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_sync"}
    gpu = [(float(e["ts"]), float(e["ts"] + e["dur"])) for e in marked if e.get("cat") in gpu_cats]
    cpu = [(float(e["ts"]), float(e["ts"] + e["dur"])) for e in marked if e.get("cat") not in gpu_cats]
    ts = [float(e["ts"]) for e in flows] + [a for a, _ in gpu + cpu] + [b for _, b in gpu + cpu]
    return {
        "flow_edges": len(starts),
        "flow_weight_by_type_us": {k: sum(v) for k, v in by_type.items()},
        "flow_count_by_type": {k: len(v) for k, v in by_type.items()},
        "hops": hops,
        "critical_events": len(marked),
        "critical_gpu_events": len(gpu),
        "start_us": min(ts),
        "end_us": max(ts),
        "span_us": max(ts) - min(ts),
        "cpu_union_us": _union(cpu),
        "gpu_union_us": _union(gpu),
    }


def _f(x: float | None, nd: int = 0) -> str:
    return "-" if x is None else f"{x:,.{nd}f}"


def _short(name: str) -> str:
    return name.removesuffix(".pt.trace.json.gz").split("/")[-1][:34]


def print_table(rows: list[Json]) -> None:
    hdr = (
        "trace",
        "win(us)",
        "ourCP",
        "host/dev/launch/sync/idle/input",
        "htaCP len/span",
        "hta cpu/gpu/launch/k-k/comm",
        "our busy/idle",
        "hta span: idle/comp/noncomp",
    )
    out: list[tuple[str, ...]] = [hdr]
    for r in rows:
        o, h = r["ours"], r["hta"]
        b = o["critical_breakdown_us"]
        split = "/".join(_f(b.get(k)) for k in ("host", "device", "launch", "sync", "idle", "input"))
        cp = h.get("critical", {}) if "error" not in h else {"error": h["error"]}
        if "error" in cp:
            hcp, hsplit = "ERR", "-"
        else:
            hcp = f"{_f(cp['length_us'])}/{_f(cp['span_us'])}"
            bb = cp["by_bound"]
            hsplit = "/".join(
                _f(bb.get(k, 0.0))
                for k in (
                    "cpu_bound",
                    "gpu_compute_bound",
                    "gpu_kernel_launch_overhead",
                    "gpu_kernel_kernel_overhead",
                    "gpu_communication_bound",
                )
            )
        bd = h.get("breakdown_last") or h.get("breakdown") or {"error": h.get("error", "?")}
        if "error" in bd:
            hbd = "ERR"
        else:
            hbd = (
                f"{_f(bd['span_us'])}: {_f(bd['idle_us'])}/{_f(bd['compute_us'])}/{_f(bd['non_compute_us'])}"
            )
        out.append(
            (
                _short(r["trace"]),
                _f(o["window_us"]),
                _f(o["critical_us"]),
                split,
                hcp,
                hsplit,
                f"{_f(o['device_busy_us'])}/{_f(o['device_idle_us'])}",
                hbd,
            )
        )
    widths = [max(len(row[i]) for row in out) for i in range(len(hdr))]
    for row in out:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--json", type=Path, help="write all measured figures here")
    ap.add_argument("--only", help="substring of the trace names to run")
    ap.add_argument(
        "--embedded",
        type=Path,
        metavar="SIDECAR",
        help="check that HTA reads each trace with this sidecar.json embedded as it reads it without",
    )
    args = ap.parse_args()
    if args.embedded:
        return check_embedded(
            [p for p in find_traces() if not args.only or args.only in str(p.relative_to(TRACES))],
            args.embedded,
        )
    rows: list[Json] = []
    for path in find_traces():
        name = str(path.relative_to(TRACES))
        if args.only and args.only not in name:
            continue
        row: Json = {"trace": name}
        try:
            row["ours"] = run_ours(path)
        except Exception as e:  # report and continue
            print(f"{name}: stallscope failed: {type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)
            continue
        row["hta"] = run_hta(path)
        for part in ("error", "breakdown", "critical"):
            err = row["hta"].get(part, {}) if part != "error" else {"error": row["hta"].get("error")}
            if isinstance(err, dict) and err.get("error"):
                print(f"{name}: HTA {part} failed: {err['error']}", file=sys.stderr)
        if "overlaid_critical_path" in name:
            row["hta_overlay"] = read_overlaid(path)
        rows.append(row)
        print(
            f"done {name} (ours {row['ours']['seconds']}s, hta {row['hta'].get('total_s', '-')}s)",
            file=sys.stderr,
        )
    print_table(rows)
    for r in rows:
        if r.get("hta_overlay"):
            print(f"\nHTA overlay ({r['trace']}): {json.dumps(r['hta_overlay'])}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
