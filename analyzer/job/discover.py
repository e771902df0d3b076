"""Which files make a job: a folder of rank files (``tensorboard_trace_handler`` output), a folder of
rank folders or bundles (one level down), a glob, or several of these."""

from __future__ import annotations

import glob
from pathlib import Path

from stallscope.analyzer.core.errors import TraceError
from stallscope.analyzer.load.loader import trace_files

_GLOB = set("*?[")


def job_files(inputs: list[str]) -> list[Path]:
    """Every trace file the inputs name, each once, in order. ``TraceError`` for an input that names
    nothing (a missing path, a glob without matches, a folder without trace files)."""
    out: list[Path] = []
    for item in inputs:
        p = Path(item)
        if p.is_file():
            found = [p]
        elif p.is_dir():
            found = _folder(p)
        elif _GLOB & set(item):
            found = sorted(Path(m) for m in glob.glob(item) if Path(m).is_file())
            if not found:
                raise TraceError(item, "no file matches this pattern")
        else:
            raise TraceError(item, "no such file or directory")
        out.extend(f for f in found if f not in out)
    return out


def _folder(folder: Path) -> list[Path]:
    """Trace files in the folder itself, else in its subfolders (one level: a rank folder or bundle each)."""
    files = trace_files(folder)
    if files:
        return files
    nested = [f for sub in sorted(d for d in folder.iterdir() if d.is_dir()) for f in trace_files(sub)]
    if not nested:
        raise TraceError(str(folder), "directory contains no trace files (*.json, *.json.gz)")
    return nested
