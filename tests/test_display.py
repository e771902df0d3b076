"""The view layer's shared words: one duration format everywhere, column scales, demangled kernel
names, code spans, rule titles, the evidence in words and the glossary file."""

from __future__ import annotations

from pathlib import Path

import pytest

from stallscope.dashboard import report
from stallscope.dashboard.pages import common
from stallscope.display import glossary, names, text, units
from stallscope.render import diff as render_diff
from stallscope.render import summary as render_summary

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize("us", [0.5, 2.0, 999.94, 1000.0, 1533.5, 8005.0, 1_234_567.0, -2500.0])
def test_terminal_report_and_dashboard_format_a_time_the_same(us: float) -> None:
    # GIVEN one value, WHEN each view formats it, THEN the text is the same
    shown = {render_summary.ms(us), report.ms(us), common.ms(us)}
    assert shown == {units.duration(us)}
    assert "us" not in units.duration(us).split()  # one unit spelling: µs


def test_durations_pick_ms_from_one_ms_up() -> None:
    assert units.duration(812.04) == "812.0 µs" and units.duration(1533.5) == "1.53 ms"
    assert units.duration(None) == common.ms(None) == "—"
    assert units.saving(8005.0) == "saves 8.01 ms" and units.saving(-3.0) == "saves 0.0 µs"
    assert render_diff.signed_ms(-1260.0) == units.signed(-1260.0) == "-1.26 ms"


def test_a_column_of_microsecond_waits_is_shown_in_microseconds() -> None:
    # GIVEN host waits of 2 µs to 62 µs, WHEN scaled as a column, THEN µs, not "0.002 ms"
    s = units.scale([2.0, 61.96, None])
    assert s.unit == "µs" and s.value(2.04) == 2.0 and s.header("host wait") == "host wait (µs)"
    big = units.scale([2.0, 1100.0])
    assert big.unit == "ms" and big.value(1100.0) == 1.1


def test_mangled_kernel_names_are_demangled_and_anything_else_is_kept() -> None:
    pytest.importorskip("pycxxfilt")
    raw = "_ZN7cutlass6KernelINS_4gemm6kernel4GemmEEEvNT_6ParamsE"
    assert (
        names.display_name(raw)
        == "void cutlass::Kernel<cutlass::gemm::kernel::Gemm>(cutlass::gemm::kernel::Gemm::Params)"
    )
    # not mangled, or not a name the demangler reads (hostile text): the raw name
    assert names.display_name("volta_sgemm_128x32_nt") == "volta_sgemm_128x32_nt"
    assert names.display_name("_Zgarbage<script>") == "_Zgarbage<script>"


def test_code_spans_split_advice_and_leave_unpaired_backticks_alone() -> None:
    parts = text.code_spans("use `torch.compile` or `x.item()` less; it`s fine")
    assert parts == [
        (False, "use "),
        (True, "torch.compile"),
        (False, " or "),
        (True, "x.item()"),
        (False, " less; it`s fine"),
    ]
    assert text.plain("a `b` c") == "a b c"


def test_rule_titles_are_words_and_an_unknown_rule_still_reads() -> None:
    assert text.rule_title("false_sync_blanket") == "Device-wide synchronize in the loop"
    assert text.rule_title("would_sync_scalar_read") == "Would sync on a GPU (scalar read)"
    assert text.rule_title("brand_new_rule") == "Brand new rule"


def test_the_evidence_says_what_each_speed_up_would_save_in_words() -> None:
    # GIVEN the verdict's sensitivities as the JSON has them
    verdict = {
        "path_share": {"host": 0.66, "device": 0.22, "input": 0.10, "launch": 0.001},
        "sensitivity_us": {"device": 1590.0, "host": 4180.0, "input": 1450.0, "sync": 1990.0, "launch": 30.0},
    }
    line = text.evidence_sentence(verdict, 0.456)
    # THEN the largest first, in words, and no set notation
    assert line.startswith("The critical path is host 66%, device 22%, input 10%; the GPU was busy 46%")
    assert "2× faster host would save 4.18 ms, no sync waits 1.99 ms, 2× faster compute 1.59 ms" in line
    assert "{" not in line and "launch 0%" not in line
    # a kind this version does not know still reads
    assert text.sensitivity_sentence({"communication_overlapped": 10.0}) == (
        "faster communication overlapped would save 10.0 µs"
    )


def test_the_pipeline_note_says_why_pipelined_exceeds_the_recorded_time() -> None:
    p = {"pipelined_us": 717_000.0}
    assert "less than the model's 717.00 ms" in text.pipeline_note(p, 667_000.0)
    assert "less than" not in text.pipeline_note(p, 800_000.0)


def test_docs_glossary_matches_the_glossary_the_views_use() -> None:
    assert (DOCS / "glossary.md").read_text(encoding="utf-8") == glossary.markdown()
    assert len({t.slug for t in glossary.TERMS}) == len(glossary.TERMS)


def test_chart_labels_read_a_time_as_the_cards_do() -> None:
    from stallscope.dashboard import charts

    # GIVEN 114 µs of idle (a card reads "114.0 µs"), WHEN drawn as a bar, THEN its label reads the same
    bar = charts._share_bars({"unknown": 114.0}, ("unknown",), {"unknown": "#888888"}, 1000.0)
    assert tuple(bar.text) == (f"{units.duration(114.0)} (11%)",) == ("114.0 µs (11%)",)


def test_code_spans_in_html_are_escaped_inside_and_out() -> None:
    # GIVEN hostile trace text inside and outside a code span, WHEN rendered as HTML, THEN text only
    out = str(report.code_html("`<script>alert(1)</script>` & <b>x</b>"))
    assert out == "<code>&lt;script&gt;alert(1)&lt;/script&gt;</code> &amp; &lt;b&gt;x&lt;/b&gt;"


def test_analyzer_prose_spells_microseconds_as_the_numbers_do() -> None:
    assert (
        text.prose_units("261 launches of 3.0 us median kernels") == "261 launches of 3.0 µs median kernels"
    )
    assert text.prose_units("10 users in the bus, 3 us") == "10 users in the bus, 3 µs"
