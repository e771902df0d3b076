"""Record the examples' bundles into ``sample_traces/examples/`` (on the CPU) and check what each yields.

    .venv/bin/python sample_traces/record_examples.py

Each example in ``examples/`` plants one problem at one line. This runs ``stallscope profile`` on each
(a short window: ``--skip 2 --warmup 1 --steps 3``), from the repository root so that call sites are
``examples/<name>.py``, then analyses the bundle and checks it against ``PLANTED``: on a CPU the planted
line must come back as the top finding, as a ``would_sync_*`` site (what would block on a GPU), and the
clean loop must have no finding. It writes ``examples/expected.json`` and ``examples/EXPECTED.md``; a
failed check stops with exit code 1 before the expected files are written.

Unlike the simulated samples next to it, these are real torch.profiler traces, so they differ from run to
run (times, thread ids); only the findings are expected to be stable.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "sample_traces" / "examples"
WINDOW = ["--skip", "2", "--warmup", "1", "--steps", "3"]

# example -> (what it plants, the top finding on a CPU run, its line); None: no finding on a CPU
PLANTED: dict[str, tuple[str, str | None, int | None]] = {
    "item_logging": ("`loss.item()` logged every step", "would_sync_scalar_read", 18),
    "mask_indexing": ("boolean-mask indexing `out[mask]`", "would_sync_data_dependent", 15),
    "decode_readback": ("each decoded token read back with `.item()`", "would_sync_scalar_read", 20),
    "pageable_copy": ("`non_blocking=True` copies from pageable memory", "would_sync_to_host", 15),
    "blanket_sync": ("a device-wide synchronize every step", "would_sync_blanket", 17),
    "clean_pipeline": ("nothing: a clean loop", None, None),
}


def record(name: str) -> Path:
    bundle = OUT / name
    shutil.rmtree(bundle, ignore_errors=True)
    cmd = [sys.executable, "-m", "stallscope", "profile", "-o", str(bundle.relative_to(ROOT)), "--no-analyze"]
    done = subprocess.run(
        [*cmd, *WINDOW, f"examples/{name}.py"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise SystemExit(f"{name}: stallscope profile exited {done.returncode}\n{done.stderr}")
    return bundle


def check(name: str, bundle: Path) -> dict[str, object]:
    sys.path.insert(0, str(ROOT))
    from stallscope.analyzer.analysis import analyze
    from stallscope.analyzer.load.loader import load

    about, rule, line = PLANTED[name]
    a = analyze(load(bundle, use_cache=False))
    found = [
        (
            f.rule,
            Path(f.call_site.file).name if f.call_site else None,
            f.call_site.line if f.call_site else None,
        )
        for f in a.findings
    ]
    if rule is None:
        if found:
            raise SystemExit(f"{name}: expected no finding on the CPU, got {found}")
    elif not found or found[0] != (rule, f"{name}.py", line):
        raise SystemExit(f"{name}: expected {rule} at {name}.py:{line} first, got {found}")
    return {
        "planted": about,
        "top_rule": rule,
        "file": f"examples/{name}.py" if rule else None,
        "line": line,
        "findings": [r for r, _, _ in found],
        "steps": len(a.steps),
        "events": a.model.event_count,
    }


def markdown(expected: dict[str, dict[str, object]]) -> str:
    lines = [
        "# Example bundles recorded on the CPU",
        "",
        "Written by `.venv/bin/python sample_traces/record_examples.py`: `stallscope profile` of each",
        "`examples/*.py` (`--skip 2 --warmup 1 --steps 3`), a trace and a sidecar per folder. On a CPU nothing",
        "blocks, so the findings are the collector's `would_sync_*` sites: the calls that would block the",
        "host on a GPU, at their exact line. `expected.json` holds the same, keyed by folder.",
        "",
        "| bundle | planted | expected top finding on a CPU | events | steps |",
        "|---|---|---|---|---|",
    ]
    for name, e in expected.items():
        top = f"`{e['top_rule']}` at `{e['file']}:{e['line']}`" if e["top_rule"] else "none"
        lines.append(f"| `{name}/` | {e['planted']} | {top} | {e['events']:,} | {e['steps']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    expected = {}
    for name in PLANTED:
        print(f"recording examples/{name}.py", flush=True)
        expected[name] = check(name, record(name))
    (OUT / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    (OUT / "EXPECTED.md").write_text(markdown(expected))
    print(f"wrote {len(expected)} bundles, expected.json and EXPECTED.md to {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
