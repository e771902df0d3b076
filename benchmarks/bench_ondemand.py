"""The cost of waiting on demand, and of one capture (``stallscope profile --on-demand``, ``stallscope
capture``), on the example workloads (``examples/*.py``).

    python benchmarks/bench_ondemand.py [--steps 300] [--runs 5] [--example item_logging ...]

Each example's step loop (``for _step in range(15):``) is made ``--steps`` long and timed from inside
the program: the time of every iteration after the first 10 (warm-up), summed, as the process' CPU time
(all its threads: the control thread's polling counts; another process on the machine does not) and as
wall time. torch runs one intra-op thread (``OMP_NUM_THREADS=1``) in every configuration, so that its
idle threads' spinning does not blur the CPU time. The same program text
runs in three configurations, one fresh process each, in an order that rotates from run to run so that
the runs a ratio compares are seconds apart:

- ``bare``: ``python prog.py``;
- ``waiting``: ``stallscope profile --on-demand prog.py`` with no capture: the step hooks, the step
  timer and the control thread;
- ``captured``: the same, with one ``stallscope capture PID`` (5 steps, the run's defaults) asked from this
  script once the program has made a third of its steps.

First the unit costs, which the noise of whole runs hides: ``--unit-steps`` optimizer steps that do
nothing, bare and waiting (the main thread's CPU time per step, the difference), and the control
thread's CPU time per second of the run. Then, per example, the median steady-state CPU time of each configuration, the ratio waiting / bare
(the target is within 2%: 1.02) with its spread over runs, the same ratio in wall time, and for the
capture its wall time from the request to the bundle, the bundle's size, and what it cost the program
(captured − waiting, CPU time).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
LOOP = re.compile(r"^for (\w+) in range\(15\):", re.M)
PRELUDE = """\
import os as _os
import time as _time


def _bench_steps(n, _out=_os.environ["BENCH_OUT"]):
    marks = []
    for i in range(n):
        marks.append((_time.process_time(), _time.perf_counter()))
        yield i
    marks.append((_time.process_time(), _time.perf_counter()))
    with open(_out, "w") as f:
        f.write(repr((marks[-1][0] - marks[10][0], marks[-1][1] - marks[10][1])))


"""


TINY = """\
import os
import threading
import time

import torch

