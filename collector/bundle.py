"""The output bundle: a folder with ``<script>-<time>.pt.trace.json.gz`` (standard Kineto JSON, gzip,
carrying the sidecar under its top-level key ``"stallscope"``: ``stallscope.collector.embed``) and ``sidecar.json``
(the same document, schema ``stallscope.sidecar/1``, see docs/sidecar.md). Older bundles name the trace
``trace.pt.trace.json.gz``; readers find it by its ``.pt.trace.json.gz`` suffix (``bundle_trace``).

It is written atomically: everything goes into a hidden staging folder beside the target, which is
renamed into place at the end, so a reader never sees half a bundle. The staging folder is made before
the workload runs, so an unwritable output folder is reported before any time is spent.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stallscope.analyzer.core.errors import UsageError
from stallscope.analyzer.core.numbers import parse_uint

SCHEMA = "stallscope.sidecar/1"
TRACE_NAME = "trace.pt.trace.json.gz"
SIDECAR_NAME = "sidecar.json"
DEFAULT_ROOT = "stallscope_out"
_MARK = ".stallscope-staging"  # in a staging folder: the pid of the process writing it
TRACE_SUFFIX = ".pt.trace.json.gz"


def bundle_trace(folder: Path) -> Path | None:
    """The trace file of a bundle folder (any ``*.pt.trace.json.gz``), or None."""
    found = sorted(p for p in folder.glob(f"*{TRACE_SUFFIX}") if not p.name.startswith("."))
    return found[0] if found else None


def _bundle_file(name: str) -> bool:
    return name == SIDECAR_NAME or name.endswith(TRACE_SUFFIX)


def default_output(name: str, root: str | Path = DEFAULT_ROOT, now: float | None = None) -> Path:
    """``stallscope_out/<name>-<YYYYmmdd-HHMMSS>`` (with ``-2``, ``-3``... when that exists)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    base = Path(root) / f"{name}-{stamp}"
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


def launcher_rank(environ: Mapping[str, str] | None = None) -> int | None:
    """This process's rank when a distributed launcher started it (``torchrun`` and
    ``torch.distributed.launch`` set ``RANK`` and ``WORLD_SIZE``; a world of one is no job), else None."""
    env = os.environ if environ is None else environ
    rank, world = env.get("RANK", ""), env.get("WORLD_SIZE", "")
    rank_n, world_n = parse_uint(rank), parse_uint(world)
    if rank_n is None or world_n is None or world_n < 2:
        return None
    return rank_n


def output_for(output: str | Path | None, name: str, environ: Mapping[str, str] | None = None) -> Path:
    """Where a run writes its bundle: ``output`` or ``default_output(name)``; under a distributed launcher
    each rank writes ``rank<N>`` inside it (``-o DIR`` gives one folder of ranks, which ``stallscope
    analyze DIR`` reads as a job; the default folder is named by the second each rank started)."""
    rank = launcher_rank(environ)
    if rank is None:
        return Path(output) if output is not None else default_output(name)
    if output is None:  # no uniqueness suffix: the other ranks write beside this one
        output = Path(DEFAULT_ROOT) / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    return Path(output) / f"rank{rank}"


class Staging:
    """A bundle being written. ``trace_path`` is where the profiler exports; ``commit`` publishes."""

    def __init__(self, output: str | Path, trace_name: str = TRACE_NAME) -> None:
        self.output = Path(output).absolute()  # the workload may chdir
        self._check_target()
        try:
            self.output.parent.mkdir(parents=True, exist_ok=True)
            remove_stale(self.output.parent)
            self.path = _staging_folder(f".{self.output.name}.", self.output.parent)
        except OSError as exc:
            raise UsageError(f"-o {output}: cannot write there ({exc.strerror or exc})") from None
        self.trace_path = self.path / trace_name

    def _check_target(self) -> None:
        out = self.output
        if out.exists() and not out.is_dir():
            raise UsageError(f"-o {out}: exists and is not a folder")
        if out.is_dir() and not all(_bundle_file(n) for n in os.listdir(out)):
            raise UsageError(f"-o {out}: folder exists and is not a stallscope bundle; choose another")

    def commit(self, sidecar: dict[str, Any]) -> Path:
        """Write ``sidecar.json`` and move the bundle into place (replacing an older bundle there)."""
        try:
            text = json.dumps(sidecar, indent=1, allow_nan=False, default=str)
            (self.path / SIDECAR_NAME).write_text(text + "\n")
            self._check_target()
            old = None
            if self.output.exists():
                old = _staging_folder(f".{self.output.name}.old.", self.output.parent)
                os.replace(self.output, old / "bundle")
            (self.path / _MARK).unlink(missing_ok=True)  # the published bundle holds only its files
            os.replace(self.path, self.output)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except OSError as exc:
            raise UsageError(f"-o {self.output}: cannot write the bundle ({exc.strerror or exc})") from None
        return self.output

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _staging_folder(prefix: str, parent: Path) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    (path / _MARK).write_text(str(os.getpid()))
    return path


def remove_stale(parent: Path) -> list[Path]:
    """Remove the staging folders in ``parent`` whose writer is gone (a run ended by ``kill -9`` or
    ``os._exit`` leaves one); returns them. Folders without our mark are never touched."""
    removed = []
    for path in parent.glob(".*"):
        try:
            pid = int((path / _MARK).read_text()[:20])
        except (OSError, ValueError):
            continue
        if pid == os.getpid() or alive(pid):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (also when it belongs to another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def sidecar(
    run: dict[str, Any], sync_sites: list[dict[str, Any]], step_timing: dict[str, Any]
) -> dict[str, Any]:
    """The ``stallscope.sidecar/1`` document."""
    return {"schema": SCHEMA, "run": run, "sync_sites": sync_sites, "step_timing": step_timing}


def run_metadata(argv: list[str], program_dir: Path | None, started: str) -> dict[str, Any]:
    """torch / CUDA versions, device, Python, the command line and the program's git commit if any."""
    meta: dict[str, Any] = {
        "argv": argv,
        "python": platform.python_version(),
        "platform": sys.platform,
        "started": started,
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        meta["torch"] = str(getattr(torch, "__version__", ""))
        meta["cuda"] = getattr(getattr(torch, "version", None), "cuda", None)
        try:
            if torch.cuda.is_available():
                meta["device"] = torch.cuda.get_device_name(torch.cuda.current_device())
        except Exception:  # a broken driver must not lose the bundle
            pass
    if program_dir is not None:
        meta["git_commit"] = git_commit(program_dir)
    return meta


def git_commit(folder: Path, timeout: float = 2.0) -> str | None:
    """``git rev-parse HEAD`` in ``folder``; None when git, the repository or the time is missing."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and commit else None
