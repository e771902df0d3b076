"""The collector's sidecar (``sidecar.json`` in a stallscope bundle): exact call sites of sync-prone calls.

Schema ``stallscope.sidecar/1`` (written by ``stallscope profile``; documented in ``docs/sidecar.md``)::

    {"schema": "stallscope.sidecar/1",
     "run": {...},                                    # torch / CUDA versions, device, command line, git
     "sync_sites": [{"file", "line", "function", "op", "thread", "on_device", "count", "first_us",
                     "times_us": [...], "library", "library_call"}],
     "step_timing": {...}}

``thread`` is the OS thread id as the trace's ``tid`` writes it; ``times_us`` are call starts on the trace
clock. A sync of the analysis takes the exact line of the record on its thread whose time falls in (or
just before) the sync's user-level operation. A sidecar that cannot be read is ignored with a note.
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stallscope.analyzer.core.model import F64
from stallscope.analyzer.core.numbers import bounded_int, finite_float
from stallscope.analyzer.core.sites import CallSite

SCHEMA = "stallscope.sidecar/1"
SIDECAR_NAME = "sidecar.json"
_MAX_LINE = 10**9
LEAD_US = 200.0  # how long before the aten op the Python call may have started (argument handling)


@dataclass(frozen=True)
class Sidecar:
    path: str
    run: dict[str, Any]
    step_timing: dict[str, Any]
    sites: tuple[CallSite, ...]
    ops: tuple[str, ...]
    by_thread: dict[str, tuple[F64, np.ndarray]]  # tid -> (sorted call times, site index per time)
    # per site: whether its tensor is (or, on a CPU-only run, would be) on the accelerator; True when
    # the collector did not say (older bundles)
    on_device: tuple[bool, ...] = ()
    # per site: (the library module that made the call, the library call the user's line made), or
    # ("", "") for a call the user's own code made (records without ``library``)
    libraries: tuple[tuple[str, str], ...] = ()

    def site_on_device(self, i: int) -> bool:
        return self.on_device[i] if i < len(self.on_device) else True

    def site_library(self, i: int) -> tuple[str, str]:
        return self.libraries[i] if i < len(self.libraries) else ("", "")

    def exact_site(self, thread: str, start_us: float, end_us: float) -> CallSite | None:
        """The recorded call on ``thread`` that started latest at or before ``end_us`` and no earlier than
        ``LEAD_US`` before ``start_us`` (the sync belongs to that call)."""
        times, index = self.by_thread.get(thread, (np.zeros(0), np.zeros(0, np.int64)))
        k = int(np.searchsorted(times, end_us, side="right")) - 1
        if k >= 0 and times[k] >= start_us - LEAD_US:
            return self.sites[int(index[k])]
        return None


EMBED_KEY = (
    "stallscope"  # the sidecar inside a trace written by stallscope profile (stallscope.collector.embed)
)
_EMBED_LIMIT = 64 << 20


def embedded_sidecar(trace: Path) -> tuple[Sidecar | None, str | None]:
    """The sidecar a stallscope trace carries as its first top-level key ``"stallscope"``, or None (a
    trace without one); the second value is a note when one is there but cannot be used. Reads only
    the start of the file."""
    try:
        with trace.open("rb") as f:
            gzipped = f.read(2) == b"\x1f\x8b"
        opener = gzip.open if gzipped else open
        with opener(trace, "rb") as f:
            text = _first_value(f, trace)
    except (OSError, EOFError, zlib.error, ValueError) as exc:
        return None, f"{trace}: embedded sidecar ignored ({exc})"
    if text is None:
        return None, None
    try:
        doc = json.JSONDecoder().raw_decode(text)[0]
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            return None, f"{trace}: embedded sidecar ignored (not a {SCHEMA} document)"
        return _parse(doc, f"{trace} ({EMBED_KEY})"), None
    except (ValueError, TypeError, KeyError) as exc:
        return None, f"{trace}: embedded sidecar ignored ({type(exc).__name__}: {exc})"


def _first_value(f: Any, trace: Path) -> str | None:
    """The text from the value of a leading ``"stallscope"`` key to (at least) its end, or None."""
    buf = f.read(1 << 16)
    head = buf.lstrip()
    prefix = b'{"' + EMBED_KEY.encode() + b'"'
    if not head.startswith(prefix):
        return None
    colon = head.index(b":", len(prefix))
    data = bytearray(head[colon + 1 :])
    decoder = json.JSONDecoder()
    while True:
        text = data.decode("utf-8", errors="replace").lstrip()
        try:
            decoder.raw_decode(text)
            return text
        except ValueError:
            more = f.read(max(len(data), 1 << 16))
            if not more or len(data) > _EMBED_LIMIT:
                raise ValueError(f"{trace}: the embedded sidecar does not end") from None
            data += more


def read_sidecar(folder: Path) -> tuple[Sidecar | None, str | None]:
    """The folder's sidecar, or None; the second value is a note when one exists but cannot be used."""
    path = folder / SIDECAR_NAME
    if not path.is_file():
        return None, None
    try:
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            return None, f"{path}: ignored (not a {SCHEMA} document)"
        return _parse(doc, str(path)), None
    except (OSError, ValueError, TypeError, KeyError, RecursionError) as exc:
        return None, f"{path}: ignored ({type(exc).__name__}: {exc})"


def _parse(doc: dict[str, Any], path: str) -> Sidecar:
    sites: list[CallSite] = []
    ops: list[str] = []
    on_device: list[bool] = []
    libraries: list[tuple[str, str]] = []
    per_thread: dict[str, tuple[list[float], list[int]]] = {}
    for rec in doc.get("sync_sites") or []:
        line = bounded_int(rec["line"], _MAX_LINE)
        if line is None or line < 0:
            continue  # 1e400, Infinity, a string: not a line of any file
        sites.append(CallSite(str(rec["file"]), line, str(rec["function"])))
        ops.append(str(rec.get("op", "")))
        on_device.append(rec.get("on_device") is not False)
        library, call = rec.get("library"), rec.get("library_call")
        libraries.append(
            (library[:200], call[:200]) if isinstance(library, str) and isinstance(call, str) else ("", "")
        )
        times, index = per_thread.setdefault(str(rec.get("thread", "")), ([], []))
        recorded = rec.get("times_us")
        for t in recorded if isinstance(recorded, list) and recorded else [rec.get("first_us")]:
            us = finite_float(t)
            if us is not None:
                times.append(us)
                index.append(len(sites) - 1)
    by_thread = {}
    for tid, (times, index) in per_thread.items():
        order = np.argsort(times, kind="stable")
        by_thread[tid] = (np.asarray(times)[order], np.asarray(index, dtype=np.int64)[order])
    run = doc.get("run")
    timing = doc.get("step_timing")
    run = run if isinstance(run, dict) else {}
    timing = timing if isinstance(timing, dict) else {}
    return Sidecar(path, run, timing, tuple(sites), tuple(ops), by_thread, tuple(on_device), tuple(libraries))
