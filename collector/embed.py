"""The sidecar inside the trace: one file to carry.

``embed_sidecar`` rewrites the bundle's gzip Kineto JSON with the sidecar document as its first top-level
key, ``"stallscope"``. Readers of Kineto JSON look up the keys they know (``traceEvents``,
``deviceProperties``...) and ignore others, so Perfetto, TensorBoard and HTA read the file as before;
``stallscope.analyzer.load.sidecar.embedded_sidecar`` reads it back from the first blocks of the file, so a trace
uploaded or copied alone keeps every sidecar finding. The rewrite streams: it never holds the trace in
memory.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path
from typing import Any

KEY = "stallscope"


def embed_sidecar(trace: Path, doc: dict[str, Any]) -> None:
    """Put ``doc`` under the top-level key ``"stallscope"`` of the gzip JSON object at ``trace``."""
    head = b'{"' + KEY.encode() + b'": ' + json.dumps(doc, allow_nan=False, default=str).encode()
    tmp = trace.with_name(f".{trace.name}.embed")
    try:
        with gzip.open(trace, "rb") as src, gzip.open(tmp, "wb", compresslevel=6) as dst:
            first = src.read(1 << 16)
            brace = first.find(b"{")
            if brace < 0:
                raise ValueError(f"{trace}: not a JSON object")
            rest = first[brace + 1 :].lstrip()
            dst.write(head + (b"" if rest.startswith(b"}") else b", "))
            dst.write(rest)
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, trace)
    finally:
        if tmp.exists():
            tmp.unlink()