# optimizer steps that do nothing (no gradients): what a step costs is the hooks' cost
w = torch.zeros(4, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
n = int(os.environ["BENCH_N"])
for _ in range(100):
    opt.step()
cpu, wall = time.thread_time(), time.perf_counter()
for _ in range(n):
    opt.step()
cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
control = 0.0
for t in threading.enumerate():
    if t.name == "stallscope-control" and t.native_id is not None:
        fields = open(f"/proc/self/task/{t.native_id}/stat").read().rsplit(")", 1)[1].split()
        control = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
with open(os.environ["BENCH_OUT"], "w") as f:
    f.write(repr((cpu, wall, control)))
"""


def unit_costs(folder: Path, n: int, runs: int) -> None:
    """The waiting run's costs one by one: a step (``n`` optimizer steps that do nothing, main thread CPU
    time, bare against waiting) and the control thread (its CPU time per second of the run)."""
    prog = folder / "tiny.py"
    prog.write_text(TINY)
    runtime = folder / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    per_step, control = [], []
    for r in range(runs):
        got = {}
        for kind in ("bare", "waiting") if r % 2 == 0 else ("waiting", "bare"):
            out = folder / f"tiny-{kind}.out"
            env = {**os.environ, "BENCH_OUT": str(out), "BENCH_N": str(n), "PYTHONPATH": str(ROOT)}
            env.update(XDG_RUNTIME_DIR=str(runtime), OMP_NUM_THREADS="1")
            cmd = [sys.executable, str(prog)]
            if kind == "waiting":
                cmd = [
                    sys.executable,
                    "-m",
                    "stallscope",
                    "profile",
                    "--on-demand",
                    "-o",
                    str(folder / f"t{r}"),
                    str(prog),
                ]
            t0 = time.perf_counter()
            subprocess.run(cmd, env=env, cwd=folder, check=True, capture_output=True)
            lived = time.perf_counter() - t0
            cpu, _wall, ctl = (float(x) for x in out.read_text().strip("()").split(","))
            got[kind] = cpu
            if kind == "waiting":
                control.append(ctl / lived)
        per_step.append((got["waiting"] - got["bare"]) / n * 1e6)
    print(
        f"a step: {statistics.median(per_step):.1f} µs more on the main thread [{min(per_step):.1f}, "
        f"{max(per_step):.1f}] ({n:,} optimizer steps, {runs} runs); the control thread: "
        f"{statistics.median(control) * 1e3:.2f} ms CPU per second of the run "
        f"({statistics.median(control):.3%} of a core)",
        flush=True,
    )


def program(example: Path, steps: int, folder: Path) -> Path | None:
    """The example with its step loop ``steps`` long and timed, or None when it has no such loop."""
    text = example.read_text()
    if not LOOP.search(text):
        return None
    doc_end = text.index('"""', 3) + 3 if text.startswith('"""') else 0
    body = LOOP.sub(lambda m: f"for {m.group(1)} in _bench_steps({steps}):", text[doc_end:], count=1)
    path = folder / example.name
    path.write_text(text[:doc_end] + "\n" + PRELUDE + body)
    return path


def run(
    kind: str, prog: Path, folder: Path, steps: int
) -> tuple[tuple[float, float], float | None, int | None]:
    """((CPU, wall) seconds of the program's steady-state steps, the capture's wall seconds, the bundle's
    bytes)."""
    out = folder / f"{kind}.time"
    out.unlink(missing_ok=True)
    runtime = folder / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {
        **os.environ,
        "BENCH_OUT": str(out),
        "PYTHONPATH": str(ROOT),
        "XDG_RUNTIME_DIR": str(runtime),
        "OMP_NUM_THREADS": "1",
    }
    cmd = [sys.executable, str(prog)]
    if kind != "bare":
        run_dir = folder / f"run-{kind}-{time.monotonic_ns()}"
        cmd = [sys.executable, "-m", "stallscope", "profile", "--on-demand", "-o", str(run_dir), str(prog)]
    proc = subprocess.Popen(
        cmd, env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    took, size = None, None
    if kind == "captured":
        took, size = _capture_once(proc, runtime, steps)
    _, err = proc.communicate(timeout=600)
    if proc.returncode != 0 or not out.exists():
        raise SystemExit(f"{kind} {prog.name}: exit {proc.returncode}\n{err[-2000:]}")
    cpu, wall = (float(x) for x in out.read_text().strip("()").split(","))
    return (cpu, wall), took, size


def _capture_once(proc: subprocess.Popen[str], runtime: Path, steps: int) -> tuple[float, int]:
    os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    from stallscope.collector.ondemand import ask, capture, find_targets

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            programs = find_targets(proc.pid)
        except Exception:  # not registered yet
            time.sleep(0.05)
            continue
        if int(ask(programs[0], {"op": "status"}, 10.0).get("steps") or 0) >= steps // 3:
            break
        time.sleep(0.02)
    t0 = time.perf_counter()
    outcome = capture(programs, None)
    took = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in outcome.bundle.rglob("*") if p.is_file())
    return took, size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument(
        "--unit-steps",
        type=int,
        default=100_000,
        metavar="N",
        help="optimizer steps of the unit costs (0: none)",
    )
    ap.add_argument(
        "--example", action="append", help="only these examples (default: every one with a step loop)"
    )
    args = ap.parse_args()
    examples = sorted((ROOT / "examples").glob("*.py"))
    if args.example:
        examples = [e for e in examples if e.stem in args.example]
    kinds = ["bare", "waiting", "captured"]
    if args.unit_steps:
        with tempfile.TemporaryDirectory(prefix="bench-ondemand-") as tmp:
            unit_costs(Path(tmp), args.unit_steps, args.runs)
        print()
    print(
        f"steps {args.steps} (the first 10 not timed), {args.runs} runs of each, python {sys.version.split()[0]}"
    )
    print()
    print(
        "| example | bare (CPU) | waiting | waiting / bare [min, max] | wall: waiting / bare | captured | "
        "capture wall | bundle | capture cost |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="bench-ondemand-") as tmp:
        folder = Path(tmp)
        for example in examples:
            prog = program(example, args.steps, folder)
            if prog is None:
                continue
            cpu: dict[str, list[float]] = {k: [] for k in kinds}
            wall: dict[str, list[float]] = {k: [] for k in kinds}
            walls, sizes = [], []
            for r in range(args.runs):
                for kind in kinds[r % 3 :] + kinds[: r % 3]:
                    (c, w), took, size = run(kind, prog, folder, args.steps)
                    cpu[kind].append(c)
                    wall[kind].append(w)
                    if took is not None and size is not None:
                        walls.append(took)
                        sizes.append(size)
            ratios = [w / b for w, b in zip(cpu["waiting"], cpu["bare"], strict=True)]
            wall_ratio = statistics.median(wall["waiting"]) / statistics.median(wall["bare"])
            med = {k: statistics.median(v) for k, v in cpu.items()}
            print(
                f"| {example.stem} | {med['bare']:.3f} s | {med['waiting']:.3f} s | "
                f"{statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}] | {wall_ratio:.3f} | "
                f"{med['captured']:.3f} s | {statistics.median(walls):.2f} s | "
                f"{statistics.median(sizes) / 1e3:.0f} kB | {(med['captured'] - med['waiting']) * 1e3:+.0f} ms |",
                flush=True,
            )


if __name__ == "__main__":
    main()
