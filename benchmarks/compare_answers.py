"""Do two revisions give the same answers? ``stallscope analyze --no-cache TRACE --json`` of every trace in
``../shared/traces`` (all folders, and each rank folder as a whole job) and ``sample_traces`` (its example
bundles too), run by this
tree and by a git revision checked out as a temporary ``git worktree``; the JSON documents are compared
byte for byte, and the terminal summaries line for line (the line naming the JSON file aside).

For a change that must not move any answer (a refactor), every row reads ``same``; for one that means to,
the rows that differ are the traces to read, with the first key whose value moved.

    .venv/bin/python benchmarks/compare_answers.py --baseline main~3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = ROOT.parent / "shared" / "traces"
sys.path.insert(0, str(HERE))

from bench_scaling import checkout, import_root  # noqa: E402

ENTRY = {"one-name": "from stallscope.commands import entry", "top-level": "from stallscope.cli import entry"}


def inputs() -> list[Path]:
    """The trace files and the job folders to analyse."""
    files = sorted(SHARED.rglob("*.json.gz")) if SHARED.is_dir() else []
    jobs = sorted({f.parent for f in files if "rank" in f.parent.name})
    samples = ROOT / "sample_traces"
    bundles = sorted(d for d in (samples / "examples").iterdir() if d.is_dir())
    return [*files, *jobs, *sorted(samples.glob("*.pt.trace.json.gz")), *bundles]


def answer(tree: Path, trace: Path, out: Path, cache: Path) -> tuple[bytes, list[str]]:
    """The JSON document and the summary lines of ``tree``'s ``analyze`` of ``trace``."""
    where, layout = import_root(tree)
    code = f"{ENTRY[layout]}; entry()"
    env = {**os.environ, "PYTHONPATH": str(where), "XDG_CACHE_HOME": str(cache)}
    args = [sys.executable, "-c", code, "analyze", "--no-cache", str(trace), "--json", str(out)]
    done = subprocess.run(args, cwd=where, env=env, capture_output=True, text=True, check=False)
    lines = [ln for ln in done.stdout.splitlines() if not ln.lstrip().startswith("json ")]
    document = out.read_bytes() if out.is_file() else f"exit {done.returncode}: {done.stderr}".encode()
    return document, lines


def first_change(a: Any, b: Any, path: str = "") -> str:
    """The first key path where two decoded documents differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in [*a, *(k for k in b if k not in a)]:
            if a.get(k) != b.get(k):
                return first_change(a.get(k), b.get(k), f"{path}.{k}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return first_change(x, y, f"{path}[{i}]")
    return path or "(whole document)"


def compare(trace: Path, base: Path, tmp: Path) -> str:
    new_doc, new_text = answer(ROOT, trace, tmp / "new.json", tmp / "cache-new")
    old_doc, old_text = answer(base, trace, tmp / "old.json", tmp / "cache-old")
    if new_doc == old_doc:
        return "same" if new_text == old_text else "same JSON, summary differs"
    try:
        return f"differs at {first_change(json.loads(old_doc), json.loads(new_doc))}"
    except ValueError:
        return "differs (not both JSON)"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", required=True, metavar="REV", help="the git revision to compare with")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="compare-answers-") as tmp:
        base = checkout(args.baseline, Path(tmp))
        try:
            rows = [(t, compare(t, base, Path(tmp))) for t in inputs()]
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
    print(f"| input | this tree against {args.baseline} |\n|---|---|")
    for trace, verdict in rows:
        print(f"| {os.path.relpath(trace, ROOT)} | {verdict} |")
    same = sum(v == "same" for _, v in rows)
    print(f"\n{same} of {len(rows)} answers the same")
    return 0 if same == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
