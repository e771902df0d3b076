"""Call sites: the innermost user frame above an event, from ``python_function`` stacks.

Kineto names frames ``path/to/file.py(LINE): function`` (LINE is the function's first line). Library frames
(torch, site-packages, the standard library, ``<built-in ...>``) are skipped. The collector's exact lines
(sidecar) take precedence where they exist; that join belongs to the syncs pass.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from stallscope.analyzer.core.model import I64, TraceModel
from stallscope.analyzer.core.names import EventKind
from stallscope.analyzer.core.numbers import parse_uint

_FRAME = re.compile(r"^(?P<file>.+)\((?P<line>[0-9]+)\): (?P<function>.+)$")
_LIBRARY_PARTS = ("site-packages/", "dist-packages/", "/torch/", "torch/", "/lib/python", "<frozen ")
_STDLIB = frozenset(sys.stdlib_module_names)
#: packages whose frames Kineto names by their package-relative path ("transformers/models/...")
_THIRD_PARTY = frozenset(
    {
        "transformers", "accelerate", "diffusers", "timm", "torchvision", "torchaudio", "torchtext",
        "lightning", "pytorch_lightning", "lightning_fabric", "deepspeed", "megatron", "apex", "triton",
        "numpy", "fairscale", "xformers", "flash_attn", "peft", "datasets", "tokenizers", "sklearn", "scipy",
        "pandas", "einops", "vllm", "sglang", "tensorrt_llm", "torch_xla", "functorch", "tqdm", "wandb",
        "hydra", "omegaconf", "safetensors", "huggingface_hub", "PIL", "cv2", "mmcv", "mmdet", "detectron2",
        "onnx", "onnxruntime", "torchmetrics", "torchdata", "thunder", "nvfuser", "transformer_engine",
    }
)  # fmt: skip
_MAX_DEPTH = 512
_PYTHON = int(EventKind.PYTHON)


@dataclass(frozen=True)
class CallSite:
    file: str
    line: int
    function: str
    library: bool = False  # every frame of the stack was a library's: this is its innermost (named) one

    def __str__(self) -> str:
        where = f"{self.file}:{self.line} in {self.function}"
        return f"{where} (library code, no user frame)" if self.library else where


def _frame(name: str) -> tuple[str, int, str] | None:
    m = _FRAME.match(name)
    if not m or name.startswith("<"):
        return None
    line = parse_uint(m["line"], max_digits=9)
    if line is None:  # a line number no file has: not a frame we can point at
        return None
    return m["file"], line, m["function"]


def _is_library(file: str) -> bool:
    if any(part in file for part in _LIBRARY_PARTS) or file.startswith("torch"):
        return True
    root = file.replace("\\\\", "/").split("/")[0].removesuffix(".py")
    return not file.startswith("/") and (root in _STDLIB or root in _THIRD_PARTY)


@lru_cache(maxsize=4096)
def parse_frame(name: str) -> CallSite | None:
    """``train.py(42): train_step`` -> CallSite; None for library frames and non-frame names."""
    frame = _frame(name)
    if frame is None or _is_library(frame[0]):
        return None
    return CallSite(*frame)


_STDLIB_PARTS = ("/lib/python", "<frozen ")


@lru_cache(maxsize=4096)
def library_frame(name: str) -> tuple[int, CallSite] | None:
    """A library frame as a ``library`` CallSite with its preference: 1 for a third-party package's frame
    (``vllm/.../flashinfer.py``, ``transformers/...``), 0 for torch's and the standard library's. An
    installed package's file is named from its package (``vllm/attention/flashinfer.py``), not from the
    environment it was installed in."""
    frame = _frame(name)
    if frame is None:
        return None
    file, line, function = frame
    root = file.replace("\\\\", "/").split("/")[0].removesuffix(".py")
    packaged = "site-packages/" in file or "dist-packages/" in file
    core = (
        file.startswith("torch")
        or "/torch/" in file
        or (not file.startswith("/") and root in _STDLIB)
        or (not packaged and any(p in file for p in _STDLIB_PARTS))
    )
    for marker in ("site-packages/", "dist-packages/"):
        file = file.rpartition(marker)[2]
    return (0 if core else 1), CallSite(file, line, function, library=True)


@lru_cache(maxsize=1024)
def stack_site(stack: str) -> CallSite | None:
    """Call site from a legacy ``args["Call stack"]`` (``f.py(44): g;lib/x.py(9): h``, innermost frame
    first): the innermost user frame, else the innermost library frame (``library`` set)."""
    best: tuple[int, CallSite] | None = None
    for name in stack.split(";"):
        name = name.strip()
        site = parse_frame(name)
        if site is not None:
            return site
        candidate = library_frame(name)
        if candidate is not None and (best is None or candidate[0] > best[0]):
            best = candidate
    return best[1] if best else None


def call_site(model: TraceModel, event: int) -> CallSite | None:
    """The innermost user frame enclosing ``event`` on its thread: from ``python_function`` frames, else
    from the legacy ``Call stack`` of the innermost op (the event itself or an enclosing one) that has
    one. When every frame is a library's, the innermost library frame (third-party before torch and the
    standard library), marked ``library``. None only when the trace has no stack above the event."""
    return _walk(model, event, _MAX_DEPTH)


def call_sites(model: TraceModel, events: I64) -> list[CallSite | None]:
    """``call_site`` of each event (-1: None). Launch calls sit under a few ops that have neither a Python
    frame nor a stack: those levels are climbed for all events at once, then one walk is made per
    distinct event reached (with the steps it has left), not one per event."""
    ev = model.events
    at = np.array(events, dtype=np.int64)
    climbed = np.zeros(len(at), dtype=np.int64)
    rows = np.flatnonzero(at >= 0)
    for _ in range(_MAX_DEPTH):  # a level that neither names a frame nor holds a stack changes nothing
        here = at[rows]
        rows = rows[(ev.kind[here] != _PYTHON) & (ev.stack[here] < 0)]
        if not len(rows):
            break
        at[rows] = ev.parent[at[rows]]
        climbed[rows] += 1
        rows = rows[at[rows] >= 0]
    found: dict[tuple[int, int], CallSite | None] = {}
    sites: list[CallSite | None] = []
    for start, steps in zip(at.tolist(), climbed.tolist(), strict=True):
        key = (start, steps)
        if key not in found:
            found[key] = _walk(model, start, _MAX_DEPTH - steps)
        sites.append(found[key])
    return sites


def _walk(model: TraceModel, event: int, steps: int) -> CallSite | None:
    """``call_site`` looking at ``event`` and its enclosing events, ``steps`` of them at most."""
    ev = model.events
    kinds, parents, stacks, names, strings = ev.kind, ev.parent, ev.stack, ev.name, model.strings
    at = event
    fallback: tuple[int, CallSite] | None = None
    stack = -1
    for _ in range(steps):  # a walk per call (gaps, syncs, views): plain values, no enum lookups
        if at < 0:
            break
        if kinds[at] == _PYTHON:
            name = strings[names[at]]
            site = parse_frame(name)
            if site is not None:
                return site
            candidate = library_frame(name)
            if candidate is not None and (fallback is None or candidate[0] > fallback[0]):
                fallback = candidate
        elif stack < 0 and stacks[at] >= 0:
            stack = int(stacks[at])
        at = int(parents[at])
    from_stack = stack_site(model.strings[stack]) if stack >= 0 else None
    if from_stack is not None and (not from_stack.library or fallback is None):
        return from_stack
    return fallback[1] if fallback else from_stack
