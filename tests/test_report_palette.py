"""The shared palette covers every cause and critical-path kind the analyzer can produce."""

from __future__ import annotations

import re

from analyzer.critical import Kind
from analyzer.gaps import Cause
from analyzer.names import EventKind
from dashboard import palette

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
    assert palette.event_color(EventKind.KERNEL) == palette.kind_color(Kind.DEVICE)
    assert palette.event_color(EventKind.MEMCPY) != palette.event_color(EventKind.KERNEL)


def test_unknown_names_fall_back_to_greys() -> None:
    assert palette.cause_color("nonsense") == palette.cause_color(Cause.UNKNOWN)
    assert palette.kind_color("nonsense") == palette.kind_color(Kind.IDLE)
