"""One colour per gap cause, per critical-path kind and per timeline event kind, shared by every chart of
the HTML report and the Dash dashboard.

The API is plain mappings from the analyzer's string values to CSS colours, plus three lookup functions
that accept either the Enum member or its string value. Causes and critical-path kinds that share a
name (``sync``, ``input``, ``launch``, ``host``) share a colour, so a reader learns one legend:
red is a sync, orange is data loading, purple is launch latency, blue is host work, green is the device
computing, reddish purple its collectives, sand is host time the trace does not show, greys are idle or
unexplained. The colours are the Okabe-Ito colour-blind-safe set, slightly
muted so that long bars stay readable; order the legend with ``CAUSES`` / ``KINDS``.

The timeline's raw events (kernels, host ops, runtime calls) are drawn in lighter tints of those colours:
same hue, so a kernel still reads as device work, but never the colour of the critical path or of a gap
cause drawn beside it ("critical: host" is not "host op").
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType

# base colours (named so that the three tables below stay consistent)
DEVICE = "#2a9d6f"  # green: the device computing
HOST = "#3b78b5"  # blue: host work
INPUT = "#e69f00"  # orange: data loading
LAUNCH = "#8e6bbf"  # purple: launch/submission latency
SYNC = "#d1495b"  # red: a blocking sync
DEPENDENCY = "#a6761d"  # brown: waiting on another stream / a collective
IDLE = "#c3c8cf"  # light grey: nothing running
IDLE_FILL = "#f6f7f9"  # the timeline's idle gaps: almost the background, hatched in the cause's colour
UNKNOWN = "#8a919b"  # grey: not explained
COMMUNICATION = "#cc79a7"  # reddish purple: collectives (NCCL/RCCL), transfer or waiting for other ranks
UNTRACED = "#d9cbb4"  # pale sand: host time the trace does not show
COPY = "#2bb0c7"  # teal: memcpy
MEMSET = "#c9bd52"  # olive: memset (apart from the kernels' green tint)
PYTHON = "#c8d9ee"  # very pale blue: python frames (apart from the host ops' tint)
ANNOTATION = "#b9c2cf"  # blue-grey: user annotations, ProfilerStep
OTHER = "#d5d9de"
COUNTER = "#5b4b8a"  # dark violet: counter lines (a value over time, not an interval)

#: Gap causes (``stallscope.analyzer.passes.gaps.Cause`` values), in legend order.
CAUSES: tuple[str, ...] = ("sync", "input", "launch", "dependency", "host", "untraced", "unknown")
#: Critical-path segment kinds (``stallscope.analyzer.passes.critical.Kind`` values), in legend order.
KINDS: tuple[str, ...] = ("device", "communication", "host", "input", "launch", "sync", "untraced", "idle")

CAUSE_COLORS: Mapping[str, str] = MappingProxyType(
    {
        "sync": SYNC,
        "input": INPUT,
        "launch": LAUNCH,
        "dependency": DEPENDENCY,
        "host": HOST,
        "untraced": UNTRACED,
        "unknown": UNKNOWN,
    }
)

KIND_COLORS: Mapping[str, str] = MappingProxyType(
    {
        "device": DEVICE,
        "communication": COMMUNICATION,
        "host": HOST,
        "input": INPUT,
        "launch": LAUNCH,
        "sync": SYNC,
        "untraced": UNTRACED,
        "idle": IDLE,
    }
)


def tint(colour: str, amount: float = 0.4) -> str:
    """``colour`` (``#rrggbb``) mixed with ``amount`` of white."""
    rgb = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in rgb)


#: Timeline event colours by ``stallscope.analyzer.core.names.EventKind`` name (lower case), plus ``sync_call`` for a
#: runtime call that blocked and ``launch_call`` for one that launched work: tints of the kind colours.
EVENT_COLORS: Mapping[str, str] = MappingProxyType(
    {
        "kernel": tint(DEVICE),
        "memcpy": COPY,
        "memset": MEMSET,
        "cpu_op": tint(HOST),
        "python": PYTHON,
        "annotation": ANNOTATION,
        "runtime": tint(LAUNCH),
        "driver": tint(LAUNCH),
        "launch_call": tint(LAUNCH),
        "sync_call": tint(SYNC),
        "sync": tint(SYNC),
        "gpu_annotation": ANNOTATION,
        "other": OTHER,
    }
)

SEVERITY_COLORS: Mapping[str, str] = MappingProxyType({"high": SYNC, "medium": INPUT, "low": UNKNOWN})

#: Page and chart chrome shared by report and dashboard.
FONT_FAMILY = (
    "-apple-system, BlinkMacSystemFont, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, 'Noto Sans', "
    "'Liberation Sans', 'DejaVu Sans', sans-serif"
)
MONO_FAMILY = "ui-monospace, SFMono-Regular, Menlo, Consolas, 'DejaVu Sans Mono', monospace"
TEXT = "#1f2933"
MUTED = "#616e7c"
GRID = "#e4e7eb"
BACKGROUND = "#ffffff"
CRITICAL_OUTLINE = "#111827"  # the critical path drawn over the timeline


def _key(value: str | Enum) -> str:
    if isinstance(value, Enum):
        return str(value.value if isinstance(value.value, str) else value.name).lower()
    return value.lower()


def cause_color(cause: str | Enum) -> str:
    """Colour of a gap cause (``Cause`` or its value); unknown names get the ``unknown`` grey."""
    return CAUSE_COLORS.get(_key(cause), UNKNOWN)


def kind_color(kind: str | Enum) -> str:
    """Colour of a critical-path kind (``Kind`` or its value); unknown names get the ``idle`` grey."""
    return KIND_COLORS.get(_key(kind), IDLE)


def event_color(kind: str | Enum) -> str:
    """Colour of a timeline event by ``EventKind`` (member or lower-case name)."""
    return EVENT_COLORS.get(_key(kind), OTHER)
