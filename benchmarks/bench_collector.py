"""Collector overhead: per-step cost with no profiling, bare torch.profiler, and a stallscope session.

    python benchmarks/bench_collector.py [--repeat 9] [--steps 30] [--block 10] [--workload train,decode]

Targets (issue "collector"): sync-site capture and step timing add at most 5% over bare torch.profiler
*inside* the profiled window, and at most 1% *outside* it. Outside the window the reference is bare
torch.profiler's own steps outside its window too: once a profiler session has run, torch may leave
later steps a few per cent slower (seen with nothing but ``profile().start()/stop()``), so "no
profiling" would charge torch's residue to stallscope; both ratios are printed.

How: each workload is one Python loop; every configuration runs the same loop in this process. The
``--steps`` profiled steps of each of the ``--repeat`` repeats are split into blocks of ``--block``
steps; a block runs every configuration once (a fresh profiler, a window of ``--block`` steps), in an
order that rotates from block to block, so the runs a ratio compares are a second apart. Each iteration
is timed in the main thread's CPU time (``thread_time``: what the collector adds, and what another
process on the machine leaves alone) and in wall time (``perf_counter``). An iteration is *inside* the
window when a profiler is recording at its start and at its end (``torch.autograd._profiler_enabled()``),
the same test for bare torch.profiler and for stallscope; *outside* when none is recording at either end
and it is not one of the first two iterations (warm-up). The iteration during which a window closes (the
trace export) is neither.

- bare torch.profiler: ``torch.profiler.profile(activities=[CPU(, CUDA)], with_stack=False,
  schedule=schedule(skip_first, wait=0, warmup, active, repeat=1))`` and ``prof.step()`` per iteration:
  what a user would write by hand, with the options stallscope uses.
- stallscope: ``stallscope.profile(...)`` with the same skip/warmup/steps (the optimizer hook finds the
  training steps; the decode loop calls ``p.step()``): torch.profiler as above plus the step timer, the
  optimizer hook and step wrapper, the sync-site recorder during the window and, on CPU-only runs, origin
  tracking until the first step and in the step before the window (`stallscope.collector.origin`).

The tables give the median iteration time of each configuration over all blocks, and the ratios the
targets are about: the median over blocks of the ratio of two configurations' median iterations in the
same block, with the quartiles of those per-block ratios in brackets. On a shared machine one run differs
from the next by several per cent whatever the code (the per-block ratios spread that much), so many
short blocks pin the median ratio down better than a few long ones. Then come the unit costs (per
optimizer step outside the window, per step mark and per `.item()` inside it, and per token of the
decode loop with the sync-site recorder as stallscope enters it, paired with bare torch.profiler).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import stallscope  # noqa: E402

Step = Callable[[], None]
TOKENS = 16  # tokens per step of the decode workload
SKIP, WARMUP = 3, 2


def train_workload() -> tuple[Step, bool]:
    """examples/item_logging.py's loop: a small MLP, SGD, ``loss.item()`` every step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(256, 512), torch.randint(0, 10, (256,))
    losses: list[float] = []

    def step() -> None:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())

    return step, True


def decode_workload() -> tuple[Step, bool]:
    """examples/decode_readback.py's loop, 16 tokens per step: many small ops and 16 ``.item()`` each."""
    torch.manual_seed(0)
    embed, head = torch.nn.Embedding(1000, 256), torch.nn.Linear(256, 1000)
    state = {"token": torch.tensor([1])}

    def step() -> None:
        with torch.no_grad():
            for _ in range(TOKENS):
                logits = head(torch.tanh(embed(state["token"])))
                state["token"] = logits.argmax(dim=-1)
                int(state["token"].item())

    return step, False


WORKLOADS = {"train": train_workload, "decode": decode_workload}


Row = tuple[float, float, bool, bool]  # wall s, main-thread CPU s, recording at start, at end


def _loop(step: Step, n: int, after: Callable[[], None] | None = None) -> list[Row]:
    """Run ``n`` iterations, each timed in wall time and in the main thread's CPU time."""
    enabled = torch.autograd._profiler_enabled
    out = []
    for _ in range(n):
        on0 = enabled()
        c0, t0 = time.thread_time(), time.perf_counter()
        step()
        if after is not None:
            after()
        t1, c1 = time.perf_counter(), time.thread_time()
        out.append((t1 - t0, c1 - c0, on0, enabled()))
    return out


def run_plain(make: Callable[[], tuple[Step, bool]], n: int, active: int, tmp: Path) -> list:
    step, _ = make()
    return _loop(step, n)


def bare_profiler(
    skip: int,
    warmup: int,
    active: int,
    on_trace_ready: Callable[[torch.profiler.profile], None] | None = None,
) -> torch.profiler.profile:
    """torch.profiler as a user would set it up by hand, with the activities stallscope uses and, as its
    default (no ``--stacks``), no Python stacks."""
    acts = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    sched = torch.profiler.schedule(skip_first=skip, wait=0, warmup=warmup, active=active, repeat=1)
    return torch.profiler.profile(
        activities=acts, schedule=sched, with_stack=False, on_trace_ready=on_trace_ready
    )


