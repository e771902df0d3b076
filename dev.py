#!/usr/bin/env python3
"""Set up and run stallscope's developer tasks with nothing but Python 3.10+ and pip.

    python3 dev.py demo    set up .venv, profile examples/item_logging.py, print the verdict, write a report
    python3 dev.py test    set up .venv, then lint (ruff, mypy --strict, lint-imports) and run the test suite
    python3 dev.py lint    lint only
    python3 dev.py bench   benchmarks/bench_load.py (installs HolisticTraceAnalysis in its own venv)

Setup is idempotent: it reinstalls only when pyproject.toml changed since the last setup.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
STAMP = VENV / ".stallscope-setup"
TORCH = "torch==2.13.0"  # the CPU wheel for development and CI; users bring their own (CUDA) torch
# the root folders installed as stallscope.<name> (pyproject's package-dir)
COMPONENTS = ("analyzer", "collector", "dashboard")
DEMO_SCRIPT = ROOT / "examples" / "item_logging.py"  # profiled end to end: `.item()` every step


def run(*cmd: str | Path, cwd: Path = ROOT) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], cwd=cwd, check=True)


def setup() -> None:
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == want and PY.exists():
        return
    if not PY.exists():
        print(f"+ creating {VENV}", flush=True)
        venv.create(VENV, with_pip=True)
    run(PY, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    run(PY, "-m", "pip", "install", "--quiet", TORCH)
    run(PY, "-m", "pip", "install", "--quiet", "-e", ".[dev]")
    STAMP.write_text(want)


def link_tree(root: Path = ROOT) -> Path:
    """Lay out the installed import names for the tools that cannot follow pyproject's package-dir (mypy,
    import-linter): .typecheck/stallscope/ holds the front's files and the three component folders as
    real folders of links to the source files (import-linter does not walk linked folders)."""
    top = root / ".typecheck"
    shutil.rmtree(top, ignore_errors=True)
    for name, folder in [("", root / "stallscope"), *((c, root / c) for c in COMPONENTS)]:
        for source in folder.rglob("*.py"):
            rel = source.relative_to(folder)
            if name == "" and rel.parts[0] in COMPONENTS:
                continue
            link = top / "stallscope" / name / rel
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(source, link.parent))
    return top


def lint() -> None:
    run(PY, "-m", "ruff", "check", ".")
    run(PY, "-m", "ruff", "format", "--check", ".")
    tree = link_tree()
    run(PY, "-m", "mypy")
    # run from the tree, whose stallscope is the installed layout (import-linter puts the cwd first)
    run(BIN / "lint-imports", ROOT / "pyproject.toml", cwd=tree)


def main(argv: list[str]) -> int:
    task = argv[0] if argv else "help"
    try:
        if task == "demo":
            setup()
            out = ROOT / "stallscope_out" / "demo-item_logging"
            run(BIN / "stallscope", "profile", "-o", out.relative_to(ROOT), DEMO_SCRIPT.relative_to(ROOT))
            report = out.with_name(out.name + ".report.html").relative_to(ROOT)
            run(BIN / "stallscope", "report", out.relative_to(ROOT), "-o", report)
        elif task == "test":
            setup()
            lint()
            run(PY, "-m", "pytest", "-q", *argv[1:])
        elif task == "lint":
            setup()
            lint()
        elif task == "bench":
            setup()
            run(PY, "benchmarks/bench_load.py", *argv[1:])
        elif task == "setup":
            setup()
        else:
            print(__doc__)
            return 0 if task in ("help", "-h", "--help") else 2
    except subprocess.CalledProcessError as exc:
        return exc.returncode or 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
