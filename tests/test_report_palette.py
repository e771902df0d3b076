"""The shared palette covers every cause and critical-path kind the analyzer can produce."""

from __future__ import annotations

import re

from stallscope.analyzer.core.names import EventKind
from stallscope.analyzer.passes.critical import Kind
from stallscope.analyzer.passes.gaps import Cause
from stallscope.dashboard import palette

_HEX = re.compile(r"^#[0-9a-f]{6}$")


def test_every_cause_and_kind_has_one_distinct_colour() -> None:
    assert set(palette.CAUSES) == {c.value for c in Cause}
    assert set(palette.KINDS) == {k.value for k in Kind}
    causes = [palette.cause_color(c) for c in Cause]
    kinds = [palette.kind_color(k) for k in Kind]
    assert len(set(causes)) == len(causes)
    assert len(set(kinds)) == len(kinds)
    assert all(_HEX.match(c) for c in causes + kinds)


def test_shared_names_share_colours_and_enums_equal_their_values() -> None:
    for name in ("sync", "input", "launch", "host"):
        assert palette.cause_color(name) == palette.kind_color(name)
    assert palette.cause_color(Cause.DEPENDENCY) == palette.cause_color("dependency")
    # raw events are lighter tints of their kind: a kernel reads as device work, host ops as host work
    assert palette.event_color(EventKind.KERNEL) == palette.tint(palette.kind_color(Kind.DEVICE)) == "#7fc4a9"
    assert palette.event_color(EventKind.CPU_OP) == palette.tint(palette.kind_color(Kind.HOST))
    assert palette.event_color(EventKind.MEMCPY) != palette.event_color(EventKind.KERNEL)


def test_no_timeline_event_shares_a_colour_with_a_critical_kind_or_a_gap_cause() -> None:
    # "critical: host" beside "host op", "critical: sync" beside "blocking call" must be told apart
    strong = set(palette.KIND_COLORS.values()) | set(palette.CAUSE_COLORS.values())
    assert not {k for k, c in palette.EVENT_COLORS.items() if c in strong}
    assert palette.event_color("python") != palette.event_color("cpu_op")


def test_unknown_names_fall_back_to_greys() -> None:
    assert palette.cause_color("nonsense") == palette.cause_color(Cause.UNKNOWN)
    assert palette.kind_color("nonsense") == palette.kind_color(Kind.IDLE)