def run_bare(make: Callable[[], tuple[Step, bool]], n: int, active: int, tmp: Path) -> list:
    step, _ = make()
    trace = tmp / "bare.pt.trace.json.gz"
    prof = bare_profiler(SKIP, WARMUP, active, on_trace_ready=lambda p: p.export_chrome_trace(str(trace)))
    with prof:
        return _loop(step, n, prof.step)


def run_stallscope(make: Callable[[], tuple[Step, bool]], n: int, active: int, tmp: Path) -> list:
    step, has_optimizer = make()
    with stallscope.profile(tmp / "bundle", skip=SKIP, warmup=WARMUP, steps=active) as p:
        return _loop(step, n, None if has_optimizer else p.step)


CONFIGS = {"none": run_plain, "torch.profiler": run_bare, "stallscope": run_stallscope}


def classify(rows: list[Row]) -> tuple[list[Row], list[Row]]:
    """(inside-window rows, outside-window rows) of one run, as the module docstring defines them."""
    inside = [r for r in rows if r[2] and r[3]]
    outside = [r for i, r in enumerate(rows) if i >= 2 and not r[2] and not r[3]]
    return inside, outside


Block = dict[str, tuple[list[Row], list[Row]]]  # one run of each configuration: (inside, outside) rows


def measure(workload: str, count: int, active: int) -> list[Block]:
    """``count`` blocks of ``active`` profiled steps; each runs every configuration once, in an order that
    rotates from block to block, so the configurations a ratio compares ran within a second of each
    other."""
    make = WORKLOADS[workload]
    n = 2 + SKIP + WARMUP + active + active  # as many steps after the window as in it
    blocks: list[Block] = []
    _loop(make()[0], 5)  # warm torch's own caches once before anything is timed
    names = list(CONFIGS)
    for r in range(count):
        block: Block = {}
        for name in names[r % 3 :] + names[: r % 3]:  # rotate the order: no configuration always goes first
            run = CONFIGS[name]
            with tempfile.TemporaryDirectory() as tmp:
                block[name] = classify(run(make, n, active, Path(tmp)))
            print(
                f"  {workload} block {r + 1}/{count} {name}: {len(block[name][0])} in, "
                f"{len(block[name][1])} out",
                file=sys.stderr,
            )
        blocks.append(block)
    return blocks


def _median(rows: list[Row], col: int) -> float:
    return statistics.median(r[col] for r in rows) if rows else float("nan")


def _pooled_ms(blocks: list[Block], name: str, where: int, col: int) -> float:
    """The median step of one configuration over all blocks, in ms."""
    return _median([r for b in blocks for r in b[name][where]], col) * 1e3


def paired_ratio(blocks: list[Block], num: tuple[str, int], den: tuple[str, int], col: int) -> str:
    """The median over blocks of (median step of ``num`` / median step of ``den``), both from the same
    block, with the quartiles of those per-block ratios: drift between blocks cancels out of each ratio,
    and one disturbed block moves the median little."""
    ratios = sorted(
        _median(b[num[0]][num[1]], col) / _median(b[den[0]][den[1]], col)
        for b in blocks
        if b[num[0]][num[1]] and b[den[0]][den[1]]
    )
    if not ratios:
        return "n/a"
    if len(ratios) < 4:
        return f"{statistics.median(ratios):.3f}"
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    return f"{statistics.median(ratios):.3f} ({q1:.3f}-{q3:.3f})"


