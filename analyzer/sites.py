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

from analyzer.model import TraceModel
from analyzer.names import EventKind
from analyzer.numbers import parse_uint

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


@dataclass(frozen=True)
class CallSite:
    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.function}"


@lru_cache(maxsize=4096)
def parse_frame(name: str) -> CallSite | None:
    """``train.py(42): train_step`` -> CallSite; None for library frames and non-frame names."""
    m = _FRAME.match(name)
    if not m or name.startswith("<"):
        return None
    line = parse_uint(m["line"], max_digits=9)
    if line is None:  # a line number no file has: not a frame we can point at
        return None
    file = m["file"]
    if any(part in file for part in _LIBRARY_PARTS) or file.startswith("torch"):
        return None
    root = file.replace("\\\\", "/").split("/")[0].removesuffix(".py")
    if not file.startswith("/") and (root in _STDLIB or root in _THIRD_PARTY):
        return None
    return CallSite(file, line, m["function"])


def call_site(model: TraceModel, event: int) -> CallSite | None:
    """The innermost user frame enclosing ``event`` on its thread (None when the trace has no stack)."""
    ev = model.events
    at = int(ev.parent[event]) if event >= 0 else -1
    for _ in range(_MAX_DEPTH):
        if at < 0:
            return None
        if ev.kind[at] == EventKind.PYTHON:
            site = parse_frame(model.name_of(at))
            if site is not None:
                return site
        at = int(ev.parent[at])
    return None