def table(results: dict[str, list[Block]], col: int) -> str:
    inside, outside = 0, 1
    none, bare, ours = ("none", outside), ("torch.profiler", inside), ("stallscope", inside)
    lines = [
        "| workload | no profiling | torch.profiler, in window | stallscope, in window "
        "| stallscope / torch.profiler in window (target <= 1.05) | stallscope, outside window "
        "| stallscope outside / none | torch.profiler outside / none | stallscope / torch.profiler outside (target <= 1.01) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for workload, blocks in results.items():
        ours_out, bare_out = ("stallscope", outside), ("torch.profiler", outside)
        ms = [_pooled_ms(blocks, name, where, col) for name, where in (none, bare, ours, ours_out)]
        lines.append(
            f"| {workload} | {ms[0]:.3f} ms | {ms[1]:.3f} ms | {ms[2]:.3f} ms "
            f"| {paired_ratio(blocks, ours, bare, col)} | {ms[3]:.3f} ms "
            f"| {paired_ratio(blocks, ours_out, none, col)} | {paired_ratio(blocks, bare_out, none, col)} "
            f"| {paired_ratio(blocks, ours_out, bare_out, col)} |"
        )
    return "\n".join(lines)


# --- unit costs: what the collector adds per step and per sync-prone call, measured in isolation ---------


def _cpu_us(body: Callable[[], None], n: int, repeat: int = 5) -> float:
    """Fastest of ``repeat`` runs of ``n`` calls, in main-thread CPU µs per call."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.thread_time()
        for _ in range(n):
            body()
        best = min(best, (time.thread_time() - t0) / n * 1e6)
    return best


def unit_costs(tmp: Path) -> dict[str, tuple[float, float]]:
    """(without, with stallscope) µs: an optimizer step outside the window, a step inside it, an
    ``.item()`` inside it, and a decode token inside it (bare torch.profiler as the reference inside the
    window)."""
    import warnings

    warnings.simplefilter("ignore")  # "won't be using warmup"
    out: dict[str, tuple[float, float]] = {}
    param = torch.nn.Parameter(torch.zeros(1))
    param.grad = torch.zeros(1)
    opt = torch.optim.SGD([param], lr=0.0)
    t = torch.tensor([3])
    plain_step = _cpu_us(opt.step, 3000)
    with stallscope.profile(tmp / "outside", skip=0, warmup=0, steps=1):
        for _ in range(4):  # the window opens and closes: what follows is outside it
            opt.step()
        ours_step = _cpu_us(opt.step, 3000)
    out["optimizer step, outside the window"] = (plain_step, ours_step)
    prof = bare_profiler(0, 0, 10**9)
    prof.start()
    bare_mark, bare_item = _cpu_us(prof.step, 1000), _cpu_us(t.item, 3000)
    prof.stop()
    with stallscope.profile(tmp / "inside", skip=0, warmup=0, steps=10**6) as p:
        p.step()  # explicit steps: the scheduled profiler records from here
        ours_mark, ours_item = _cpu_us(p.step, 1000), _cpu_us(t.item, 3000)
    out["step mark, inside the window"] = (bare_mark, ours_mark)
    out["`.item()`, inside the window"] = (bare_item, ours_item)
    out["decode token (one `.item()`), inside the window"] = _decode_token_costs()
    return out


def _decode_token_costs(rounds: int = 60, steps: int = 10) -> tuple[float, float]:
    """One token of the ``decode`` loop under bare torch.profiler, without and with the sync-site
    recorder as stallscope enters it in the window (on a CPU-only run: sites learnt in a step under
    origin tracking, which is then off): what a recorded call costs inside a real loop. ``rounds`` pairs
    of ``steps`` steps without and with it; "with" is the median without plus the median of the paired
    differences (a busy machine moves both runs of a pair alike)."""
    from stallscope.collector.origin import OriginTracker
    from stallscope.collector.sites import SyncSiteRecorder

    step, _ = decode_workload()
    latent = not torch.cuda.is_available()
    recorder = SyncSiteRecorder(strategy="patch", latent=latent)

    def per_token() -> float:
        t0 = time.thread_time()
        for _ in range(steps):
            step()
        return (time.thread_time() - t0) / steps / TOKENS * 1e6

    prof = bare_profiler(0, 0, 10**9)
    prof.start()
    try:
        recorder.tracked = recorder.learning = latent  # the step before the window
        with recorder:
            origin = OriginTracker() if latent else None
            if origin is not None:
                origin.install()
            step()
            if origin is not None:
                origin.remove()
        recorder.tracked = recorder.learning = False
        bare, added = [], []
        for _ in range(rounds):
            without = per_token()
            with recorder:
                added.append(per_token() - without)
            recorder.clear()
            bare.append(without)
    finally:
        prof.stop()
    base = statistics.median(bare)
    return base, base + statistics.median(added)


def unit_table(costs: dict[str, tuple[float, float]]) -> str:
    lines = ["| per call | without stallscope | with stallscope | added |", "|---|---|---|---|"]
    for name, (base, ours) in costs.items():
        lines.append(f"| {name} | {base:.2f} µs | {ours:.2f} µs | {ours - base:+.2f} µs |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9, help="repeats (default 9)")
    ap.add_argument(
        "--steps", type=int, default=30, help="profiled steps per repeat and configuration (default 30)"
    )
    ap.add_argument(
        "--block", type=int, default=10, help="profiled steps per block: one window each (default 10)"
    )
    ap.add_argument("--workload", default="train,decode", help="comma-separated: train, decode")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)  # steadier timings on a shared machine; the same for every configuration
    names = [w for w in args.workload.split(",") if w]
    unknown = [w for w in names if w not in WORKLOADS]
    if unknown:
        ap.error(f"unknown workload {', '.join(unknown)} (known: {', '.join(WORKLOADS)})")
    with tempfile.TemporaryDirectory() as tmp:
        costs = unit_costs(Path(tmp))
    block = max(1, min(args.block, args.steps))
    count = args.repeat * -(-args.steps // block)
    results = {w: measure(w, count, block) for w in names}
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU only"
    print(
        f"torch {torch.__version__}, {device}, 1 intra-op thread, {count} blocks of {block} profiled steps "
        "per configuration"
    )
    print("\nmedian step, main thread CPU time (what the collector adds; steady on a shared machine):")
    print(table(results, 1))
    print("\nmedian step, wall time:")
    print(table(results, 0))
    print(
        "\nunit costs, main thread CPU time (fastest of 5; a decode token: paired runs, medians); inside "
        "the window the reference is bare torch.profiler:"
    )
    print(unit_table(costs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
